package master

import (
	"cmp"
	"regexp"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/lifecycle"
)

// metrics are the master's Prometheus metrics. Counters and histograms are
// updated as things happen; the state gauges are read from the master's state
// at scrape time (see Collect), so they can never drift from it.
type metrics struct {
	workerTimeouts   prometheus.Counter
	executorLaunches *prometheus.CounterVec
	scheduleDuration prometheus.Histogram
	executorStart    prometheus.Histogram
	stateWrites      prometheus.Histogram
	stateWriteErrors prometheus.Counter
	executorEnds     *prometheus.CounterVec
	launchFailures   *prometheus.CounterVec
	appsEnded        *prometheus.CounterVec
	driversEnded     *prometheus.CounterVec
	workerTimeout    *prometheus.Desc

	workerTimedOut *prometheus.Desc
	workers        *prometheus.Desc
	workerCores    *prometheus.Desc
	workerMemory   *prometheus.Desc
	cores          *prometheus.Desc
	memory         *prometheus.Desc
	heartbeatAge   *prometheus.Desc
	apps           *prometheus.Desc
	drivers        *prometheus.Desc
	executors      *prometheus.Desc
	leader         *prometheus.Desc
}

// Label values of glint_master_executor_launches_total.
const (
	launchOK    = "ok"
	launchError = "error"
)

// Reasons of glint_master_executor_ends_total: why an executor ended.
const (
	endExited       = "exited"        // its process ended by itself, after it ran
	endKilled       = "killed"        // it was killed on request
	endLostWorker   = "lost_worker"   // its worker was lost
	endLaunchFailed = "launch_failed" // it failed before it ran
	endOOM          = "oom"           // it ran out of memory, as its message says
)

// stepRequest is the launch step of glint_master_executor_launch_failures_total
// when the worker did not take the master's LaunchExecutor; stepUnknown when
// the worker's message names no step.
const (
	stepRequest = "request"
	stepUnknown = "unknown"
)

// outOfMemory matches the messages of executors that ran out of memory: the
// worker's "memory limit" kill, the kernel's OOM killer, a JVM's or Go's own
// message.
var outOfMemory = regexp.MustCompile(`(?i)\boom|out of memory|memory limit`)

func newMetrics(reg prometheus.Registerer, s *Server) *metrics {
	m := &metrics{
		workerTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "glint_master_worker_timeouts_total",
			Help: "Workers declared DEAD because no heartbeat arrived within the worker timeout.",
		}),
		executorLaunches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "glint_master_executor_launches_total",
			Help: "LaunchExecutor commands sent to workers, by whether the worker accepted them.",
		}, []string{"result"}),
		scheduleDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "glint_master_schedule_duration_seconds",
			Help:    "Time one schedule() pass took to place drivers and executors.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 12),
		}),
		executorStart: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "glint_master_executor_start_seconds",
			Help: "Time from scheduling an executor to its worker reporting its process running. " +
				"The master lives long, unlike drivers, so this launch latency is always scraped.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		stateWrites: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "glint_master_state_write_seconds",
			Help:    "Time to keep one state change in the recovery store (--recovery-mode).",
			Buckets: prometheus.ExponentialBuckets(1e-5, 4, 10),
		}),
		stateWriteErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "glint_master_state_write_errors_total",
			Help: "State changes the recovery store failed to keep.",
		}),
		executorEnds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "glint_master_executor_ends_total",
			Help: "Executors that ended, by final state and reason (exited, killed, lost_worker, launch_failed, oom).",
		}, []string{"state", "reason"}),
		launchFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "glint_master_executor_launch_failures_total",
			Help: "Executors that failed before they ran, by the launch step that failed (request: the worker did not take the launch).",
		}, []string{"step"}),
		appsEnded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "glint_master_apps_ended_total",
			Help: "Applications that ended, by final state.",
		}, []string{"state"}),
		driversEnded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "glint_master_drivers_ended_total",
			Help: "Cluster-mode drivers that ended, by final state.",
		}, []string{"state"}),
		workerTimeout: prometheus.NewDesc("glint_master_worker_timeout_seconds",
			"The worker timeout: a worker without a heartbeat for this long is declared DEAD (the --worker-timeout, or longer past --max-heartbeat-rate).", nil, nil),
		workerTimedOut: prometheus.NewDesc("glint_master_worker_timed_out_timestamp_seconds",
			"When each worker still listed DEAD was declared so for its silence (the worker timeout).", []string{"worker"}, nil),
		leader:       prometheus.NewDesc("glint_master_leader", "1 while this master leads the cluster (ALIVE), 0 while it recovers or stands by.", nil, nil),
		workers:      prometheus.NewDesc("glint_master_workers", "Registered workers by state.", []string{"state"}, nil),
		workerCores:  prometheus.NewDesc("glint_master_worker_cores", "Cores of each live worker, used or free.", []string{"worker", "state"}, nil),
		workerMemory: prometheus.NewDesc("glint_master_worker_memory_bytes", "Memory of each live worker, used or free.", []string{"worker", "state"}, nil),
		cores:        prometheus.NewDesc("glint_master_cores", "Cores of all ALIVE workers, used or free.", []string{"state"}, nil),
		memory:       prometheus.NewDesc("glint_master_memory_bytes", "Memory of all ALIVE workers, used or free.", []string{"state"}, nil),
		heartbeatAge: prometheus.NewDesc("glint_master_worker_heartbeat_age_seconds", "Seconds since each live worker's last heartbeat.", []string{"worker"}, nil),
		apps:         prometheus.NewDesc("glint_master_apps", "Active applications by state.", []string{"state"}, nil),
		drivers:      prometheus.NewDesc("glint_master_drivers", "Active cluster-mode drivers by state.", []string{"state"}, nil),
		executors:    prometheus.NewDesc("glint_master_executors", "Executors of active applications by state.", []string{"state"}, nil),
	}
	for _, result := range []string{launchOK, launchError} {
		m.executorLaunches.WithLabelValues(result)
	}
	// Every series an alert reads over a window exists from the start, so
	// that the first failure is an increase.
	for _, step := range append(slices.Clone(lifecycle.LaunchSteps), stepRequest, stepUnknown) {
		m.launchFailures.WithLabelValues(step)
	}
	for _, st := range []masterv1.ApplicationState{masterv1.ApplicationState_APPLICATION_STATE_FINISHED,
		masterv1.ApplicationState_APPLICATION_STATE_FAILED, masterv1.ApplicationState_APPLICATION_STATE_KILLED} {
		m.appsEnded.WithLabelValues(lifecycle.Label(st))
	}
	for _, st := range []masterv1.DriverState{masterv1.DriverState_DRIVER_STATE_FINISHED, masterv1.DriverState_DRIVER_STATE_FAILED,
		masterv1.DriverState_DRIVER_STATE_KILLED, masterv1.DriverState_DRIVER_STATE_ERROR, masterv1.DriverState_DRIVER_STATE_RELAUNCHING} {
		m.driversEnded.WithLabelValues(lifecycle.Label(st))
	}
	for _, end := range []struct {
		state  masterv1.ExecutorState
		reason string
	}{
		{masterv1.ExecutorState_EXECUTOR_STATE_EXITED, endExited}, {masterv1.ExecutorState_EXECUTOR_STATE_FAILED, endExited},
		{masterv1.ExecutorState_EXECUTOR_STATE_FAILED, endLaunchFailed}, {masterv1.ExecutorState_EXECUTOR_STATE_FAILED, endOOM},
		{masterv1.ExecutorState_EXECUTOR_STATE_KILLED, endKilled}, {masterv1.ExecutorState_EXECUTOR_STATE_LOST, endLostWorker},
	} {
		m.executorEnds.WithLabelValues(lifecycle.Label(end.state), end.reason)
	}
	reg.MustRegister(m.workerTimeouts, m.executorLaunches, m.scheduleDuration, m.executorStart, m.stateWrites, m.stateWriteErrors,
		m.executorEnds, m.launchFailures, m.appsEnded, m.driversEnded,
		&stateCollector{m: m, s: s})
	return m
}

// executorEnded counts e, which ended in its final state from the state
// before; step is the launch step that failed, for one that never ran
// ("": from its message).
func (m *metrics) executorEnded(e *executorInfo, before masterv1.ExecutorState, step string) {
	ran := before != masterv1.ExecutorState_EXECUTOR_STATE_LAUNCHING
	var reason string
	switch {
	case e.state == masterv1.ExecutorState_EXECUTOR_STATE_KILLED:
		reason = endKilled
	case e.state == masterv1.ExecutorState_EXECUTOR_STATE_LOST:
		reason = endLostWorker
	case outOfMemory.MatchString(e.message):
		reason = endOOM
	case !ran && e.state == masterv1.ExecutorState_EXECUTOR_STATE_FAILED:
		reason = endLaunchFailed
	default:
		reason = endExited
	}
	m.executorEnds.WithLabelValues(lifecycle.Label(e.state), reason).Inc()
	if !ran && e.state == masterv1.ExecutorState_EXECUTOR_STATE_FAILED {
		step = cmp.Or(step, lifecycle.LaunchStepOf(e.message), stepUnknown)
		m.launchFailures.WithLabelValues(step).Inc()
	}
}

// appEnded counts an application's final state, once it is settled.
func (m *metrics) appEnded(state masterv1.ApplicationState) {
	m.appsEnded.WithLabelValues(lifecycle.Label(state)).Inc()
}

// driverEnded counts a driver's final state.
func (m *metrics) driverEnded(state masterv1.DriverState) {
	m.driversEnded.WithLabelValues(lifecycle.Label(state)).Inc()
}

// stateCollector reads the master's state under its lock at scrape time.
type stateCollector struct {
	m *metrics
	s *Server
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.m.workerTimedOut, c.m.workers, c.m.workerCores, c.m.workerMemory, c.m.cores, c.m.memory,
		c.m.heartbeatAge, c.m.apps, c.m.drivers, c.m.executors, c.m.leader, c.m.workerTimeout} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	m, s := c.m, c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(m.workerTimeout, s.workerTimeoutLocked().Seconds())
	workers := map[masterv1.WorkerState]int{}
	// Totals in 64 bits, so that no number of workers can wrap them.
	var cores, coresUsed, memory, memoryUsed int64
	for w := range s.workers.all() {
		workers[w.state]++
		if w.state == masterv1.WorkerState_WORKER_STATE_DEAD {
			if !w.timedOut.IsZero() {
				gauge(m.workerTimedOut, float64(w.timedOut.UnixNano())/1e9, w.id)
			}
			continue
		}
		gauge(m.workerCores, float64(w.coresUsed), w.id, "used")
		gauge(m.workerCores, float64(w.cores-w.coresUsed), w.id, "free")
		gauge(m.workerMemory, float64(w.memoryUsedMiB)*(1<<20), w.id, "used")
		gauge(m.workerMemory, float64(w.memoryMiB-w.memoryUsedMiB)*(1<<20), w.id, "free")
		gauge(m.heartbeatAge, now.Sub(w.lastHeartbeat).Seconds(), w.id)
		if w.state == masterv1.WorkerState_WORKER_STATE_ALIVE {
			cores, coresUsed = cores+int64(w.cores), coresUsed+int64(w.coresUsed)
			memory, memoryUsed = memory+w.memoryMiB, memoryUsed+w.memoryUsedMiB
		}
	}
	for _, st := range []masterv1.WorkerState{masterv1.WorkerState_WORKER_STATE_ALIVE, masterv1.WorkerState_WORKER_STATE_DEAD,
		masterv1.WorkerState_WORKER_STATE_DECOMMISSIONED, masterv1.WorkerState_WORKER_STATE_UNKNOWN} {
		gauge(m.workers, float64(workers[st]), lifecycle.Label(st))
	}
	leads := 0.0
	if s.status == statusAlive {
		leads = 1
	}
	gauge(m.leader, leads)
	gauge(m.cores, float64(coresUsed), "used")
	gauge(m.cores, float64(cores-coresUsed), "free")
	gauge(m.memory, float64(memoryUsed)*(1<<20), "used")
	gauge(m.memory, float64(memory-memoryUsed)*(1<<20), "free")

	apps := map[masterv1.ApplicationState]int{}
	executors := map[masterv1.ExecutorState]int{}
	for _, a := range s.appQueue {
		apps[a.state]++
		for _, e := range a.executors {
			executors[e.state]++
		}
	}
	for _, st := range []masterv1.ApplicationState{masterv1.ApplicationState_APPLICATION_STATE_WAITING, masterv1.ApplicationState_APPLICATION_STATE_RUNNING} {
		gauge(m.apps, float64(apps[st]), lifecycle.Label(st))
	}
	for _, st := range []masterv1.ExecutorState{masterv1.ExecutorState_EXECUTOR_STATE_LAUNCHING, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING,
		masterv1.ExecutorState_EXECUTOR_STATE_DECOMMISSIONED} {
		gauge(m.executors, float64(executors[st]), lifecycle.Label(st))
	}
	drivers := map[masterv1.DriverState]int{}
	for _, d := range s.drivers {
		drivers[d.state]++
	}
	for _, st := range []masterv1.DriverState{masterv1.DriverState_DRIVER_STATE_SUBMITTED, masterv1.DriverState_DRIVER_STATE_RUNNING} {
		gauge(m.drivers, float64(drivers[st]), lifecycle.Label(st))
	}
}
