package master

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
)

// BenchmarkMetricsScrape scrapes the master's /metrics with 1,000 registered
// workers and reports the page's series count alongside time and memory.
func BenchmarkMetricsScrape(b *testing.B) {
	s, err := New(Config{URL: "http://master.test:7077"})
	if err != nil {
		b.Fatal(err)
	}
	defer s.cancel()
	registerWorkers(b, s, 1000)
	h := s.Handler()
	series := 0
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if rec.Code != http.StatusOK {
			b.Fatalf("scrape: %d", rec.Code)
		}
		series = 0
		for line := range strings.SplitSeq(rec.Body.String(), "\n") {
			if line != "" && !strings.HasPrefix(line, "#") {
				series++
			}
		}
	}
	b.ReportAllocs()
	b.ReportMetric(float64(series), "series")
}

// registerWorkers registers n workers of 16 cores and 64 GiB with s.
func registerWorkers(b *testing.B, s *Server, n int) {
	b.Helper()
	for i := range n {
		_, err := s.RegisterWorker(context.Background(), connect.NewRequest(&masterv1.RegisterWorkerRequest{
			WorkerId: fmt.Sprintf("worker-20261129140000-10.0.%d.%d-7078", i/250, i%250), Host: fmt.Sprintf("10.0.%d.%d", i/250, i%250),
			Port: 7078, Cores: 16, MemoryMib: 65536, WorkerUrl: fmt.Sprintf("http://10.0.%d.%d:7078", i/250, i%250),
		}))
		if err != nil {
			b.Fatal(err)
		}
	}
}
