package rpc

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// TLSFiles are a process's TLS identity: its certificate and key (PEM), and
// the CA that signs the certificates of every Glint process. With a CA, TLS
// is mutual: servers ask callers for a certificate the CA signed, and
// clients check servers against the CA rather than the system's roots.
type TLSFiles struct {
	Cert, Key, CA string
}

// processTLS is the process's TLS, or nil for unencrypted HTTP/2. Every
// listener and client of a process speaks the same way, so it is set once,
// at start (UseTLS), rather than threaded through every service's config.
var processTLS *tlsConfigs

type tlsConfigs struct {
	server, client *tls.Config
}

// UseTLS makes every listener (Serve) and client (NewHTTPClient) of this
// process speak TLS with f, and every URL it makes https; with no
// certificate it keeps unencrypted HTTP/2. Call it once, before serving or
// calling anything.
func UseTLS(f TLSFiles) error {
	if f.Cert == "" && f.Key == "" && f.CA == "" {
		processTLS = nil
		return nil
	}
	if f.Cert == "" || f.Key == "" {
		return errors.New("--tls-cert-file and --tls-key-file go together")
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return fmt.Errorf("--tls-cert-file, --tls-key-file: %w", err)
	}
	server := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13, NextProtos: []string{"h2", "http/1.1"}}
	client := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return fmt.Errorf("--tls-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--tls-ca-file %s: no PEM certificate in it", f.CA)
		}
		server.ClientCAs, server.ClientAuth = pool, tls.RequireAndVerifyClientCert
		client.RootCAs = pool
	}
	processTLS = &tlsConfigs{server: server, client: client}
	return nil
}

// scheme is the scheme of this process's URLs.
func scheme() string {
	if processTLS != nil {
		return "https"
	}
	return "http"
}
