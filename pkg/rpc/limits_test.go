package rpc

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/glint-cluster/glint/pkg/telemetry/prom"
)

// echoServer serves one Connect procedure through NewHandler and counts the
// calls that reached it; deadline is the deadline the last call saw.
type echoServer struct {
	url      string
	calls    atomic.Int64
	deadline atomic.Value
	// message is the message of the last error answer.
	message string
}

const echoProcedure = "/glint.test.v1.TestService/Echo"

func newEchoServer(t *testing.T) *echoServer {
	t.Helper()
	e := &echoServer{}
	h := NewHandler(Endpoints{
		Service: func(o ...connect.HandlerOption) (string, http.Handler) {
			return echoProcedure, connect.NewUnaryHandler(echoProcedure,
				func(ctx context.Context, r *connect.Request[wrapperspb.BytesValue]) (*connect.Response[wrapperspb.BytesValue], error) {
					e.calls.Add(1)
					d, _ := ctx.Deadline()
					e.deadline.Store(d)
					return connect.NewResponse(r.Msg), nil
				}, o...)
		},
		TracerProvider: noop.NewTracerProvider(),
		Metrics:        prom.Handler(prom.NewRegistry()),
	})
	hs := httptest.NewUnstartedServer(h)
	hs.Config = NewServer(h)
	hs.Start()
	t.Cleanup(hs.Close)
	e.url = hs.URL
	return e
}

// post sends body as one Connect unary call and returns the Connect code of
// the answer ("" for success).
func (e *echoServer) post(t *testing.T, body io.Reader, header http.Header) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.url+echoProcedure, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/proto")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return ""
	}
	var wire struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&wire); err != nil {
		t.Fatalf("status %d, undecodable error body: %v", resp.StatusCode, err)
	}
	t.Logf("answer: %s: %s", wire.Code, wire.Message)
	e.message = wire.Message
	return wire.Code
}

// gzipped returns b compressed fast.
func gzipped(b []byte) *bytes.Buffer {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	zw.Write(b)
	zw.Close()
	return &buf
}

// twoLetters returns n random bytes, each 'a' or 'b'.
func twoLetters(n int) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(rng.IntN(2))
	}
	return b
}

// zeros is an endless source of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// counted counts the bytes read from r.
type counted struct {
	r io.Reader
	n atomic.Int64
}

func (c *counted) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func TestReadLimitRefuses50MBBody(t *testing.T) {
	e := newEchoServer(t)
	body := &counted{r: io.LimitReader(zeros{}, 50<<20)}
	if code := e.post(t, body, nil); code != "resource_exhausted" {
		t.Fatalf("50 MB body: code %q, want resource_exhausted", code)
	}
	if n := e.calls.Load(); n != 0 {
		t.Errorf("handler ran %d times", n)
	}
	// The server stops reading at MaxBodyBytes instead of draining the body.
	if n := body.n.Load(); n > 16<<20 {
		t.Errorf("the server read %d MiB of the body", n>>20)
	}
}

func TestReadLimitRefusesMessageJustOverIt(t *testing.T) {
	e := newEchoServer(t)
	msg, _ := proto.Marshal(wrapperspb.Bytes(make([]byte, ReadMaxBytes+1<<10)))
	if code := e.post(t, bytes.NewReader(msg), nil); code != "resource_exhausted" {
		t.Fatalf("message of %d bytes: code %q, want resource_exhausted", len(msg), code)
	}
	if n := e.calls.Load(); n != 0 {
		t.Errorf("handler ran %d times", n)
	}
}

func TestReadLimitAppliesAfterDecompression(t *testing.T) {
	e := newEchoServer(t)
	// 5 MiB of two letters at random compresses about 8:1: under the body
	// limit and the inflate ratio, over the message limit once inflated.
	msg, _ := proto.Marshal(wrapperspb.Bytes(twoLetters(5 << 20)))
	buf := gzipped(msg)
	if code := e.post(t, buf, http.Header{"Content-Encoding": {"gzip"}}); code != "resource_exhausted" {
		t.Fatalf("5 MiB inflated from %d bytes: code %q, want resource_exhausted", buf.Len(), code)
	}
	// Cut off by Glint's decompressor, not inflated in full and counted.
	if !strings.Contains(e.message, "inflates to more than the limit") {
		t.Errorf("message %q", e.message)
	}
	if n := e.calls.Load(); n != 0 {
		t.Errorf("handler ran %d times", n)
	}
}

// gzipBomb returns about 1 MB of gzip that inflates to 1 GiB of zeros: one
// member of 16 MiB, repeated (a gzip stream may have many members).
var gzipBomb = sync.OnceValue(func() []byte {
	var member bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&member, gzip.BestCompression)
	io.Copy(zw, io.LimitReader(zeros{}, 16<<20))
	zw.Close()
	return bytes.Repeat(member.Bytes(), 64)
})

func TestGzipBombIsCutOffAtTheLimit(t *testing.T) {
	e := newEchoServer(t)
	bomb := gzipBomb()
	t.Logf("bomb: %d bytes of gzip, 1 GiB inflated", len(bomb))
	if code := e.post(t, bytes.NewReader(bomb), http.Header{"Content-Encoding": {"gzip"}}); code != "resource_exhausted" {
		t.Fatalf("gzip bomb: code %q, want resource_exhausted", code)
	}
	if n := e.calls.Load(); n != 0 {
		t.Errorf("handler ran %d times", n)
	}
}

func TestBoundedGzipStopsAtTheLimitOrRatio(t *testing.T) {
	for name, compressed := range map[string][]byte{
		"ratio": gzipBomb(),                           // 1000:1, stopped by the ratio after 1 MiB
		"limit": gzipped(twoLetters(5 << 20)).Bytes(), // 8:1, stopped by the limit
	} {
		t.Run(name, func(t *testing.T) {
			g := &boundedGzip{limit: ReadMaxBytes}
			if err := g.Reset(bytes.NewReader(compressed)); err != nil {
				t.Fatal(err)
			}
			n, err := io.Copy(io.Discard, g)
			if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), name) {
				t.Fatalf("inflated %d bytes, err %v; want ResourceExhausted", n, err)
			}
			if n > ReadMaxBytes+64<<10 {
				t.Errorf("inflated %d bytes before stopping, want at most about %d", n, ReadMaxBytes)
			}
		})
	}
	// An ordinary compressible message inflates in full.
	g := &boundedGzip{limit: ReadMaxBytes}
	g.Reset(gzipped([]byte(strings.Repeat("glint ", 100_000))))
	if n, err := io.Copy(io.Discard, g); err != nil || n != 600_000 {
		t.Errorf("ordinary message: %d bytes, %v", n, err)
	}
}

func TestSmallMessagesPassWithAndWithoutGzip(t *testing.T) {
	e := newEchoServer(t)
	for _, compress := range []bool{false, true} {
		opts := []connect.ClientOption{}
		if compress {
			opts = append(opts, connect.WithSendGzip())
		}
		c := connect.NewClient[wrapperspb.BytesValue, wrapperspb.BytesValue](http.DefaultClient, e.url+echoProcedure, opts...)
		in := twoLetters(256 << 10)
		resp, err := c.CallUnary(context.Background(), connect.NewRequest(wrapperspb.Bytes(in)))
		if err != nil || !bytes.Equal(resp.Msg.GetValue(), in) {
			t.Fatalf("gzip=%v: 256 KiB message: %v", compress, err)
		}
	}
}

func TestClientDeadlineIsCapped(t *testing.T) {
	e := newEchoServer(t)
	msg, _ := proto.Marshal(wrapperspb.Bytes([]byte("hi")))
	before := time.Now()
	if code := e.post(t, bytes.NewReader(msg), http.Header{"Connect-Timeout-Ms": {"9999999999"}}); code != "" {
		t.Fatalf("code %q", code)
	}
	d, _ := e.deadline.Load().(time.Time)
	if d.IsZero() || d.After(before.Add(MaxCallTimeout+time.Second)) {
		t.Errorf("handler's deadline %v, want within %v of the call", d, MaxCallTimeout)
	}
}

func TestOnlyAnswersOfAKiBOrMoreAreGzipped(t *testing.T) {
	e := newEchoServer(t)
	for _, tc := range []struct {
		size int
		want string
	}{{compressMinBytes - 64, ""}, {4 * compressMinBytes, "gzip"}} {
		msg, _ := proto.Marshal(wrapperspb.Bytes(twoLetters(tc.size)))
		req, err := http.NewRequest(http.MethodPost, e.url+echoProcedure, bytes.NewReader(msg))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/proto")
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Content-Encoding"); resp.StatusCode != http.StatusOK || got != tc.want {
			t.Errorf("answer of %d bytes: %s, Content-Encoding %q, want %q", tc.size, resp.Status, got, tc.want)
		}
	}
}

func TestACallWithoutADeadlineIsGivenTheCap(t *testing.T) {
	e := newEchoServer(t)
	msg, _ := proto.Marshal(wrapperspb.Bytes([]byte("hi")))
	before := time.Now()
	if code := e.post(t, bytes.NewReader(msg), nil); code != "" {
		t.Fatalf("code %q", code)
	}
	d, _ := e.deadline.Load().(time.Time)
	if d.IsZero() || d.After(before.Add(MaxCallTimeout+time.Second)) {
		t.Errorf("handler's deadline %v, want within %v of the call", d, MaxCallTimeout)
	}
}

// A deadline within the cap is kept as it is: no timer, context or request
// copy is made for it.
func TestADeadlineWithinTheCapIsKeptAsItIs(t *testing.T) {
	within, cancel := context.WithTimeout(context.Background(), MaxCallTimeout/2)
	defer cancel()
	if ctx, _ := withinCap(within); ctx != within {
		t.Error("a deadline within the cap was given another context")
	}
	beyond, cancel := context.WithTimeout(context.Background(), 2*MaxCallTimeout)
	defer cancel()
	for name, ctx := range map[string]context.Context{"no deadline": context.Background(), "a deadline beyond the cap": beyond} {
		got, cancel := withinCap(ctx)
		d, ok := got.Deadline()
		if !ok || time.Until(d) > MaxCallTimeout {
			t.Errorf("%s: deadline %v (%v), want at most %v away", name, d, ok, MaxCallTimeout)
		}
		cancel()
	}
}

func TestAPagesDeadlineIsCapped(t *testing.T) {
	var deadline time.Time
	h := NewHandler(Endpoints{
		Service: func(...connect.HandlerOption) (string, http.Handler) {
			return "/test.v1.Service/", http.NotFoundHandler()
		},
		Metrics: prom.Handler(prom.NewRegistry()),
		Pages: map[string]http.HandlerFunc{"GET /page": func(_ http.ResponseWriter, r *http.Request) {
			deadline, _ = r.Context().Deadline()
		}},
		Access: Access{"GET /page": Public},
	})
	before := time.Now()
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/page", nil))
	if deadline.IsZero() || deadline.After(before.Add(MaxCallTimeout+time.Second)) {
		t.Errorf("the page's deadline %v, want within %v of the request", deadline, MaxCallTimeout)
	}
}
