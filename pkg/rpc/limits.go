package rpc

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"connectrpc.com/connect"
)

// Limits on what one request may make a Glint process read or wait for. Every
// Glint message is small (the largest is a command line), so these are far
// above what a peer needs and far below what would hurt the process.
const (
	// ReadMaxBytes is the largest message a handler accepts, counted after
	// decompression (connect.WithReadMaxBytes applies it to both sizes).
	ReadMaxBytes = 4 << 20
	// MaxBodyBytes is the largest request body read at all, before
	// decompression: a message, its 5-byte envelope prefix, and slack.
	MaxBodyBytes = ReadMaxBytes + 64<<10
	// MaxInflateRatio bounds how much a compressed message may grow once
	// inflated past minInflateCheck bytes: gzip can reach about 1000:1 on
	// repetitive input, a real message reaches a few dozen.
	MaxInflateRatio = 100
	// MaxCallTimeout caps the deadline a caller may ask for (Connect-Timeout-Ms,
	// grpc-timeout): no Glint call needs longer, and clients give up after a
	// minute themselves.
	MaxCallTimeout = time.Minute
)

// minInflateCheck is the output size below which the inflate ratio is not
// checked, so that small, very compressible messages always pass.
const minInflateCheck = 1 << 20

// limitBody is the middleware every listener has: the request body is cut
// off after MaxBodyBytes. Connect answers a cut-off body with
// ResourceExhausted.
func limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		next.ServeHTTP(w, r)
	})
}

// capped bounds the deadline of a page's request to MaxCallTimeout.
func capped(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), MaxCallTimeout)
		defer cancel()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// capDeadline is the handler interceptor that bounds a call's deadline to
// MaxCallTimeout. Connect has applied the caller's own (Connect-Timeout-Ms,
// grpc-timeout) by then: a call whose deadline is within the cap — a
// worker's heartbeat, every call a Glint client makes with a timeout — keeps
// its context, with no second timer, context and request copy of its own.
type capDeadline struct{}

// withinCap returns ctx if its deadline is at most MaxCallTimeout away, else
// ctx with that deadline.
func withinCap(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= MaxCallTimeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, MaxCallTimeout)
}

func (capDeadline) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		ctx, cancel := withinCap(ctx)
		defer cancel()
		return next(ctx, req)
	}
}

func (capDeadline) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (capDeadline) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, cancel := withinCap(ctx)
		defer cancel()
		return next(ctx, conn)
	}
}

// compressMinBytes is the smallest answer a handler gzips: below it,
// resetting a gzip writer costs more than the bytes it saves (task dispatch,
// whose answers are empty, paid it on every answer).
const compressMinBytes = 1 << 10

// limitOptions bound what a Connect handler reads and waits for:
// ReadMaxBytes, gzip bodies inflated only up to that size and
// MaxInflateRatio, never further (connect's own gzip would inflate the rest
// of a bomb to count it), and deadlines (capDeadline). Answers under
// compressMinBytes go out as they are.
func limitOptions() []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithInterceptors(capDeadline{}),
		connect.WithReadMaxBytes(ReadMaxBytes),
		connect.WithCompressMinBytes(compressMinBytes),
		connect.WithCompression("gzip",
			func() connect.Decompressor { return &boundedGzip{limit: ReadMaxBytes} },
			func() connect.Compressor { return gzip.NewWriter(io.Discard) }),
	}
}

// boundedGzip is a gzip decompressor that fails with ResourceExhausted as soon
// as its output passes limit bytes, or passes minInflateCheck bytes and
// MaxInflateRatio times the compressed bytes read.
type boundedGzip struct {
	gz    gzip.Reader
	in    countingReader
	out   int64
	limit int64
}

func (g *boundedGzip) Reset(r io.Reader) error {
	g.in, g.out = countingReader{r: r}, 0
	return g.gz.Reset(&g.in)
}

func (g *boundedGzip) Read(p []byte) (int, error) {
	n, err := g.gz.Read(p)
	g.out += int64(n)
	switch {
	case g.out > g.limit:
		return n, connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("message inflates to more than the limit of %d bytes", g.limit))
	case g.out > minInflateCheck && g.out > MaxInflateRatio*g.in.n:
		return n, connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("message inflates at a ratio over %d:1 (%d bytes from %d)", MaxInflateRatio, g.out, g.in.n))
	}
	return n, err
}

func (g *boundedGzip) Close() error { return g.gz.Close() }

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
