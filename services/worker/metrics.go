package worker

import (
	"github.com/prometheus/client_golang/prometheus"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/lifecycle"
)

// metrics are the worker's Prometheus metrics. Cores, memory and executors
// are read from the worker's state at scrape time (see Collect).
type metrics struct {
	processStart      prometheus.Histogram
	masterConnected   prometheus.Gauge
	heartbeatFailures prometheus.Counter
	workDirsRemoved   prometheus.Counter
	staleCommands     prometheus.Counter

	cores     *prometheus.Desc
	memory    *prometheus.Desc
	executors *prometheus.Desc
	// What the executors and drivers use, measured (usage.go).
	childCPU    *prometheus.Desc
	childMemory *prometheus.Desc
}

func newMetrics(reg prometheus.Registerer, s *Server) *metrics {
	m := &metrics{
		processStart: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "glint_worker_process_start_seconds",
			Help:    "Time from receiving LaunchExecutor to the executor's process running (work dir, command, logs, fork/exec).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		masterConnected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "glint_worker_master_connected",
			Help: "1 while the worker is registered with a master and its heartbeats succeed, else 0.",
		}),
		staleCommands: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "glint_worker_stale_commands_total",
			Help: "Commands refused because they came from a deposed master (an older leadership epoch).",
		}),
		heartbeatFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "glint_worker_heartbeat_failures_total",
			Help: "Heartbeats to the master that failed.",
		}),
		workDirsRemoved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "glint_worker_workdirs_removed_total",
			Help: "Work directories of finished applications and drivers removed by the cleanup.",
		}),
		cores:     prometheus.NewDesc("glint_worker_cores", "The worker's cores, used by executors and drivers or free.", []string{"state"}, nil),
		memory:    prometheus.NewDesc("glint_worker_memory_bytes", "The worker's memory, used by executors and drivers or free.", []string{"state"}, nil),
		executors: prometheus.NewDesc("glint_worker_executors", "Executors the worker runs, by state.", []string{"state"}, nil),
		childCPU: prometheus.NewDesc("glint_worker_children_cpu_seconds_total",
			"CPU time, user and system, the process trees of the worker's executors or drivers used since the worker started.", []string{"process"}, nil),
		childMemory: prometheus.NewDesc("glint_worker_children_memory_bytes",
			"Memory of the running executors or drivers (their cgroups', page cache included, on a contained worker; else their process trees' resident memory): now (current), or the sum of each one's highest (peak).", []string{"process", "kind"}, nil),
	}
	reg.MustRegister(m.processStart, m.masterConnected, m.heartbeatFailures, m.workDirsRemoved, m.staleCommands, &stateCollector{m: m, s: s})
	return m
}

// stateCollector reads the worker's state under its lock at scrape time.
type stateCollector struct {
	m *metrics
	s *Server
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.m.cores
	ch <- c.m.memory
	ch <- c.m.executors
	ch <- c.m.childCPU
	ch <- c.m.childMemory
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	m, s := c.m, c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	gauge := func(d *prometheus.Desc, v float64, label string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, label)
	}
	gauge(m.cores, float64(s.coresUsed), "used")
	gauge(m.cores, float64(s.cfg.Cores-s.coresUsed), "free")
	gauge(m.memory, float64(s.memoryUsedMiB<<20), "used")
	gauge(m.memory, float64((s.cfg.MemoryMiB-s.memoryUsedMiB)<<20), "free")
	states := map[masterv1.ExecutorState]int{}
	for _, r := range s.executors {
		states[r.state]++
	}
	for _, st := range []masterv1.ExecutorState{masterv1.ExecutorState_EXECUTOR_STATE_LAUNCHING, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING} {
		gauge(m.executors, float64(states[st]), lifecycle.Label(st))
	}
	var memory [2]usage // executors, drivers
	for _, r := range s.executors {
		memory[0].memoryBytes += r.used.memoryBytes
		memory[0].peakBytes += r.used.peakBytes
	}
	for _, r := range s.drivers {
		memory[1].memoryBytes += r.used.memoryBytes
		memory[1].peakBytes += r.used.peakBytes
	}
	for i, process := range []string{executorKind.noun, driverKind.noun} {
		ch <- prometheus.MustNewConstMetric(m.childCPU, prometheus.CounterValue, s.usedCPU[process], process)
		ch <- prometheus.MustNewConstMetric(m.childMemory, prometheus.GaugeValue, float64(memory[i].memoryBytes), process, "current")
		ch <- prometheus.MustNewConstMetric(m.childMemory, prometheus.GaugeValue, float64(memory[i].peakBytes), process, "peak")
	}
}
