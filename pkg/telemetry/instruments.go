package telemetry

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
)

// Instruments are what a service reports through; each service's config
// embeds them. The zero value of each field means its default.
type Instruments struct {
	// Logger receives the service's logs; default discards them.
	Logger *slog.Logger
	// TracerProvider traces the service's calls and steps; default the global one.
	TracerProvider trace.TracerProvider
	// Registry receives the service's metrics and is served at its /metrics;
	// default a new registry with the Go and process collectors.
	Registry *prometheus.Registry
}

// SetDefaults fills in the fields left unset.
func (i *Instruments) SetDefaults() {
	if i.Logger == nil {
		i.Logger = slog.New(slog.DiscardHandler)
	}
	if i.TracerProvider == nil {
		i.TracerProvider = otel.GetTracerProvider()
	}
	if i.Registry == nil {
		i.Registry = NewRegistry()
	}
}
