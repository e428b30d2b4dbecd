package telemetry

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
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
