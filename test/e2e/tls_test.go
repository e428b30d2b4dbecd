package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testPKI writes a CA and one certificate it signed for 127.0.0.1 and
// localhost, good for servers and clients, and returns the files.
func testPKI(t *testing.T) (cert, key, ca string) {
	t.Helper()
	ca, leaves := writePKI(t, t.TempDir(), 0o600)
	return leaves[0][0], leaves[0][1], ca
}

// writePKI writes into dir a CA and a certificate it signed, as testPKI's,
// for each of perms, with its file modes (the CA's readable by all), and
// returns the CA and the certificates and keys.
func writePKI(t *testing.T, dir string, perms ...os.FileMode) (ca string, leaves [][2]string) {
	t.Helper()
	write := func(name, kind string, der []byte, perm os.FileMode) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), perm); err != nil {
			t.Fatal(err)
		}
		return path
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTemplate := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "glint test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca = write("ca.crt", "CERTIFICATE", caDER, 0o644)
	for i, perm := range perms {
		leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		leaf := &x509.Certificate{
			SerialNumber: big.NewInt(int64(2 + i)), Subject: pkix.Name{CommonName: "glint"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		}
		leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caTemplate, &leafKey.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalECPrivateKey(leafKey)
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("glint-%d", i)
		leaves = append(leaves, [2]string{write(name+".crt", "CERTIFICATE", leafDER, perm), write(name+".key", "EC PRIVATE KEY", keyDER, perm)})
	}
	return ca, leaves
}

func TestTheLaunchPathRunsOverMutualTLS(t *testing.T) {
	t.Parallel()
	cert, key, ca := testPKI(t)
	env := []string{"GLINT_TLS_CERT_FILE=" + cert, "GLINT_TLS_KEY_FILE=" + key, "GLINT_TLS_CA_FILE=" + ca}
	c := startClusterWithEnv(t, env, 2)
	if !strings.HasPrefix(c.master.url, "https://") {
		t.Fatalf("the master serves at %s, want https", c.master.url)
	}
	// Client mode, then cluster mode: every process, executors and the
	// cluster-mode driver included, speaks TLS with the worker's files.
	stdout, stderr, err := glintWithEnv(t, env, "submit", "--master", c.master.url, "--executor-cores", "1",
		"--executor-memory", "256m", "--log-level", "warn", "pi", "8")
	if err != nil || !piResult.MatchString(stdout) {
		t.Fatalf("client-mode pi over TLS: %v\n%s\n%s", err, stdout, stderr)
	}
	stdout, stderr, err = glintWithEnv(t, env, "submit", "--master", c.master.url, "--deploy-mode", "cluster", "--wait",
		"--driver-memory", "256m", "--executor-memory", "256m", "--total-executor-cores", "2", "pi", "4")
	if err != nil {
		t.Fatalf("cluster-mode pi over TLS: %v\n%s\n%s", err, stdout, stderr)
	}
	c.waitFor(t, "both applications finished", func(s masterJSON) bool {
		return len(s.CompletedApps) == 2 && s.CompletedApps[0].State == "FINISHED" && s.CompletedApps[1].State == "FINISHED"
	})
	// Only a caller with a certificate the CA signed is answered.
	noCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: c.client.Transport.(*http.Transport).TLSClientConfig.RootCAs}}}
	if resp, err := noCert.Get(c.master.url + "/healthz"); err == nil {
		resp.Body.Close()
		t.Errorf("a caller without a client certificate was answered %s", resp.Status)
	}
	if resp, err := http.Get(strings.Replace(c.master.url, "https://", "http://", 1) + "/healthz"); err == nil && resp.StatusCode == http.StatusOK {
		resp.Body.Close()
		t.Errorf("the master answers plain HTTP")
	}
}

func TestAPrestartedExecutorWarmsUpAndIsClaimedOverMutualTLS(t *testing.T) {
	t.Parallel()
	cert, key, ca := testPKI(t)
	env := []string{"GLINT_TLS_CERT_FILE=" + cert, "GLINT_TLS_KEY_FILE=" + key, "GLINT_TLS_CA_FILE=" + ca}
	c := startSizedCluster(t, env, 1, 2, []string{"--prestart-executors", "1"})
	standby := idleStandby(t, c)
	stdout, stderr, err := glintWithEnv(t, env, "submit", "--master", c.master.url, "--executor-cores", "1",
		"--total-executor-cores", "1", "--executor-memory", "256m", "--log-level", "warn", "pi", "2")
	if err != nil || !piResult.MatchString(stdout) {
		t.Fatalf("submit over TLS: %v\n%s\n%s", err, stdout, stderr)
	}
	var ended []finishedExecutor
	waitUntil(t, "the executor's end recorded", func() bool {
		ended = c.worker(t, 0).FinishedExecutors
		return len(ended) > 0
	})
	if len(ended) != 1 || ended[0].PID != standby {
		t.Fatalf("finished executors %+v, want the prestarted process %d", ended, standby)
	}
	// Its warm-up before the claim called its stand-in driver over TLS too.
	if log := readFile(filepath.Join(c.workDirs[0], ended[0].AppID, "0", "stderr")); strings.Contains(log, "warm-up before the claim failed") {
		t.Errorf("the prestarted executor's warm-up failed over TLS:\n%s", log)
	}
}
