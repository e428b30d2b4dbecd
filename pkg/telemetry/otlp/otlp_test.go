package otlp

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// got keeps the span names a collector was sent.
type got struct {
	mu    sync.Mutex
	names []string
}

func (g *got) add(req *coltracepb.ExportTraceServiceRequest) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				g.names = append(g.names, s.GetName())
			}
		}
	}
}

func (g *got) String() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return strings.Join(g.names, ",")
}

// httpCollector is an OTLP/HTTP collector on loopback; it returns its URL.
func httpCollector(t *testing.T, g *got) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		req := &coltracepb.ExportTraceServiceRequest{}
		if err == nil {
			err = proto.Unmarshal(body, req)
		}
		if err != nil || r.URL.Path != "/v1/traces" {
			http.Error(w, "no", http.StatusBadRequest)
			return
		}
		g.add(req)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// grpcCollector is an OTLP/gRPC collector on loopback; it returns its URL.
type grpcCollector struct {
	coltracepb.UnimplementedTraceServiceServer
	g *got
}

func (c grpcCollector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.g.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func startGRPCCollector(t *testing.T, g *got) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, grpcCollector{g: g})
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	return "http://" + l.Addr().String()
}

// relayedFrame is an ExportTraceServiceRequest of one span named name, as
// an executor relays it.
func relayedFrame(t *testing.T, name string) []byte {
	frame, err := proto.Marshal(&coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{
			Name: name, TraceId: make([]byte, 16), SpanId: []byte{1, 2, 3, 4, 5, 6, 7, 8},
		}}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return frame
}

// Over either protocol, the exporter sends a process's spans and the upload
// the frames relayed to it, to the collector the variables name.
func TestSpansAndRelayedFramesReachTheCollectorOverHTTPAndGRPC(t *testing.T) {
	for _, protocol := range []string{"http/protobuf", "grpc"} {
		t.Run(strings.ReplaceAll(protocol, "/", "-"), func(t *testing.T) {
			g := &got{}
			endpoint := httpCollector(t, g)
			if protocol == "grpc" {
				endpoint = startGRPCCollector(t, g)
			}
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
			exporter, upload, err := Exporter(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if err := exporter.ExportSpans(context.Background(), tracetest.SpanStubs{{Name: "own"}}.Snapshots()); err != nil {
				t.Fatal(err)
			}
			if err := upload(context.Background(), relayedFrame(t, "relayed")); err != nil {
				t.Fatal(err)
			}
			if err := exporter.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			if g.String() != "own,relayed" {
				t.Errorf("the collector got %q, want own,relayed", g)
			}
		})
	}
}

// A relayed frame that is no request is refused, not sent.
func TestARelayedFrameThatIsNoRequestIsRefused(t *testing.T) {
	g := &got{}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", httpCollector(t, g))
	exporter, upload, err := Exporter(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer exporter.Shutdown(context.Background())
	if err := upload(context.Background(), []byte{0xff, 0xff}); err == nil || !strings.Contains(err.Error(), "no ExportTraceServiceRequest") {
		t.Errorf("upload of garbage: %v", err)
	}
	if g.String() != "" {
		t.Errorf("the collector got %q", g)
	}
}

func TestSettingsThatCannotWorkAreErrors(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"protocol":       {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"},
		"no scheme":      {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "collector:4318"},
		"grpc no scheme": {"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
	} {
		t.Run(name, func(t *testing.T) {
			for k, v := range env {
				t.Setenv(k, v)
			}
			if _, _, err := Exporter(context.Background()); err == nil {
				t.Errorf("%v accepted", env)
			}
		})
	}
}
