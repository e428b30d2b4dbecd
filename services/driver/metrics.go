package driver

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/telemetry/prom"
)

// metrics are the driver's Prometheus metrics.
type metrics struct {
	launch       *prometheus.HistogramVec
	tasks        *prometheus.CounterVec
	taskDuration prometheus.Histogram
	// executorRequests and executorsReleased count dynamic allocation's
	// RequestExecutors calls and the idle executors it released.
	executorRequests  prometheus.Counter
	executorsReleased prometheus.Counter
}

// The phases of glint_driver_executor_launch_seconds, in launch order.
const (
	phaseSchedule      = "schedule"       // application registered → executor scheduled (first executors only)
	phaseLaunch        = "launch"         // scheduled → the worker received LaunchExecutor
	phaseProcessStart  = "process_start"  // received → process running
	phaseRetrieveProps = "retrieve_props" // process running → RetrieveSparkProps reached the driver
	phaseRegister      = "register"       // RetrieveSparkProps → RegisterExecutor reached the driver
	phaseFirstTask     = "first_task"     // registered → first task launched on it
	phaseTotal         = "total"          // scheduled → first task
)

func newMetrics(reg prometheus.Registerer, d *Driver) *metrics {
	m := &metrics{
		launch: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "glint_driver_executor_launch_seconds",
			Help:    "Time each phase of an executor's launch took, from schedule to its first task.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"phase"}),
		tasks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "glint_driver_tasks_total",
			Help: "Tasks that ended, by how.",
		}, []string{"state"}),
		taskDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "glint_driver_task_duration_seconds",
			Help:    "Time from a task's launch to its status update.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		executorRequests: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "glint_driver_executor_requests_total",
			Help: "Executor targets dynamic allocation sent the master (RequestExecutors).",
		}),
		executorsReleased: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "glint_driver_executors_released_total",
			Help: "Idle executors dynamic allocation released (KillExecutors).",
		}),
	}
	for _, phase := range []string{phaseSchedule, phaseLaunch, phaseProcessStart, phaseRetrieveProps, phaseRegister, phaseFirstTask, phaseTotal} {
		m.launch.WithLabelValues(phase)
	}
	for _, st := range []driverv1.TaskState{driverv1.TaskState_TASK_STATE_FINISHED, driverv1.TaskState_TASK_STATE_FAILED,
		driverv1.TaskState_TASK_STATE_KILLED, driverv1.TaskState_TASK_STATE_LOST} {
		m.tasks.WithLabelValues(lifecycle.Label(st))
	}
	registered := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "glint_driver_executors_registered",
		Help: "Executors registered with the driver and not yet removed.",
	}, func() float64 {
		d.mu.Lock()
		defer d.mu.Unlock()
		n := 0
		for _, e := range d.executors {
			if e.registered && !e.removed {
				n++
			}
		}
		return float64(n)
	})
	reg.MustRegister(m.launch, m.tasks, m.taskDuration, m.executorRequests, m.executorsReleased, registered)
	return m
}

// observeLaunch records an executor's launch phases once every timestamp is
// known, with the executor's trace as exemplar. appRegistered is when the
// application got its id; firstRegistered when its first executor registered.
func (m *metrics) observeLaunch(t Timeline, sc trace.SpanContext, appRegistered, firstRegistered time.Time) {
	phase := func(name string, from, to time.Time) {
		if !from.IsZero() && !to.IsZero() && !to.Before(from) {
			prom.ObserveInTrace(sc, m.launch.WithLabelValues(name), to.Sub(from).Seconds())
		}
	}
	// Only executors scheduled before any executor registered were waiting since
	// the application registered; a replacement was not.
	if firstRegistered.IsZero() || t.Scheduled.Before(firstRegistered) {
		phase(phaseSchedule, appRegistered, t.Scheduled)
	}
	phase(phaseLaunch, t.Scheduled, t.Launched)
	phase(phaseProcessStart, t.Launched, t.Started)
	phase(phaseRetrieveProps, t.Started, t.PropsRetrieved)
	phase(phaseRegister, t.PropsRetrieved, t.Registered)
	phase(phaseFirstTask, t.Registered, t.FirstTask)
	phase(phaseTotal, t.Scheduled, t.FirstTask)
}
