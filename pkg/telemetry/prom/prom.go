// Package prom is the Prometheus side of Glint's telemetry: a process's
// registry with the Go runtime and process collectors, its /metrics handler,
// and observations carrying their trace as an exemplar. Every process but
// the executor uses it: an executor's few metrics are its own
// (services/executor), as client_golang's package initialisation and pages
// were a measured part of each cold executor's start.
package prom

import (
	"context"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
)

// NewRegistry returns a process's Prometheus registry, holding the Go runtime
// and process collectors. Each process (and each test) has its own.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(&runtimeCollectors{})
	return reg
}

// OrNew is reg, or NewRegistry() when reg is nil: a service's registry
// when its config leaves it unset.
func OrNew(reg *prometheus.Registry) *prometheus.Registry {
	if reg == nil {
		return NewRegistry()
	}
	return reg
}

// runtimeCollectors are the Go runtime and process collectors, made at the
// first scrape: making the Go collector matches every runtime metric's name
// against its rules, work an executor would otherwise do at start, on the
// launch path. It describes nothing (an unchecked collector), since
// describing would make them.
type runtimeCollectors struct {
	made sync.Once
	all  []prometheus.Collector
}

func (r *runtimeCollectors) Describe(chan<- *prometheus.Desc) {}

func (r *runtimeCollectors) Collect(ch chan<- prometheus.Metric) {
	r.made.Do(func() {
		r.all = []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}
	})
	for _, c := range r.all {
		c.Collect(ch)
	}
}

// Handler serves reg at /metrics, in OpenMetrics when the scraper asks
// for it (exemplars travel only in OpenMetrics).
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true, Registry: reg})
}

// Observe records v in h with the trace id of the span in ctx as its
// exemplar, so a slow bucket links to the launch that was slow.
func Observe(ctx context.Context, h prometheus.Observer, v float64) {
	ObserveInTrace(trace.SpanContextFromContext(ctx), h, v)
}

// ObserveInTrace records v in h with sc's trace id as the exemplar, when sc
// has one and is sampled.
func ObserveInTrace(sc trace.SpanContext, h prometheus.Observer, v float64) {
	if eo, ok := h.(prometheus.ExemplarObserver); ok && sc.HasTraceID() && sc.IsSampled() {
		eo.ObserveWithExemplar(v, prometheus.Labels{"trace_id": sc.TraceID().String()})
		return
	}
	h.Observe(v)
}
