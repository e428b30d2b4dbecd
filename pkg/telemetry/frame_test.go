package telemetry

import (
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
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
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
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

// resourceSpans are the resource_spans entries of every request c got.
func (c *collector) resourceSpans() []*tracepb.ResourceSpans {
	c.mu.Lock()
	defer c.mu.Unlock()
	var all []*tracepb.ResourceSpans
	for _, req := range c.got {
		all = append(all, req.GetResourceSpans()...)
	}
	return all
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

// A relayed frame is what otlptracehttp sends for the same spans, decoded
// with the official protos — made after a larger frame in the same buffer.
func TestARelayedFrameIsTheRequestTheOfficialExporterSends(t *testing.T) {
	theirs := newCollector(t)
	spans := richSpans(t)
	msg := appendTraceRequest(nil, append(spans, spans...))
	msg = appendTraceRequest(msg[:0], spans)
	ours := &coltracepb.ExportTraceServiceRequest{}
	if err := proto.Unmarshal(msg, ours); err != nil {
		t.Fatal(err)
	}
	official, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(theirs.URL+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	if err := official.ExportSpans(context.Background(), spans); err != nil {
		t.Fatal(err)
	}
	if len(theirs.got) != 1 {
		t.Fatalf("official requests: %d, want 1", len(theirs.got))
	}
	// The official exporter leaves a link's trace state out; OTLP has a field
	// for it, and Glint fills it.
	link := ours.GetResourceSpans()[0].GetScopeSpans()[0].GetSpans()[0].GetLinks()[0]
	if got := link.GetTraceState(); got != "glint=1,other=x" {
		t.Errorf("link trace state %q, want the linked context's", got)
	}
	link.TraceState = ""
	if diff := cmp.Diff(theirs.got[0], ours, protocmp.Transform()); diff != "" {
		t.Errorf("frame differs from the official exporter's request (-official +ours):\n%s", diff)
	}
}
