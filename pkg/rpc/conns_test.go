package rpc

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/glint-cluster/glint/pkg/telemetry/prom"
)

// limitedToken is the token the servers of these tests accept.
const limitedToken = "limited-test-token-0123456789"

// serveLimited serves the echo procedure (which needs limitedToken; with
// insecure, no token) and /healthz as a process does, with limits, until
// the test ends, and returns the listener's address.
func serveLimited(t *testing.T, limits connLimits, insecure bool) string {
	t.Helper()
	tokens := NewTokens()
	tokens.Add(Cluster, limitedToken)
	if insecure {
		tokens = nil
	}
	h := NewHandler(Endpoints{
		Service: func(o ...connect.HandlerOption) (string, http.Handler) {
			return echoProcedure, connect.NewUnaryHandler(echoProcedure,
				func(_ context.Context, r *connect.Request[wrapperspb.BytesValue]) (*connect.Response[wrapperspb.BytesValue], error) {
					return connect.NewResponse(r.Msg), nil
				}, o...)
		},
		TracerProvider: noop.NewTracerProvider(),
		Metrics:        prom.Handler(prom.NewRegistry()),
		Tokens:         tokens,
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- serve(ctx, ln, h, limits, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Error(err)
		}
	})
	return ln.Addr().String()
}

// testConn is a client's HTTP/1.1 connection from one loopback address.
type testConn struct {
	net.Conn
	r *bufio.Reader
}

// dialFrom connects to addr from 127.0.0.last and waits until the server
// has taken the connection in (its /healthz answered).
func dialFrom(t *testing.T, addr string, last byte) *testConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, last)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	tc := &testConn{Conn: c, r: bufio.NewReader(c)}
	tc.mustAnswer(t)
	return tc
}

// call makes one request on the connection and returns its status.
func (c *testConn) call(method, path, token string) (int, error) {
	req, err := http.NewRequest(method, "http://127.0.0.1"+path, strings.NewReader(""))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/proto")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return 0, err
	}
	if err := req.Write(c); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(c.r, req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

// mustAnswer checks that the connection is open: its /healthz is answered.
func (c *testConn) mustAnswer(t *testing.T) {
	t.Helper()
	if code, err := c.call(http.MethodGet, "/healthz", ""); err != nil || code != http.StatusOK {
		t.Fatalf("GET /healthz from %s: %d, %v; want 200 on an open connection", c.LocalAddr(), code, err)
	}
}

// authenticate makes a call with the token, which authenticates the
// connection.
func (c *testConn) authenticate(t *testing.T) {
	t.Helper()
	if code, err := c.call(http.MethodPost, echoProcedure, limitedToken); err != nil || code != http.StatusOK {
		t.Fatalf("call with the token from %s: %d, %v", c.LocalAddr(), code, err)
	}
}

// waitClosed waits until the server has closed the connection.
func (c *testConn) waitClosed(t *testing.T) {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err := c.r.ReadByte()
	var ne net.Error
	if err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection from %s: %v; want it closed by the server", c.LocalAddr(), err)
	}
}

// Neither a /healthz nor a refused call authenticates a connection: the
// oldest of them is closed for a new one once maxUnauth are open, and the
// others stay.
func TestTheOldestUnauthenticatedConnectionMakesRoomForANewOne(t *testing.T) {
	addr := serveLimited(t, connLimits{conns: 100, unauth: 3, perAddr: 3, unauthIdle: time.Hour}, false)
	a := dialFrom(t, addr, 1)
	if code, err := a.call(http.MethodPost, echoProcedure, "not-the-token-0123456789"); err != nil || code != http.StatusUnauthorized {
		t.Fatalf("call with a wrong token: %d, %v; want 401", code, err)
	}
	b, c := dialFrom(t, addr, 2), dialFrom(t, addr, 3)
	d := dialFrom(t, addr, 4)
	a.waitClosed(t)
	for _, open := range []*testConn{b, c, d} {
		open.mustAnswer(t)
	}
}

// One address holds at most its share of the unauthenticated connections:
// a new one from it closes its own oldest, not another address's.
func TestOneAddressHoldsOnlyItsShareOfUnauthenticatedConnections(t *testing.T) {
	addr := serveLimited(t, connLimits{conns: 100, unauth: 10, perAddr: 2, unauthIdle: time.Hour}, false)
	other := dialFrom(t, addr, 2)
	a, b := dialFrom(t, addr, 1), dialFrom(t, addr, 1)
	c := dialFrom(t, addr, 1)
	a.waitClosed(t)
	for _, open := range []*testConn{other, b, c} {
		open.mustAnswer(t)
	}
}

// An authenticated connection is neither closed to make room nor counted in
// its address's share.
func TestAnAuthenticatedConnectionIsNotClosedToMakeRoom(t *testing.T) {
	for _, insecure := range []bool{false, true} {
		addr := serveLimited(t, connLimits{conns: 100, unauth: 2, perAddr: 2, unauthIdle: time.Hour}, insecure)
		authed := dialFrom(t, addr, 1)
		authed.authenticate(t)
		a, b := dialFrom(t, addr, 1), dialFrom(t, addr, 1)
		c := dialFrom(t, addr, 1)
		a.waitClosed(t)
		for _, open := range []*testConn{authed, b, c} {
			open.mustAnswer(t)
		}
	}
}

// An unauthenticated connection is closed once idle for unauthIdle; an
// authenticated one idle for longer is not.
func TestAnIdleUnauthenticatedConnectionIsClosed(t *testing.T) {
	addr := serveLimited(t, connLimits{conns: 100, unauth: 10, perAddr: 10, unauthIdle: 100 * time.Millisecond}, false)
	authed := dialFrom(t, addr, 1)
	authed.authenticate(t)
	idle := dialFrom(t, addr, 2)
	idle.waitClosed(t)
	authed.mustAnswer(t)
}

// A listener holding its most connections closes the oldest
// unauthenticated one for a new one, or with none the new one.
func TestAFullListenerClosesAnUnauthenticatedConnectionOrTheNewOne(t *testing.T) {
	addr := serveLimited(t, connLimits{conns: 2, unauth: 2, perAddr: 2, unauthIdle: time.Hour}, false)
	a := dialFrom(t, addr, 1)
	a.authenticate(t)
	b := dialFrom(t, addr, 2)
	c := dialFrom(t, addr, 3)
	b.waitClosed(t)
	c.authenticate(t)
	d, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	refused := &testConn{Conn: d, r: bufio.NewReader(d)}
	refused.waitClosed(t)
	a.mustAnswer(t)
	c.mustAnswer(t)
}

// The server's HTTP/2 SETTINGS bound the streams a connection may open.
func TestHTTP2StreamsPerConnectionAreBounded(t *testing.T) {
	addr := serveLimited(t, defaultConnLimits(), false)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 0x4, 0, 0, 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	// The server's first frame is its SETTINGS: 6 bytes per setting.
	header := make([]byte, 9)
	if _, err := io.ReadFull(c, header); err != nil {
		t.Fatal(err)
	}
	if header[3] != 0x4 {
		t.Fatalf("first frame of type %d, want SETTINGS (4)", header[3])
	}
	payload := make([]byte, int(header[0])<<16|int(header[1])<<8|int(header[2]))
	if _, err := io.ReadFull(c, payload); err != nil {
		t.Fatal(err)
	}
	for s := payload; len(s) >= 6; s = s[6:] {
		if binary.BigEndian.Uint16(s) == 0x3 { // SETTINGS_MAX_CONCURRENT_STREAMS
			if got := binary.BigEndian.Uint32(s[2:]); got != maxConcurrentStreams {
				t.Fatalf("MAX_CONCURRENT_STREAMS %d, want %d", got, maxConcurrentStreams)
			}
			return
		}
	}
	t.Fatal("the server's SETTINGS do not bound concurrent streams")
}

// With the file limit a master needs, a listener holds more connections
// than the master's 10,000 workers and the unauthenticated ones besides.
func TestAListenerHoldsMoreThanTenThousandWorkers(t *testing.T) {
	limits := defaultConnLimits()
	if limits.conns < maxConns {
		t.Skipf("the limit of open files allows %d connections (ulimit -n)", limits.conns)
	}
	if limits.conns <= 10_000+limits.unauth {
		t.Fatalf("%d connections, want more than 10,000 workers and %d unauthenticated", limits.conns, limits.unauth)
	}
}

// An IPv6 client counts by its /64, which one client usually holds whole.
func TestAClientAddressIsAnIPv4AddressOrAnIPv6Prefix(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.1:7077":              "10.0.0.1",
		"[::ffff:10.0.0.1]:7077":     "10.0.0.1",
		"[2001:db8:1:2:3:4:5:6]:1":   "2001:db8:1:2::",
		"[2001:db8:1:2:ffff::9]:443": "2001:db8:1:2::",
	} {
		a, err := net.ResolveTCPAddr("tcp", in)
		if err != nil {
			t.Fatal(err)
		}
		if got := clientAddr(a).String(); got != want {
			t.Errorf("clientAddr(%s) = %s, want %s", in, got, want)
		}
	}
}
