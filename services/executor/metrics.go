package executor

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	"github.com/glint-cluster/glint/pkg/lifecycle"
)

// metrics are the executor's Prometheus metrics, which it writes itself in
// the text exposition format: client_golang's package initialisation and
// the pages it touches were a measured part of every cold executor's start
// (BENCHMARKS.md, "The executor's own metrics"), for two metrics and a few
// of the runtime's. Every other process serves its registry (prom).
type metrics struct {
	running atomic.Int64
	// ended counts the tasks that ended, by endStates' index.
	ended [len(endStates)]atomic.Uint64
}

// endStates are the ends glint_executor_tasks_total counts.
var endStates = [...]driverv1.TaskState{driverv1.TaskState_TASK_STATE_FINISHED, driverv1.TaskState_TASK_STATE_FAILED, driverv1.TaskState_TASK_STATE_KILLED}

// end counts n tasks that ended in st.
func (m *metrics) end(st driverv1.TaskState, n int) {
	for i, s := range endStates {
		if s == st {
			m.ended[i].Add(uint64(n))
		}
	}
}

// ServeHTTP writes the executor's metrics, then the Go runtime's and the
// process's under client_golang's names.
func (m *metrics) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	var b strings.Builder
	family(&b, "glint_executor_tasks_running", "gauge", "Tasks running on the executor's cores.")
	sample(&b, "glint_executor_tasks_running", "", float64(m.running.Load()))
	family(&b, "glint_executor_tasks_total", "counter", "Tasks the executor ran, by how they ended.")
	for i, st := range endStates {
		sample(&b, "glint_executor_tasks_total", `state="`+lifecycle.Label(st)+`"`, float64(m.ended[i].Load()))
	}
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	for _, g := range []struct {
		name, kind, help string
		value            float64
	}{
		{"go_goroutines", "gauge", "Number of goroutines that currently exist.", float64(runtime.NumGoroutine())},
		{"go_sched_gomaxprocs_threads", "gauge", "The current runtime.GOMAXPROCS setting.", float64(runtime.GOMAXPROCS(0))},
		{"go_memstats_heap_alloc_bytes", "gauge", "Number of heap bytes allocated and currently in use.", float64(mem.HeapAlloc)},
		{"go_memstats_sys_bytes", "gauge", "Number of bytes obtained from system.", float64(mem.Sys)},
		{"process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.", cpuSeconds()},
		{"process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", residentBytes()},
	} {
		if g.value < 0 {
			continue
		}
		family(&b, g.name, g.kind, g.help)
		sample(&b, g.name, "", g.value)
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = io.WriteString(w, b.String())
}

func family(b *strings.Builder, name, kind, help string) {
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, kind)
}

func sample(b *strings.Builder, name, labels string, v float64) {
	b.WriteString(name)
	if labels != "" {
		b.WriteString("{" + labels + "}")
	}
	b.WriteString(" " + strconv.FormatFloat(v, 'g', -1, 64) + "\n")
}

// cpuSeconds is the process's user and system CPU time; -1 if unknown.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return (time.Duration(ru.Utime.Nano()) + time.Duration(ru.Stime.Nano())).Seconds()
}

// residentBytes is the process's resident set (/proc/self/statm); -1 if unknown.
func residentBytes() float64 {
	statm, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return -1
	}
	fields := strings.Fields(string(statm))
	if len(fields) < 2 {
		return -1
	}
	pages, err := strconv.ParseUint(fields[1], 10, 64)
	if err != nil {
		return -1
	}
	return float64(pages) * float64(os.Getpagesize())
}
