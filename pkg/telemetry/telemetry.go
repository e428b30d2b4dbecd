// Package telemetry sets up tracing for every Glint process: one tracer
// provider per service, configured only from the standard OTEL_* variables,
// the W3C trace-context and baggage propagators, trace context carried into
// child processes through the environment, and a log handler that stamps
// records with their trace and span ids.
package telemetry

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/debug"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of Glint's own spans.
const ScopeName = "github.com/glint-cluster/glint"

// Service names, one per process role.
const (
	ServiceMaster   = "glint-master"
	ServiceWorker   = "glint-worker"
	ServiceDriver   = "glint-driver"
	ServiceExecutor = "glint-executor"
	ServiceSubmit   = "glint-submit"
)

// Span attribute keys Glint puts on its spans.
const (
	AppID      = attribute.Key("glint.app.id")
	AppName    = attribute.Key("glint.app.name")
	ExecutorID = attribute.Key("glint.executor.id")
	WorkerID   = attribute.Key("glint.worker.id")
	DriverID   = attribute.Key("glint.driver.id")
	Cores      = attribute.Key("glint.cores")
	MemoryMiB  = attribute.Key("glint.memory_mib")
)

// SubmitSpan is the name of the root span of an application's trace, the
// submission's: "submit pi". Jaeger titles the trace with it.
func SubmitSpan(app string) string { return "submit " + app }

// StartSubmit starts the root span of an application's trace, named
// SubmitSpan(app) and carrying glint.app.name and attrs; whoever learns the
// application's id sets glint.app.id on it (the driver, once registered), so
// that a search by either tag finds the trace.
func StartSubmit(ctx context.Context, tp trace.TracerProvider, app string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return Tracer(tp).Start(ctx, SubmitSpan(app),
		trace.WithAttributes(append([]attribute.KeyValue{AppName.String(app)}, attrs...)...))
}

// Propagator is the W3C trace-context and baggage propagator Glint uses on
// every Connect call and in child processes' environments.
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(
	propagation.TraceContext{}, propagation.Baggage{})

// An Exporter makes, for a process that sends its spans to a collector
// itself, its span exporter and the upload of the frames (each an
// ExportTraceServiceRequest) that the processes it starts send through its
// Relay. otlp.Exporter, OpenTelemetry's OTLP exporters, is Glint's; the
// executor's binary has none: its spans go through its worker.
type Exporter func(context.Context) (sdktrace.SpanExporter, func(ctx context.Context, frame []byte) error, error)

// Setup builds the tracer provider for service (NewTracerProvider), makes
// it and Propagator the global ones, and returns a shutdown that flushes
// every pending span. attrs describe the process (glint.app.id,
// glint.executor.id, …) on every span.
func Setup(ctx context.Context, service string, export Exporter, attrs ...attribute.KeyValue) (trace.TracerProvider, func(context.Context) error, error) {
	tp, shutdown, err := NewTracerProvider(ctx, service, export, attrs...)
	if err != nil {
		return nil, nil, err
	}
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(Propagator)
	return tp, shutdown, nil
}

// NewTracerProvider returns a tracer provider for service whose spans the
// SDK's batch span processor (set by the OTEL_BSP_* variables) sends — in a
// process started with RelayFDEnv, to the worker that started it; otherwise,
// when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// names a collector, through export, and its Relay (RelayOf) sends on the
// spans of the processes it starts; its shutdown waits for theirs before it
// flushes its own.
// With no endpoint it returns a no-op provider that still passes incoming
// trace context on, and a shutdown that does nothing (and closes a relay it
// was given); so it does, saying why, when the process has a collector but
// no export.
func NewTracerProvider(ctx context.Context, service string, export Exporter, attrs ...attribute.KeyValue) (trace.TracerProvider, func(context.Context) error, error) {
	untraced := func() (trace.TracerProvider, func(context.Context) error, error) {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	out, err := relayOut()
	if err != nil {
		return nil, nil, fmt.Errorf("set up tracing for %s: %w", service, err)
	}
	if os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" {
		// A relay it was given (its command's environment turned tracing
		// off) is closed, so that nothing it starts inherits it.
		if out != nil {
			out.Close()
		}
		return untraced()
	}
	var exporter sdktrace.SpanExporter = otlptrace.NewUnstarted(&relayClient{out: out})
	var relay *Relay
	if out == nil {
		if export == nil {
			otel.Handle(fmt.Errorf("%s sends its spans through the worker that starts it, and it has none: its spans are not exported", service))
			return untraced()
		}
		var upload func(context.Context, []byte) error
		if exporter, upload, err = export(ctx); err != nil {
			return nil, nil, fmt.Errorf("set up tracing for %s: %w", service, err)
		}
		relay = &Relay{upload: upload}
	}
	res, err := newResource(ctx, service, attrs)
	if err != nil {
		return nil, nil, fmt.Errorf("set up tracing for %s: %w", service, err)
	}
	tp := &provider{
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res)),
		relay:          relay,
	}
	return tp, func(ctx context.Context) error {
		var err error
		if tp.relay != nil {
			err = tp.relay.drain(ctx)
		}
		return errors.Join(err, tp.Shutdown(ctx))
	}, nil
}

// provider is the SDK's tracer provider with its Relay.
type provider struct {
	*sdktrace.TracerProvider
	relay *Relay
}

// RelayOf returns the Relay of a provider NewTracerProvider made, as it
// made it; nil for any other (untraced or relayed) provider.
func RelayOf(tp trace.TracerProvider) *Relay {
	if p, ok := tp.(*provider); ok {
		return p.relay
	}
	return nil
}

// newResource describes the process: service.name (OTEL_SERVICE_NAME wins),
// service.version, service.instance.id, host.name, attrs, and
// OTEL_RESOURCE_ATTRIBUTES.
//
// It names what the resource package's host and SDK detectors would, without
// their detection and merging, and its instance id comes from the runtime's
// ChaCha8 generator rather than the operating system's (crypto/rand's first
// read): the resource is made on every traced process's start, and the
// detection, the merging and that read were what made it slow.
func newResource(ctx context.Context, service string, attrs []attribute.KeyValue) (*resource.Resource, error) {
	own := []attribute.KeyValue{
		semconv.ServiceName(service),
		semconv.ServiceVersion(version()),
		semconv.ServiceInstanceID(instanceID()),
		semconv.TelemetrySDKName("opentelemetry"),
		semconv.TelemetrySDKLanguageGo,
		semconv.TelemetrySDKVersion(sdk.Version()),
	}
	if host, err := os.Hostname(); err == nil {
		own = append(own, semconv.HostName(host))
	}
	fromEnv, err := resource.New(ctx, resource.WithFromEnv())
	if errors.Is(err, resource.ErrPartialResource) {
		err = nil
	}
	if err != nil {
		return nil, err
	}
	return resource.Merge(resource.NewWithAttributes(semconv.SchemaURL, append(own, attrs...)...), fromEnv)
}

// instanceID is a random (version 4) UUID.
func instanceID() string {
	var seed [32]byte
	for i := range 4 {
		binary.LittleEndian.PutUint64(seed[8*i:], rand.Uint64())
	}
	id, err := uuid.NewRandomFromReader(rand.NewChaCha8(seed))
	if err != nil {
		panic(err) // ChaCha8 reads never fail
	}
	return id.String()
}

// version is the module version the binary was built from.
func version() string {
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		return info.Main.Version
	}
	return "(devel)"
}

// Tracer returns Glint's tracer from tp.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	return tp.Tracer(ScopeName)
}

// Fail marks span failed with err: status Error and an exception event.
func Fail(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

// ContextWithSpanContextOf returns ctx carrying, as its remote parent, the
// span context stored in parent; it keeps the calls an asynchronous step makes
// later (a master launching an application's executors) in the trace that
// started the work.
func ContextWithSpanContextOf(ctx context.Context, parent trace.SpanContext) context.Context {
	if !parent.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, parent)
}
