package executor

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
)

// The executor writes its metrics itself: a page Prometheus' own parser
// reads, with its task gauge and counters and the runtime's and process's
// metrics under client_golang's names.
func TestTheExecutorsMetricsAreAPagePrometheusReads(t *testing.T) {
	var m metrics
	m.running.Add(2)
	m.end(driverv1.TaskState_TASK_STATE_FINISHED, 3)
	m.end(driverv1.TaskState_TASK_STATE_KILLED, 1)
	m.end(driverv1.TaskState_TASK_STATE_KILLED, 4)
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if ct := rec.Header().Get("Content-Type"); ct != "text/plain; version=0.0.4; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	value := func(name, state string) float64 {
		f, ok := families[name]
		if !ok {
			t.Fatalf("no %s", name)
		}
		for _, s := range f.GetMetric() {
			if len(s.GetLabel()) == 0 && state == "" || len(s.GetLabel()) == 1 && s.GetLabel()[0].GetValue() == state {
				return s.GetGauge().GetValue() + s.GetCounter().GetValue() + s.GetUntyped().GetValue()
			}
		}
		t.Fatalf("%s has no sample for %q", name, state)
		return 0
	}
	for _, c := range []struct {
		name, state string
		want        float64
	}{
		{"glint_executor_tasks_running", "", 2},
		{"glint_executor_tasks_total", "finished", 3},
		{"glint_executor_tasks_total", "failed", 0},
		{"glint_executor_tasks_total", "killed", 5},
		{"go_sched_gomaxprocs_threads", "", float64(runtime.GOMAXPROCS(0))},
	} {
		if got := value(c.name, c.state); got != c.want {
			t.Errorf("%s{state=%q} = %v, want %v", c.name, c.state, got, c.want)
		}
	}
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "go_memstats_sys_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes"} {
		if value(name, "") <= 0 {
			t.Errorf("%s is not positive", name)
		}
	}
}
