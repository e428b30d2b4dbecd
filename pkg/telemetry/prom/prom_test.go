package prom

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The Go runtime and process collectors, made at the first scrape, are in
// every scrape.
func TestARegistryServesTheGoRuntimeAndProcessMetrics(t *testing.T) {
	h := Handler(NewRegistry())
	for range 2 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_resident_memory_bytes", "process_cpu_seconds_total"} {
			if !strings.Contains(rec.Body.String(), "\n"+name+" ") {
				t.Errorf("scrape has no %s", name)
			}
		}
	}
}
