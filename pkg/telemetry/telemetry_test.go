package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/glint-cluster/glint/pkg/telemetry/otlp"
)

func TestLogRecordsCarryTheTraceAndSpanOfTheirContext(t *testing.T) {
	var buf bytes.Buffer
	log, err := NewLogger(&buf, "info", ServiceWorker)
	if err != nil {
		t.Fatal(err)
	}
	ctx, span := sdktrace.NewTracerProvider().Tracer("t").Start(context.Background(), "s")
	log.With("k", "v").InfoContext(ctx, "with span")
	log.Info("without span")
	span.End()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var with, without map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &with); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &without); err != nil {
		t.Fatal(err)
	}
	if with["trace_id"] != span.SpanContext().TraceID().String() || with["span_id"] != span.SpanContext().SpanID().String() || with["k"] != "v" {
		t.Errorf("record with a span: %v", with)
	}
	if _, ok := without["trace_id"]; ok || without["service"] != ServiceWorker {
		t.Errorf("record without a span: %v", without)
	}
	if _, err := NewLogger(&buf, "loud", ServiceWorker); err == nil {
		t.Error("bad level accepted")
	}
}

func TestTraceContextCrossesIntoAChildsEnvironment(t *testing.T) {
	ctx, span := sdktrace.NewTracerProvider().Tracer("t").Start(context.Background(), "process.start")
	defer span.End()
	env := InjectEnv(ctx, []string{"PATH=/bin", "TRACEPARENT=00-stale"})
	traceparents := 0
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); k == "TRACEPARENT" {
			traceparents++
			t.Setenv("TRACEPARENT", v)
		}
	}
	if traceparents != 1 || env[0] != "PATH=/bin" {
		t.Fatalf("env %v: want PATH kept and one fresh TRACEPARENT", env)
	}
	got := trace.SpanContextFromContext(ContextFromEnv(context.Background()))
	if got.TraceID() != span.SpanContext().TraceID() || got.SpanID() != span.SpanContext().SpanID() || !got.IsRemote() {
		t.Errorf("extracted %v, want the parent %v as a remote span context", got, span.SpanContext())
	}
}

func TestWithoutAnEndpointNothingIsExportedButContextStillFlows(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	tp, shutdown, err := NewTracerProvider(context.Background(), ServiceMaster, otlp.Exporter)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tp.(noop.TracerProvider); !ok {
		t.Errorf("provider %T, want the no-op provider", tp)
	}
	parent, remote := sdktrace.NewTracerProvider().Tracer("t").Start(context.Background(), "remote")
	defer remote.End()
	_, span := Tracer(tp).Start(parent, "local")
	if span.SpanContext().TraceID() != remote.SpanContext().TraceID() {
		t.Error("the no-op provider lost the incoming trace context")
	}
	if err := shutdown(context.Background()); err != nil {
		t.Error(err)
	}
}

func TestUnknownOTLPProtocolIsAnError(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon")
	if _, _, err := NewTracerProvider(context.Background(), ServiceMaster, otlp.Exporter); err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_PROTOCOL") {
		t.Errorf("got %v", err)
	}
}

// A process with a collector named but no exporter of its own (the
// executor's binary) and no worker to relay its spans traces nothing, and
// says why.
func TestAProcessWithNoExporterAndNoRelayIsUntracedAndSaysSo(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	var said []error
	defer otel.SetErrorHandler(otel.GetErrorHandler())
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { said = append(said, err) }))
	tp, _, err := NewTracerProvider(context.Background(), ServiceExecutor, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tp.(noop.TracerProvider); !ok {
		t.Errorf("provider %T, want the no-op provider", tp)
	}
	if len(said) != 1 || !strings.Contains(said[0].Error(), "not exported") {
		t.Errorf("said %v, want why its spans are not exported", said)
	}
}

// The resource names what the SDK's own detectors name (host, SDK,
// environment), with Glint's attributes, and a new instance id per process.
func TestTheResourceIsWhatTheSDKsDetectorsWouldMake(t *testing.T) {
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test,service.name=from-attributes")
	for _, serviceName := range []string{"", "from-env"} {
		t.Setenv("OTEL_SERVICE_NAME", serviceName)
		ctx := context.Background()
		attrs := []attribute.KeyValue{AppID.String("app-20260101000000-0000")}
		got, err := newResource(ctx, ServiceExecutor, attrs)
		if err != nil {
			t.Fatal(err)
		}
		again, err := newResource(ctx, ServiceExecutor, attrs)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := got.Set().Value(semconv.ServiceInstanceIDKey)
		other, _ := again.Set().Value(semconv.ServiceInstanceIDKey)
		if u, err := uuid.Parse(id.AsString()); err != nil || u.Version() != 4 || id == other {
			t.Errorf("instance ids %q and %q: want two different version 4 UUIDs", id.AsString(), other.AsString())
		}
		want, err := resource.New(ctx,
			resource.WithSchemaURL(semconv.SchemaURL),
			resource.WithAttributes(semconv.ServiceName(ServiceExecutor), semconv.ServiceVersion(version()), semconv.ServiceInstanceID(id.AsString())),
			resource.WithAttributes(attrs...),
			resource.WithHost(),
			resource.WithTelemetrySDK(),
			resource.WithFromEnv(),
		)
		if err != nil {
			t.Fatal(err)
		}
		if got.Equivalent() != want.Equivalent() || got.SchemaURL() != want.SchemaURL() {
			t.Errorf("OTEL_SERVICE_NAME=%q: resource\n%v\nwant\n%v", serviceName, got, want)
		}
	}
}
