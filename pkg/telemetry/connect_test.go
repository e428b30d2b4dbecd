package telemetry

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/driver/v1/driverv1connect"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
)

// seen is what a call's handler, or the innermost client interceptor, saw:
// its span context and whether it runs in a span being recorded.
type seen struct {
	sc        trace.SpanContext
	recording bool
}

func see(ctx context.Context) seen {
	return seen{trace.SpanContextFromContext(ctx), trace.SpanFromContext(ctx).IsRecording()}
}

type statusHandler struct {
	driverv1connect.UnimplementedDriverServiceHandler
	seen chan seen
}

func (h statusHandler) StatusUpdate(ctx context.Context, _ *connect.Request[driverv1.StatusUpdateRequest]) (*connect.Response[driverv1.StatusUpdateResponse], error) {
	h.seen <- see(ctx)
	return connect.NewResponse(&driverv1.StatusUpdateResponse{}), nil
}

// clientSees records what the client's calls look like inside Interceptors.
type clientSees struct{ seen chan seen }

func (c clientSees) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		c.seen <- see(ctx)
		return next(ctx, req)
	}
}
func (c clientSees) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}
func (c clientSees) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// A call in a trace that is not sampled passes its trace context on without
// a span on either side, and records nothing; a sampled call is traced
// on both sides, the server's span the child of the client's.
func TestUnsampledCallsPassTheirTraceOnWithoutSpans(t *testing.T) {
	clientSpans, serverSpans := tracetest.NewSpanRecorder(), tracetest.NewSpanRecorder()
	clientTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(clientSpans))
	serverTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(serverSpans))
	handler := statusHandler{seen: make(chan seen, 1)}
	_, h := driverv1connect.NewDriverServiceHandler(handler, connect.WithInterceptors(Interceptor(serverTP)))
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := clientSees{seen: make(chan seen, 1)}
	driver := driverv1connect.NewDriverServiceClient(http.DefaultClient, srv.URL,
		connect.WithInterceptors(Interceptor(clientTP), client))
	call := func(ctx context.Context) (onClient, onServer seen) {
		t.Helper()
		if _, err := driver.StatusUpdate(ctx, connect.NewRequest(&driverv1.StatusUpdateRequest{})); err != nil {
			t.Fatal(err)
		}
		return <-client.seen, <-handler.seen
	}

	unsampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}})
	onClient, onServer := call(trace.ContextWithSpanContext(context.Background(), unsampled))
	if onClient.recording || onServer.recording {
		t.Errorf("an unsampled call was recorded: client %v, server %v", onClient.recording, onServer.recording)
	}
	if onServer.sc.TraceID() != unsampled.TraceID() || onServer.sc.IsSampled() {
		t.Errorf("the handler runs in %v, want the caller's unsampled trace %v", onServer.sc, unsampled.TraceID())
	}
	if n := len(clientSpans.Ended()) + len(serverSpans.Ended()); n != 0 {
		t.Errorf("%d spans recorded for an unsampled call", n)
	}

	ctx, parent := clientTP.Tracer("t").Start(context.Background(), "parent")
	onClient, onServer = call(ctx)
	parent.End()
	if !onClient.recording || !onServer.recording {
		t.Errorf("a sampled call was not recorded: client %v, server %v", onClient.recording, onServer.recording)
	}
	cs, ss := clientSpans.Ended(), serverSpans.Ended()
	if len(cs) != 2 || len(ss) != 1 || ss[0].Parent().SpanID() != cs[0].SpanContext().SpanID() ||
		cs[0].Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("sampled call: client spans %v, server spans %v; want the client's call span under parent and the server's under it", cs, ss)
	}
}

func (h statusHandler) Ping(ctx context.Context, _ *connect.Request[driverv1.PingRequest]) (*connect.Response[driverv1.PingResponse], error) {
	h.seen <- see(ctx)
	return connect.NewResponse(&driverv1.PingResponse{}), nil
}

// A probe (the master's Ping of a driver) outside a trace starts none: it
// passes an unsampled context on and neither side records a span; inside a
// sampled trace it is traced as any call is.
func TestProbesNeverStartATraceOfTheirOwn(t *testing.T) {
	clientSpans, serverSpans := tracetest.NewSpanRecorder(), tracetest.NewSpanRecorder()
	clientTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(clientSpans))
	serverTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(serverSpans))
	handler := statusHandler{seen: make(chan seen, 1)}
	_, h := driverv1connect.NewDriverServiceHandler(handler, connect.WithInterceptors(Interceptor(serverTP)))
	srv := httptest.NewServer(h)
	defer srv.Close()
	driver := driverv1connect.NewDriverServiceClient(http.DefaultClient, srv.URL, connect.WithInterceptors(Interceptor(clientTP)))
	ping := func(ctx context.Context) seen {
		t.Helper()
		if _, err := driver.Ping(ctx, connect.NewRequest(&driverv1.PingRequest{})); err != nil {
			t.Fatal(err)
		}
		return <-handler.seen
	}

	if got := ping(context.Background()); got.recording || !got.sc.IsValid() || got.sc.IsSampled() {
		t.Errorf("a probe outside a trace reached its handler in %v (recording: %v), want an unsampled trace", got.sc, got.recording)
	}
	if n := len(clientSpans.Ended()) + len(serverSpans.Ended()); n != 0 {
		t.Errorf("a probe outside a trace recorded %d spans, want none", n)
	}
	// A peer that sends no trace context is no different.
	if _, err := driverv1connect.NewDriverServiceClient(http.DefaultClient, srv.URL).Ping(context.Background(), connect.NewRequest(&driverv1.PingRequest{})); err != nil {
		t.Fatal(err)
	}
	if got := <-handler.seen; got.recording {
		t.Errorf("a probe with no trace context was recorded by its handler")
	}

	ctx, parent := clientTP.Tracer("t").Start(context.Background(), "recovery")
	got := ping(ctx)
	parent.End()
	if !got.recording || got.sc.TraceID() != parent.SpanContext().TraceID() {
		t.Errorf("a probe inside a sampled trace was not traced in it: %v (recording: %v)", got.sc, got.recording)
	}
}

type registerHandler struct {
	masterv1connect.UnimplementedMasterServiceHandler
	seen   chan seen
	caller chan trace.SpanContext
}

func (h registerHandler) RegisterApplication(ctx context.Context, _ *connect.Request[masterv1.RegisterApplicationRequest]) (*connect.Response[masterv1.RegisterApplicationResponse], error) {
	h.seen <- see(ctx)
	h.caller <- Caller(ctx)
	return connect.NewResponse(&masterv1.RegisterApplicationResponse{}), nil
}

// An anchored call (a registration, a launch) has no client span: the
// server's span is the child of the caller's, and Caller gives the handler
// the caller's span, under which what outlives the call belongs.
func TestAnchoredCallsHaveAServerSpanUnderTheCallersSpan(t *testing.T) {
	clientSpans, serverSpans := tracetest.NewSpanRecorder(), tracetest.NewSpanRecorder()
	clientTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(clientSpans))
	handler := registerHandler{seen: make(chan seen, 1), caller: make(chan trace.SpanContext, 1)}
	_, h := masterv1connect.NewMasterServiceHandler(handler,
		connect.WithInterceptors(Interceptor(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(serverSpans)))))
	srv := httptest.NewServer(h)
	defer srv.Close()
	master := masterv1connect.NewMasterServiceClient(http.DefaultClient, srv.URL, connect.WithInterceptors(Interceptor(clientTP)))
	ctx, submit := clientTP.Tracer("t").Start(context.Background(), "submit")
	if _, err := master.RegisterApplication(ctx, connect.NewRequest(&masterv1.RegisterApplicationRequest{})); err != nil {
		t.Fatal(err)
	}
	submit.End()
	got, caller := <-handler.seen, <-handler.caller
	if n := len(clientSpans.Ended()); n != 1 {
		t.Errorf("%d client-side spans, want the caller's only", n)
	}
	ss := serverSpans.Ended()
	if len(ss) != 1 || ss[0].Parent().SpanID() != submit.SpanContext().SpanID() || !got.recording {
		t.Errorf("server spans %v, want one, under the caller's span", ss)
	}
	if caller.SpanID() != submit.SpanContext().SpanID() {
		t.Errorf("Caller in the handler is %v, want the caller's span %v", caller.SpanID(), submit.SpanContext().SpanID())
	}
}

type heartbeatHandler struct {
	masterv1connect.UnimplementedMasterServiceHandler
	seen chan seen
}

func (h heartbeatHandler) Heartbeat(ctx context.Context, _ *connect.Request[masterv1.HeartbeatRequest]) (*connect.Response[masterv1.HeartbeatResponse], error) {
	h.seen <- see(ctx)
	return connect.NewResponse(&masterv1.HeartbeatResponse{}), nil
}

// Untraced calls (heartbeats) are passed on as they are, trace context and
// all: the handler takes none from them.
func TestUntracedCallsAreLeftAlone(t *testing.T) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
	handler := heartbeatHandler{seen: make(chan seen, 1)}
	_, h := masterv1connect.NewMasterServiceHandler(handler, connect.WithInterceptors(Interceptor(tp)))
	srv := httptest.NewServer(h)
	defer srv.Close()
	master := masterv1connect.NewMasterServiceClient(http.DefaultClient, srv.URL)
	req := connect.NewRequest(&masterv1.HeartbeatRequest{})
	req.Header().Set("traceparent", "00-01000000000000000000000000000000-0200000000000000-00")
	if _, err := master.Heartbeat(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if got := <-handler.seen; got.sc.IsValid() || got.recording {
		t.Errorf("a heartbeat's handler runs in %v (recording: %v), want no trace context", got.sc, got.recording)
	}
}

type failingHandler struct {
	driverv1connect.UnimplementedDriverServiceHandler
	err error
}

func (h failingHandler) StatusUpdate(context.Context, *connect.Request[driverv1.StatusUpdateRequest]) (*connect.Response[driverv1.StatusUpdateResponse], error) {
	if h.err != nil {
		return nil, h.err
	}
	return connect.NewResponse(&driverv1.StatusUpdateResponse{}), nil
}

// callSpans makes one StatusUpdate call answered with err (nil: success) and
// returns the client's and the server's span of it.
func callSpans(t *testing.T, err error) (client, server sdktrace.ReadOnlySpan, addr string) {
	t.Helper()
	clientSpans, serverSpans := tracetest.NewSpanRecorder(), tracetest.NewSpanRecorder()
	_, h := driverv1connect.NewDriverServiceHandler(failingHandler{err: err},
		connect.WithInterceptors(Interceptor(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(serverSpans)))))
	srv := httptest.NewServer(h)
	defer srv.Close()
	driver := driverv1connect.NewDriverServiceClient(http.DefaultClient, srv.URL,
		connect.WithInterceptors(Interceptor(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(clientSpans)))))
	_, callErr := driver.StatusUpdate(context.Background(), connect.NewRequest(&driverv1.StatusUpdateRequest{}))
	if (callErr == nil) != (err == nil) {
		t.Fatalf("call answered %v, want %v", callErr, err)
	}
	cs, ss := clientSpans.Ended(), serverSpans.Ended()
	if len(cs) != 1 || len(ss) != 1 {
		t.Fatalf("%d client and %d server spans, want one each", len(cs), len(ss))
	}
	return cs[0], ss[0], srv.Listener.Addr().String()
}

func attrsOf(s sdktrace.ReadOnlySpan) map[attribute.Key]string {
	m := map[attribute.Key]string{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value.Emit()
	}
	return m
}

// A call's spans are otelconnect's: named after its method, of the
// client's and server's kind, with the RPC conventions' attributes, the
// server's address on the client's.
func TestCallSpansCarryTheRPCAttributes(t *testing.T) {
	client, server, addr := callSpans(t, nil)
	host, port, _ := net.SplitHostPort(addr)
	const method = "glint.driver.v1.DriverService/StatusUpdate"
	for _, c := range []struct {
		span sdktrace.ReadOnlySpan
		kind trace.SpanKind
		want map[attribute.Key]string
	}{
		{client, trace.SpanKindClient, map[attribute.Key]string{"rpc.system.name": "connectrpc", "rpc.method": method, "server.address": host, "server.port": port}},
		{server, trace.SpanKindServer, map[attribute.Key]string{"rpc.system.name": "connectrpc", "rpc.method": method}},
	} {
		attrs := attrsOf(c.span)
		if c.span.Name() != method || c.span.SpanKind() != c.kind || c.span.Status().Code == codes.Error {
			t.Errorf("span %q, kind %v, status %v; want %q, %v, not failed", c.span.Name(), c.span.SpanKind(), c.span.Status(), method, c.kind)
		}
		for k, v := range c.want {
			if attrs[k] != v {
				t.Errorf("%v span's %s = %q, want %q (attributes %v)", c.kind, k, attrs[k], v, attrs)
			}
		}
	}
}

// A failed call's client span fails on any error, its server span only on
// the codes that are the server's fault, each with the error's message.
func TestFailedCallSpans(t *testing.T) {
	for _, c := range []struct {
		code        connect.Code
		serverFails bool
	}{
		{connect.CodeInternal, true}, {connect.CodeUnavailable, true},
		{connect.CodeNotFound, false}, {connect.CodePermissionDenied, false},
	} {
		client, server, _ := callSpans(t, connect.NewError(c.code, errors.New("no such thing")))
		if client.Status() != (sdktrace.Status{Code: codes.Error, Description: "no such thing"}) {
			t.Errorf("%s: client span's status %v, want Error with the message", c.code, client.Status())
		}
		if failed := server.Status().Code == codes.Error; failed != c.serverFails || (failed && server.Status().Description != "no such thing") {
			t.Errorf("%s: server span's status %v, want failed %v", c.code, server.Status(), c.serverFails)
		}
	}
}

// With tracing off, a trace that passes through an untraced process goes on.
func TestCallsWithTracingOffOnlyPassTheirTraceOn(t *testing.T) {
	handler := statusHandler{seen: make(chan seen, 1)}
	_, h := driverv1connect.NewDriverServiceHandler(handler, connect.WithInterceptors(Interceptor(noop.NewTracerProvider())))
	srv := httptest.NewServer(h)
	defer srv.Close()
	driver := driverv1connect.NewDriverServiceClient(http.DefaultClient, srv.URL, connect.WithInterceptors(Interceptor(noop.NewTracerProvider())))
	sampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	if _, err := driver.StatusUpdate(trace.ContextWithSpanContext(context.Background(), sampled), connect.NewRequest(&driverv1.StatusUpdateRequest{})); err != nil {
		t.Fatal(err)
	}
	if got := <-handler.seen; got.sc.TraceID() != sampled.TraceID() || !got.sc.IsRemote() || got.recording {
		t.Errorf("an untraced handler runs in %v (recording: %v), want the caller's trace %v as its remote parent", got.sc, got.recording, sampled.TraceID())
	}
}

// Interceptor(nil) traces through the global provider.
func TestANilProviderIsTheGlobalOne(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	defer otel.SetTracerProvider(otel.GetTracerProvider())
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))
	handler := statusHandler{seen: make(chan seen, 1)}
	_, h := driverv1connect.NewDriverServiceHandler(handler, connect.WithInterceptors(Interceptor(nil)))
	srv := httptest.NewServer(h)
	defer srv.Close()
	driver := driverv1connect.NewDriverServiceClient(http.DefaultClient, srv.URL)
	if _, err := driver.StatusUpdate(context.Background(), connect.NewRequest(&driverv1.StatusUpdateRequest{})); err != nil {
		t.Fatal(err)
	}
	<-handler.seen
	if n := len(spans.Ended()); n != 1 {
		t.Errorf("%d spans through the global provider, want the handler's", n)
	}
}
