package telemetry

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
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
// provider): a client span around each call, a server span around each
// handler — the child of the caller's span, whose context it trusts (every
// peer is part of the cluster) — with the RPC semantic conventions'
// attributes (rpc.system.name, rpc.method, server.address and server.port on
// the client, rpc.response.status_code, error.type), and a failed call's
// error as an exception event; a client span fails on any error, a server
// span on the codes that are the server's fault, as OpenTelemetry's gRPC
// instrumentation has them. A call in a trace that is not sampled (most
// task calls: the driver samples spark.glint.trace.taskSampleRatio of its
// task batches) only passes its trace context on, as does every call when
// tp is a no-op provider (tracing off), so that a process that does not
// trace still carries its callers' traces on to the processes it calls. A
// probe (Ping) outside a trace is made in a trace of its own that is not
// sampled; an anchored call (a registration, a launch) has a server span
// only, and its handler finds the caller's span with Caller.
//
// It takes the place of otelconnect, whose spans are the same but which,
// for each span, also builds its attributes twice, a metric attribute set
// (with metrics off), a labeler and streaming state: allocations on every
// call, traced or not, that Glint's calls do without. Glint's services have
// unary calls only; a streaming one would pass untraced.
func Interceptor(tp trace.TracerProvider) connect.Interceptor {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	_, off := tp.(noop.TracerProvider)
	return rpcSpans{tracer: Tracer(tp), off: off}
}

type rpcSpans struct {
	tracer trace.Tracer
	off    bool
}

func (r rpcSpans) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		spec := req.Spec()
		if hasSuffix(spec, untraced) {
			return next(ctx, req)
		}
		carrier := propagation.HeaderCarrier(req.Header())
		if !spec.IsClient && !trace.SpanContextFromContext(ctx).IsValid() {
			ctx = Propagator.Extract(ctx, carrier)
		}
		if !trace.SpanContextFromContext(ctx).IsValid() && hasSuffix(spec, probes) {
			// A probe outside a trace starts none: its unsampled context
			// tells the peer not to record one either.
			ctx = trace.ContextWithSpanContext(ctx, Unsampled())
		}
		sc := trace.SpanContextFromContext(ctx)
		if r.off || (sc.IsValid() && !sc.IsSampled()) || (spec.IsClient && hasSuffix(spec, anchored)) {
			if spec.IsClient {
				Propagator.Inject(ctx, carrier)
			}
			return next(ctx, req)
		}
		if sc.IsValid() && hasSuffix(spec, anchored) {
			ctx = context.WithValue(ctx, callerKey{}, sc)
		}
		ctx, span := r.start(ctx, req)
		if spec.IsClient {
			Propagator.Inject(ctx, carrier)
		}
		resp, err := next(ctx, req)
		end(span, spec.IsClient, err)
		return resp, err
	}
}

// start starts req's span with every attribute it has before the answer.
func (r rpcSpans) start(ctx context.Context, req connect.AnyRequest) (context.Context, trace.Span) {
	spec, peer := req.Spec(), req.Peer()
	method := strings.TrimPrefix(spec.Procedure, "/")
	attrs := make([]attribute.KeyValue, 0, 4)
	attrs = append(attrs, semconv.RPCSystemNameKey.String(rpcSystem(peer.Protocol)), semconv.RPCMethodKey.String(method))
	kind := trace.SpanKindServer
	if spec.IsClient {
		kind = trace.SpanKindClient
		if host, port, err := net.SplitHostPort(peer.Addr); err == nil { // Glint's URLs name their ports
			if n, err := strconv.Atoi(port); err == nil {
				attrs = append(attrs, semconv.ServerAddress(host), semconv.ServerPort(n))
			}
		}
	}
	return r.tracer.Start(ctx, method, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// end records the call's outcome on span and ends it.
func end(span trace.Span, client bool, err error) {
	if err == nil {
		span.SetAttributes(semconv.RPCResponseStatusCodeKey.String("OK"))
		span.End()
		return
	}
	code := connect.CodeOf(err)
	name := strings.ToUpper(code.String()) // gRPC's canonical names, DEADLINE_EXCEEDED
	span.SetAttributes(semconv.RPCResponseStatusCodeKey.String(name), semconv.ErrorTypeKey.String(name))
	span.RecordError(err)
	if client || serversFault(code) {
		message := err.Error()
		if ce := new(connect.Error); errors.As(err, &ce) {
			message = ce.Message()
		}
		span.SetStatus(codes.Error, message)
	}
	span.End()
}

// serversFault is whether a handler answering code failed, rather than the
// call asked for what cannot be (OpenTelemetry's RPC conventions).
func serversFault(code connect.Code) bool {
	switch code {
	case connect.CodeUnknown, connect.CodeDeadlineExceeded, connect.CodeUnimplemented,
		connect.CodeInternal, connect.CodeUnavailable, connect.CodeDataLoss:
		return true
	}
	return false
}

// rpcSystem is rpc.system.name for a Connect wire protocol.
func rpcSystem(protocol string) string {
	switch protocol {
	case connect.ProtocolConnect:
		return "connect_rpc"
	case connect.ProtocolGRPC, connect.ProtocolGRPCWeb:
		return "grpc"
	}
	return protocol
}

func (rpcSpans) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (rpcSpans) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
