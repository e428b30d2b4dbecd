package telemetry

import (
	"log/slog"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
)

// Instruments are what a service logs and traces through; each service's
// config embeds them (beside its metrics registry, prom.NewRegistry's, but
// for the executor's, whose few metrics are its own). The zero value of
// each field means its default.
type Instruments struct {
	// Logger receives the service's logs; default discards them.
	Logger *slog.Logger
	// TracerProvider traces the service's calls and steps; default the global one.
	TracerProvider trace.TracerProvider
}

// SetDefaults fills in the fields left unset.
func (i *Instruments) SetDefaults() {
	if i.Logger == nil {
		i.Logger = slog.New(slog.DiscardHandler)
	}
	if i.TracerProvider == nil {
		i.TracerProvider = otel.GetTracerProvider()
	}
}
