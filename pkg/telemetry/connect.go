package telemetry

import (
	"context"
	"strings"

	"connectrpc.com/connect"
	"connectrpc.com/otelconnect"
	"go.opentelemetry.io/otel/trace"
)

// untraced are polling and bookkeeping calls that would otherwise fill Jaeger
// with one-span traces: heartbeats, status polls, the driver's launch reports
// (what they report is already in the application's trace).
var untraced = []string{"/Heartbeat", "/GetClusterState", "/DriverStatus", "/ReportExecutorLaunch"}

// Interceptors trace every Connect call through tp: otelconnect's client and
// server spans, trusting the remote parent (every peer is part of the
// cluster), and an exception event on the call's span when it fails.
func Interceptors(tp trace.TracerProvider) []connect.Interceptor {
	otel, err := otelconnect.NewInterceptor(
		otelconnect.WithTracerProvider(tp),
		otelconnect.WithPropagator(Propagator),
		otelconnect.WithTrustRemote(),
		otelconnect.WithoutMetrics(),
		otelconnect.WithFilter(func(_ context.Context, spec connect.Spec) bool {
			for _, suffix := range untraced {
				if strings.HasSuffix(spec.Procedure, suffix) {
					return false
				}
			}
			return true
		}),
	)
	if err != nil {
		// NewInterceptor fails only when building metric instruments, which
		// WithoutMetrics turns off.
		panic(err)
	}
	return []connect.Interceptor{otel, errorEvents{}}
}

// errorEvents runs inside otelconnect's span and records a failed call's
// error on it as an exception event.
type errorEvents struct{}

func (errorEvents) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		resp, err := next(ctx, req)
		if err != nil {
			trace.SpanFromContext(ctx).RecordError(err)
		}
		return resp, err
	}
}

func (errorEvents) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (errorEvents) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
