package telemetry

import (
	"context"
	"strings"

	"connectrpc.com/connect"
	"connectrpc.com/otelconnect"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// untraced are polling and bookkeeping calls that would otherwise fill Jaeger
// with one-span traces: heartbeats, status polls, the driver's launch reports
// (what they report is already in the application's trace).
var untraced = []string{"/Heartbeat", "/GetClusterState", "/DriverStatus", "/ReportExecutorLaunch"}

// probes are calls made on a timer to see whether a peer answers (the
// master's Ping of each driver): traced only inside a sampled trace, never
// the start of one, so that an idle cluster adds no trace to Jaeger.
var probes = []string{"/Ping"}

// anchored are calls that start work outliving them — a registration, a
// launch — made in the span of that work: the client adds no span of its
// own, so the server's span is a child of the caller's, and the server
// parents the work that outlives the call on the caller's span (Caller), in
// which it ends, rather than on its own, which ends with the call.
var anchored = []string{"/RegisterApplication", "/SubmitDriver", "/LaunchExecutor", "/LaunchDriver", "/LaunchedExecutor"}

// callerKey holds, in an anchored call's handler context, the caller's span
// context.
type callerKey struct{}

// Caller is the span context of the caller of the handler running in ctx,
// for an anchored call (RegisterApplication, SubmitDriver, LaunchExecutor,
// LaunchDriver, LaunchedExecutor): the span of the work the call starts,
// under which what outlives the call belongs. Otherwise, it is the span
// context in ctx.
func Caller(ctx context.Context) trace.SpanContext {
	if sc, ok := ctx.Value(callerKey{}).(trace.SpanContext); ok {
		return sc
	}
	return trace.SpanContextFromContext(ctx)
}

// hasSuffix is whether spec's procedure ends with one of suffixes.
func hasSuffix(spec connect.Spec, suffixes []string) bool {
	for _, suffix := range suffixes {
		if strings.HasSuffix(spec.Procedure, suffix) {
			return true
		}
	}
	return false
}

// Interceptor traces every Connect call through tp (nil: the global
// provider) with otelconnect — a client span around each call, a server
// span around each handler, the child of the caller's span, whose context it
// trusts (every peer is part of the cluster) — under Glint's rules: polling
// and bookkeeping calls (Heartbeat, …) pass untraced; a probe (Ping) outside
// a trace is made in a trace of its own that is not sampled; an anchored
// call (a registration, a launch) has a server span only, and its handler
// finds the caller's span with Caller. A call in a trace that is not sampled
// (most task calls: the driver samples spark.glint.trace.taskSampleRatio of
// its task batches) only passes its trace context on, as does every call when
// tp is a no-op provider (tracing off). Glint's services have unary calls
// only; a streaming one would pass untraced.
func Interceptor(tp trace.TracerProvider) connect.Interceptor {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	spans, err := otelconnect.NewInterceptor(otelconnect.WithTracerProvider(tp), otelconnect.WithPropagator(Propagator),
		otelconnect.WithTrustRemote(), otelconnect.WithoutMetrics())
	if err != nil {
		panic(err) // only a meter provider fails it, and there is none
	}
	return rules{spans: spans}
}

// rules applies Glint's tracing rules around otelconnect's spans.
type rules struct {
	spans *otelconnect.Interceptor
}

func (r rules) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	traced := r.spans.WrapUnary(next)
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		spec := req.Spec()
		carrier := propagation.HeaderCarrier(req.Header())
		switch {
		case hasSuffix(spec, untraced):
			return next(ctx, req)
		case spec.IsClient && hasSuffix(spec, anchored):
			// The work's span is the caller's: the call passes it on.
			Propagator.Inject(ctx, carrier)
			return next(ctx, req)
		case !spec.IsClient && !trace.SpanContextFromContext(ctx).IsValid():
			ctx = Propagator.Extract(ctx, carrier)
		}
		sc := trace.SpanContextFromContext(ctx)
		switch {
		case !sc.IsValid() && hasSuffix(spec, probes):
			// A probe outside a trace starts none: its unsampled context
			// tells the peer not to record one either.
			ctx = trace.ContextWithSpanContext(ctx, Unsampled())
		case !spec.IsClient && sc.IsValid() && hasSuffix(spec, anchored):
			ctx = context.WithValue(ctx, callerKey{}, sc)
		}
		return traced(ctx, req)
	}
}

func (rules) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (rules) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
