package executor

import (
	"github.com/prometheus/client_golang/prometheus"

	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	"github.com/glint-cluster/glint/pkg/lifecycle"
)

// metrics are the executor's Prometheus metrics.
type metrics struct {
	tasksRunning prometheus.Gauge
	tasks        *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		tasksRunning: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "glint_executor_tasks_running",
			Help: "Tasks running on the executor's cores.",
		}),
		tasks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "glint_executor_tasks_total",
			Help: "Tasks the executor ran, by how they ended.",
		}, []string{"state"}),
	}
	for _, st := range []driverv1.TaskState{driverv1.TaskState_TASK_STATE_FINISHED, driverv1.TaskState_TASK_STATE_FAILED, driverv1.TaskState_TASK_STATE_KILLED} {
		m.tasks.WithLabelValues(lifecycle.Label(st))
	}
	reg.MustRegister(m.tasksRunning, m.tasks)
	return m
}
