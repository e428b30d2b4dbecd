package telemetry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	"connectrpc.com/otelconnect"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/driver/v1/driverv1connect"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
)

// seen is what a call's handler, or the innermost client interceptor, saw:
// its span context and whether otelconnect ran (it puts a labeler in the
// context).
type seen struct {
	sc       trace.SpanContext
	labelled bool
}

func see(ctx context.Context) seen {
	_, labelled := otelconnect.LabelerFromContext(ctx)
	return seen{trace.SpanContextFromContext(ctx), labelled}
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
// otelconnect on either side, and records nothing; a sampled call is traced
// on both sides, the server's span the child of the client's.
func TestUnsampledCallsPassTheirTraceOnWithoutSpans(t *testing.T) {
	clientSpans, serverSpans := tracetest.NewSpanRecorder(), tracetest.NewSpanRecorder()
	clientTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(clientSpans))
	serverTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(serverSpans))
	handler := statusHandler{seen: make(chan seen, 1)}
	_, h := driverv1connect.NewDriverServiceHandler(handler, connect.WithInterceptors(Interceptors(serverTP)...))
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := clientSees{seen: make(chan seen, 1)}
	driver := driverv1connect.NewDriverServiceClient(http.DefaultClient, srv.URL,
		connect.WithInterceptors(append(Interceptors(clientTP), client)...))
	call := func(ctx context.Context) (onClient, onServer seen) {
		t.Helper()
		if _, err := driver.StatusUpdate(ctx, connect.NewRequest(&driverv1.StatusUpdateRequest{})); err != nil {
			t.Fatal(err)
		}
		return <-client.seen, <-handler.seen
	}

	unsampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}})
	onClient, onServer := call(trace.ContextWithSpanContext(context.Background(), unsampled))
	if onClient.labelled || onServer.labelled {
		t.Errorf("otelconnect ran on an unsampled call: client %v, server %v", onClient.labelled, onServer.labelled)
	}
	if onServer.sc.TraceID() != unsampled.TraceID() || onServer.sc.IsSampled() || !onServer.sc.IsRemote() {
		t.Errorf("the handler runs in %v, want the caller's unsampled trace %v as its remote parent", onServer.sc, unsampled.TraceID())
	}
	if n := len(clientSpans.Ended()) + len(serverSpans.Ended()); n != 0 {
		t.Errorf("%d spans recorded for an unsampled call", n)
	}

	ctx, parent := clientTP.Tracer("t").Start(context.Background(), "parent")
	onClient, onServer = call(ctx)
	parent.End()
	if !onClient.labelled || !onServer.labelled {
		t.Errorf("otelconnect did not run on a sampled call: client %v, server %v", onClient.labelled, onServer.labelled)
	}
	cs, ss := clientSpans.Ended(), serverSpans.Ended()
	if len(cs) != 2 || len(ss) != 1 || ss[0].Parent().SpanID() != cs[0].SpanContext().SpanID() ||
		cs[0].Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("sampled call: client spans %v, server spans %v; want the client's call span under parent and the server's under it", cs, ss)
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
	_, h := masterv1connect.NewMasterServiceHandler(handler, connect.WithInterceptors(Interceptors(tp)...))
	srv := httptest.NewServer(h)
	defer srv.Close()
	master := masterv1connect.NewMasterServiceClient(http.DefaultClient, srv.URL)
	req := connect.NewRequest(&masterv1.HeartbeatRequest{})
	req.Header().Set("traceparent", "00-01000000000000000000000000000000-0200000000000000-00")
	if _, err := master.Heartbeat(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if got := <-handler.seen; got.sc.IsValid() || got.labelled {
		t.Errorf("a heartbeat's handler runs in %v (otelconnect: %v), want no trace context", got.sc, got.labelled)
	}
}
