package telemetry

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
)

// NewRegistry returns a process's Prometheus registry, holding the Go runtime
// and process collectors. Each process (and each test) has its own.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// MetricsHandler serves reg at /metrics, in OpenMetrics when the scraper asks
// for it (exemplars travel only in OpenMetrics).
func MetricsHandler(reg *prometheus.Registry) http.Handler {
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
