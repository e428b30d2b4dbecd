package telemetry

import (
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/google/go-cmp/cmp"
)

// collector is an OTLP/HTTP endpoint that keeps what it was sent.
type collector struct {
	*httptest.Server
	mu       sync.Mutex
	requests []*http.Request
	got      []*coltracepb.ExportTraceServiceRequest
	// answers are the status codes of the first calls (then 200).
	answers []int
}

func newCollector(t *testing.T, answers ...int) *collector {
	c := &collector{answers: answers}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		req := &coltracepb.ExportTraceServiceRequest{}
		if err == nil {
			err = proto.Unmarshal(b, req)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.requests = append(c.requests, r)
		if len(c.answers) > 0 {
			code := c.answers[0]
			c.answers = c.answers[1:]
			http.Error(w, "not now", code)
			return
		}
		c.got = append(c.got, req)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(c.Close)
	return c
}

// exporterTo is an exporter configured by the environment, its endpoint
// set to endpoint.
func exporterTo(t *testing.T, endpoint string) *otlpExporter {
	t.Helper()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
	e, err := newOTLPExporter()
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// richSpans are spans using every field and attribute type OTLP carries.
func richSpans(t *testing.T) []sdktrace.ReadOnlySpan {
	t.Helper()
	res := resource.NewWithAttributes("https://opentelemetry.io/schemas/1.26.0",
		attribute.String("service.name", ServiceExecutor), attribute.Int("glint.cores", 4))
	remote := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: trace.FlagsSampled, Remote: true,
	})
	ts, err := trace.ParseTraceState("glint=1,other=x")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Unix(1_700_000_000, 123_456_789)
	attrs := []attribute.KeyValue{
		attribute.Bool("b", true), attribute.Bool("f", false), attribute.Int64("i", -7), attribute.Int64("zero", 0),
		attribute.Float64("d", 2.5), attribute.String("s", "ü"), attribute.String("empty", ""),
		attribute.BoolSlice("bs", []bool{true, false}), attribute.Int64Slice("is", []int64{1, -2}),
		attribute.Float64Slice("ds", []float64{0.5}), attribute.StringSlice("ss", []string{"a", ""}),
	}
	stubs := tracetest.SpanStubs{
		{
			Name: "RegisterExecutor", SpanKind: trace.SpanKindServer,
			SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: remote.TraceID(), SpanID: trace.SpanID{9}, TraceFlags: trace.FlagsSampled, TraceState: ts}),
			Parent:      remote, StartTime: start, EndTime: start.Add(3 * time.Millisecond),
			Attributes: attrs, DroppedAttributes: 2,
			Events: []sdktrace.Event{{Name: "exception", Time: start.Add(time.Millisecond),
				Attributes: []attribute.KeyValue{attribute.String("exception.message", "no")}, DroppedAttributeCount: 1}},
			DroppedEvents:          3,
			Links:                  []sdktrace.Link{{SpanContext: remote.WithTraceState(ts), Attributes: []attribute.KeyValue{attribute.String("why", "trigger")}, DroppedAttributeCount: 4}},
			DroppedLinks:           5,
			Status:                 sdktrace.Status{Code: codes.Error, Description: "refused"},
			Resource:               res,
			InstrumentationScope:   instrumentation.Scope{Name: ScopeName, Version: "v1", SchemaURL: "https://example.com/s"},
			ChildSpanCount:         1,
			InstrumentationLibrary: instrumentation.Scope{Name: ScopeName, Version: "v1", SchemaURL: "https://example.com/s"},
		},
		{
			Name: "LaunchTask", SpanKind: trace.SpanKindClient,
			SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: remote.TraceID(), SpanID: trace.SpanID{10}}),
			Parent:      trace.NewSpanContext(trace.SpanContextConfig{TraceID: remote.TraceID(), SpanID: trace.SpanID{9}, TraceFlags: trace.FlagsSampled}),
			StartTime:   start, EndTime: start.Add(time.Millisecond),
			Status:               sdktrace.Status{Code: codes.Ok},
			Resource:             res,
			InstrumentationScope: instrumentation.Scope{Name: ScopeName, Version: "v1", SchemaURL: "https://example.com/s"},
		},
		{
			Name: "root", SpanKind: trace.SpanKindInternal,
			SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{7}, SpanID: trace.SpanID{11}, TraceFlags: trace.FlagsSampled}),
			StartTime:   start, EndTime: start.Add(time.Millisecond),
			Resource:             res,
			InstrumentationScope: instrumentation.Scope{Name: ScopeName, Version: "v1", SchemaURL: "https://example.com/s"},
		},
	}
	return stubs.Snapshots()
}

// TestTheOTLPExporterSendsWhatTheOfficialOneSends: the same spans exported by
// Glint's exporter and by otlptracehttp decode, with the official protos, to
// equal requests — Glint's after a larger export in the same buffers.
func TestTheOTLPExporterSendsWhatTheOfficialOneSends(t *testing.T) {
	ours, theirs := newCollector(t), newCollector(t)
	spans := richSpans(t)

	e := exporterTo(t, ours.URL+"/")
	for _, batch := range [][]sdktrace.ReadOnlySpan{append(spans, spans...), spans} {
		if err := e.ExportSpans(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
	}
	ours.got, ours.requests = ours.got[1:], ours.requests[1:]
	official, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(theirs.URL+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	if err := official.ExportSpans(context.Background(), spans); err != nil {
		t.Fatal(err)
	}
	if len(ours.got) != 1 || len(theirs.got) != 1 {
		t.Fatalf("requests: ours %d, official %d; want 1 each", len(ours.got), len(theirs.got))
	}
	// The official exporter leaves a link's trace state out; OTLP has a field
	// for it, and Glint fills it.
	link := ours.got[0].GetResourceSpans()[0].GetScopeSpans()[0].GetSpans()[0].GetLinks()[0]
	if got := link.GetTraceState(); got != "glint=1,other=x" {
		t.Errorf("link trace state %q, want the linked context's", got)
	}
	link.TraceState = ""
	if diff := cmp.Diff(theirs.got[0], ours.got[0], protocmp.Transform()); diff != "" {
		t.Errorf("request differs from the official exporter's (-official +ours):\n%s", diff)
	}
	if p := ours.requests[0].URL.Path; p != "/v1/traces" {
		t.Errorf("posted to %s, want /v1/traces", p)
	}
	if ct := ours.requests[0].Header.Get("Content-Type"); ct != "application/x-protobuf" {
		t.Errorf("Content-Type %q", ct)
	}
}

func TestTheOTLPExporterSendsHeadersGzipAndTheTracesEndpointAsItIs(t *testing.T) {
	c := newCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", c.URL+"/custom/path")
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20abc, x-tenant = glint")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip")
	e, err := newOTLPExporter()
	if err != nil {
		t.Fatal(err)
	}
	spans := richSpans(t)
	for _, batch := range [][]sdktrace.ReadOnlySpan{append(spans, spans...), spans} {
		if err := e.ExportSpans(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
	}
	r := c.requests[1]
	for k, want := range map[string]string{"Authorization": "Bearer abc", "X-Tenant": "glint", "Content-Encoding": "gzip"} {
		if got := r.Header.Get(k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	if r.URL.Path != "/custom/path" {
		t.Errorf("posted to %s, want the traces endpoint as given", r.URL.Path)
	}
	for i, want := range []int{6, 3} {
		if n := len(c.got[i].GetResourceSpans()[0].GetScopeSpans()[0].GetSpans()); n != want {
			t.Errorf("export %d: %d spans arrived, want %d", i, n, want)
		}
	}
}

// An export reuses the buffers of the one before: encoding spans again
// allocates no more than encoding them into a buffer large enough does,
// gzipped or not.
func TestTheOTLPExporterEncodesInItsOwnBuffers(t *testing.T) {
	spans := richSpans(t)
	large := make([]byte, 0, 1<<20)
	inPlace := testing.AllocsPerRun(10, func() { appendTraceRequest(large, spans) })
	for _, compression := range []string{"none", "gzip"} {
		t.Setenv("OTEL_EXPORTER_OTLP_COMPRESSION", compression)
		e := exporterTo(t, "http://127.0.0.1:1")
		if n := testing.AllocsPerRun(10, func() {
			if _, err := e.encode(spans, nil); err != nil {
				t.Fatal(err)
			}
		}); n > inPlace {
			t.Errorf("compression %s: encoding allocates %v times an export, want no more than in place (%v)", compression, n, inPlace)
		}
	}
}

// keepBodies is a transport that answers 200 at once and keeps each request's
// body unread, as one may that got its answer before it sent everything.
type keepBodies struct{ bodies chan io.ReadCloser }

func (k keepBodies) RoundTrip(r *http.Request) (*http.Response, error) {
	k.bodies <- r.Body
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
}

// The transport cannot read an export's body once the export returned: its
// bytes are then the next export's buffer.
func TestAnExportsBodyIsDoneWhenTheExportReturns(t *testing.T) {
	e := exporterTo(t, "http://127.0.0.1:1")
	transport := keepBodies{make(chan io.ReadCloser, 1)}
	e.client = func() *http.Client { return &http.Client{Transport: transport} }
	if err := e.ExportSpans(context.Background(), richSpans(t)); err != nil {
		t.Fatal(err)
	}
	body := <-transport.bodies
	if n, err := body.Read(make([]byte, 64)); n != 0 || !errors.Is(err, errExportDone) {
		t.Errorf("read %d bytes (%v) of a body after its export returned, want none and errExportDone", n, err)
	}
}

func TestTheOTLPExporterRetriesWhileTheCollectorIsBusyButNotOnARefusal(t *testing.T) {
	busy := newCollector(t, http.StatusServiceUnavailable, http.StatusTooManyRequests)
	e := exporterTo(t, busy.URL)
	if err := e.ExportSpans(context.Background(), richSpans(t)); err != nil {
		t.Fatal(err)
	}
	if len(busy.requests) != 3 || len(busy.got) != 1 {
		t.Errorf("%d calls, %d accepted; want 3 calls (two busy answers retried), 1 accepted", len(busy.requests), len(busy.got))
	}

	refusing := newCollector(t, http.StatusBadRequest)
	e = exporterTo(t, refusing.URL)
	if err := e.ExportSpans(context.Background(), richSpans(t)); err == nil || !strings.Contains(err.Error(), "400") {
		t.Errorf("a refused export returned %v, want the 400", err)
	}
	if len(refusing.requests) != 1 {
		t.Errorf("a refused export was sent %d times, want once", len(refusing.requests))
	}

	ctx, cancel := context.WithCancel(context.Background())
	always := newCollector(t, http.StatusServiceUnavailable)
	e = exporterTo(t, always.URL)
	cancel()
	if err := e.ExportSpans(ctx, richSpans(t)); !errors.Is(err, context.Canceled) {
		t.Errorf("retrying past the caller's deadline: %v, want it to stop with the context", err)
	}
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.ExportSpans(context.Background(), richSpans(t)); err == nil {
		t.Error("an export after Shutdown was accepted")
	}
}

func TestOTLPSettingsThatCannotWorkAreErrors(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"grpc":        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
		"no scheme":   {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "collector:4318"},
		"headers":     {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_HEADERS": "novalue"},
		"timeout":     {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_TIMEOUT": "soon"},
		"compression": {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"},
		"ca":          {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_CERTIFICATE": "/nonexistent/ca.pem"},
	} {
		t.Run(name, func(t *testing.T) {
			for k, v := range env {
				t.Setenv(k, v)
			}
			if _, _, err := NewTracerProvider(context.Background(), ServiceMaster); err == nil {
				t.Errorf("%v accepted", env)
			} else {
				t.Log(err)
			}
		})
	}
}

// An export follows a collector's temporary redirect, sending its body again.
func TestAnExportFollowsARedirect(t *testing.T) {
	c := newCollector(t)
	moved := httptest.NewServer(http.RedirectHandler(c.URL+"/v1/traces", http.StatusTemporaryRedirect))
	defer moved.Close()
	e := exporterTo(t, moved.URL)
	if err := e.ExportSpans(context.Background(), richSpans(t)); err != nil {
		t.Fatal(err)
	}
	if len(c.got) != 1 || len(c.got[0].GetResourceSpans()[0].GetScopeSpans()[0].GetSpans()) != 3 {
		t.Errorf("the collector got %v, want the 3 spans", c.got)
	}
}
