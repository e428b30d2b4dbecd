// Package rpc builds the HTTP/2 servers and Connect clients every Glint process
// uses, and parses the URLs by which processes name each other.
package rpc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace"

	"github.com/glint-cluster/glint/pkg/telemetry"
)

// Server timeouts. Every Glint RPC is unary and small, so requests must arrive quickly.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 30 * time.Second
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 64 << 10
	shutdownTimeout   = 5 * time.Second
	hangUpGrace       = 250 * time.Millisecond
)

// NewServer returns an http.Server for handler speaking HTTP/1.1 and
// unencrypted HTTP/2, with its connections bounded (conns.go): at most
// maxConns open, maxUnauthConns of them unauthenticated (maxUnauthPerAddr
// from one address), those closed after unauthIdleTimeout idle, and at most
// maxConcurrentStreams HTTP/2 streams on each.
func NewServer(handler http.Handler) *http.Server { return newServer(handler, defaultConnLimits()) }

func newServer(handler http.Handler, limits connLimits) *http.Server {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	var tlsConfig *tls.Config
	if processTLS != nil {
		protocols.SetUnencryptedHTTP2(false)
		protocols.SetHTTP2(true)
		tlsConfig = processTLS.server
	}
	conns := newConns(limits)
	return &http.Server{
		TLSConfig:         tlsConfig,
		Handler:           handler,
		Protocols:         &protocols,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: maxConcurrentStreams},
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnContext:       conns.admit,
		ConnState:         conns.state,
	}
}

// Serve serves handler on ln until ctx is done, then shuts the server down,
// giving in-flight requests a few seconds to finish. Idle HTTP/2 clients are
// not waited for (the server would give each a second to hang up): once no
// request is in flight and every answer was written out (no connection is
// active), the remaining connections are closed.
//
// A request whose Host is not a name of the listener is refused with 421
// before anything else (host.go): its names are localhost, any IP address,
// hosts (the host of the process's URL, its --host and --allowed-host) and,
// on an unspecified address, this machine's host name.
func Serve(ctx context.Context, ln net.Listener, handler http.Handler, hosts ...string) error {
	return serve(ctx, ln, handler, defaultConnLimits(), hosts)
}

func serve(ctx context.Context, ln net.Listener, handler http.Handler, limits connLimits, hosts []string) error {
	var inflight, lastAnswer atomic.Int64
	srv := newServer(checkHost(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inflight.Add(1)
		defer inflight.Add(-1)
		defer func() { lastAnswer.Store(time.Now().UnixNano()) }()
		handler.ServeHTTP(w, r)
	}), listenerHosts(ln, hosts)), limits)
	// A connection is active from a request's first byte until its answer's
	// last (for HTTP/2: while any stream is open), which is later than the
	// handler's return.
	var mu sync.Mutex
	active := map[net.Conn]bool{}
	bound := srv.ConnState
	srv.ConnState = func(c net.Conn, state http.ConnState) {
		bound(c, state)
		mu.Lock()
		defer mu.Unlock()
		if state == http.StateActive {
			active[c] = true
		} else {
			delete(active, c)
		}
	}
	busy := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return inflight.Load() > 0 || len(active) > 0
	}
	if srv.TLSConfig != nil {
		ln = tls.NewListener(ln, srv.TLSConfig)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(sctx) }()
	for busy() && sctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	// An answer given just now may still sit in a connection's buffer: give
	// its peer until hangUpGrace after it to read it and hang up before
	// closing what is left. Idle peers are not waited for.
	wait := hangUpGrace - time.Since(time.Unix(0, lastAnswer.Load()))
	var err error
	select {
	case err = <-shut:
	case <-time.After(max(wait, 0)):
		srv.Close()
		<-shut
	}
	if err != nil {
		return fmt.Errorf("shut down %s: %w", ln.Addr(), err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	}
	return nil
}

// NewHTTPClient returns a client that speaks HTTP/2 to Glint servers:
// unencrypted, or over TLS after UseTLS.
func NewHTTPClient() *http.Client { return newHTTPClient(true) }

// NewHTTP1Client returns a client that speaks HTTP/1.1 with keep-alive to
// Glint servers, for a caller whose calls are small and one at a time — a
// worker's heartbeats and reports to its master. Such a call costs the server
// less CPU over HTTP/1.1 than as an HTTP/2 stream (no goroutine per stream, no
// frame writer handing the answer on; make bench's row 6 weighs it), and one
// call at a time has no use for HTTP/2's multiplexing.
func NewHTTP1Client() *http.Client { return newHTTPClient(false) }

func newHTTPClient(http2 bool) *http.Client {
	var protocols http.Protocols
	var tlsConfig *tls.Config
	switch {
	case !http2:
		protocols.SetHTTP1(true)
	case processTLS != nil:
		protocols.SetHTTP2(true)
	default:
		protocols.SetUnencryptedHTTP2(true)
	}
	if processTLS != nil {
		tlsConfig = processTLS.client
	}
	return &http.Client{
		Transport: &http.Transport{
			TLSClientConfig:     tlsConfig,
			Protocols:           &protocols,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 4,
			IdleConnTimeout:     idleTimeout,
		},
		Timeout: time.Minute,
	}
}

// ClientOptions are the options every Connect client in Glint is built with:
// its calls are traced through tp and carry token as their bearer token
// ("" sends none).
func ClientOptions(tp trace.TracerProvider, token string) []connect.ClientOption {
	return []connect.ClientOption{connect.WithInterceptors(telemetry.Interceptor(tp), bearer(token))}
}

// handlerOptions are the options every Connect handler in Glint is built with:
// its calls are traced through tp, as children of the caller's span.
func handlerOptions(tp trace.TracerProvider) []connect.HandlerOption {
	return []connect.HandlerOption{connect.WithInterceptors(telemetry.Interceptor(tp))}
}

// NormalizeURL turns "host:port", "glint://host:port", "spark://host:port"
// and "https://host:port" into "http://host:port" — into "https://…" after
// UseTLS, as every Glint process of a cluster speaks the same.
func NormalizeURL(s string) (string, error) {
	raw := strings.TrimSpace(s)
	for _, prefix := range []string{"glint://", "spark://", "http://", "https://"} {
		if rest, ok := strings.CutPrefix(raw, prefix); ok {
			raw = scheme() + "://" + rest
		}
	}
	if !strings.Contains(raw, "://") {
		raw = scheme() + "://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("url %q: %w", s, err)
	}
	if u.Scheme != scheme() {
		return "", fmt.Errorf("url %q: scheme %q is not supported (want http, https, glint or spark)", s, u.Scheme)
	}
	if u.Hostname() == "" || u.Port() == "" {
		return "", fmt.Errorf("url %q: want host:port", s)
	}
	if p, err := strconv.Atoi(u.Port()); err != nil || p < 1 || p > 65535 {
		return "", fmt.Errorf("url %q: port %q out of range", s, u.Port())
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return "", fmt.Errorf("url %q: want only scheme, host and port", s)
	}
	return scheme() + "://" + u.Host, nil
}

// MatchURL returns the entry of urls that names the same scheme, host and
// port as u, all normalized (NormalizeURL): host names compared without
// regard to case, addresses by value, ports as numbers. A driver or worker
// follows only the masters it was given: MatchURL picks among them the one
// a master's announcement names; false when it names none of them.
func MatchURL(urls []string, u string) (string, bool) {
	for _, c := range urls {
		if sameURL(c, u) {
			return c, true
		}
	}
	return "", false
}

func sameURL(a, b string) bool {
	ua, errA := url.Parse(a)
	ub, errB := url.Parse(b)
	if errA != nil || errB != nil || ua.Scheme != ub.Scheme {
		return false
	}
	pa, errA := strconv.Atoi(ua.Port())
	pb, errB := strconv.Atoi(ub.Port())
	if errA != nil || errB != nil || pa != pb {
		return false
	}
	ha, hb := ua.Hostname(), ub.Hostname()
	if x, err := netip.ParseAddr(ha); err == nil {
		y, err := netip.ParseAddr(hb)
		return err == nil && x.Unmap() == y.Unmap()
	}
	return strings.EqualFold(ha, hb)
}

// ParseURLs parses a comma-separated list of URLs, as in --master a,b.
func ParseURLs(list string) ([]string, error) {
	var out []string
	for part := range strings.SplitSeq(list, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		u, err := NormalizeURL(part)
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no URL in %q", list)
	}
	return out, nil
}

// HostPort splits a normalized URL into its host and port.
func HostPort(rawURL string) (string, int, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", 0, fmt.Errorf("url %q: %w", rawURL, err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return "", 0, fmt.Errorf("url %q: no port", rawURL)
	}
	return u.Hostname(), port, nil
}

// AdvertiseHost returns the local address by which peers at targets (URLs:
// the masters of one cluster) can reach this machine: the source address the
// kernel picks for a route to the first target that resolves and has a
// route. A master that is down may have neither (a stopped container's name
// leaves the network's DNS); any other will do. No packet is sent.
func AdvertiseHost(targets ...string) (string, error) {
	var errs []error
	for _, target := range targets {
		host, port, err := HostPort(target)
		if err != nil {
			return "", err
		}
		conn, err := net.Dial("udp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			errs = append(errs, fmt.Errorf("find local address towards %s: %w", target, err))
			continue
		}
		ip := conn.LocalAddr().(*net.UDPAddr).IP.String()
		conn.Close()
		return ip, nil
	}
	if len(errs) == 0 {
		return "", errors.New("find local address: no target")
	}
	return "", errors.Join(errs...)
}

// URL returns "http://host:port" (https after UseTLS) for a listener address, replacing an unspecified
// listen host (":7077", "0.0.0.0") with advertise.
func URL(addr net.Addr, advertise string) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return scheme() + "://" + addr.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = advertise
	}
	return scheme() + "://" + net.JoinHostPort(host, port)
}
