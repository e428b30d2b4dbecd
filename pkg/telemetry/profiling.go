package telemetry

import (
	"fmt"
	"log/slog"
	"strings"

	otelpyroscope "github.com/grafana/otel-profiling-go"
	"github.com/grafana/pyroscope-go"
	"go.opentelemetry.io/otel/trace"
)

// PyroscopeEnv names the variable that, like --pyroscope-url, points every
// process at a Pyroscope server.
const PyroscopeEnv = "PYROSCOPE_SERVER_ADDRESS"

// ProfiledTracerProvider wraps tp so that CPU samples taken while a span runs
// carry its span id and name as pprof labels: a slow span links to its
// profile in Grafana.
func ProfiledTracerProvider(tp trace.TracerProvider) trace.TracerProvider {
	return otelpyroscope.NewTracerProvider(tp,
		otelpyroscope.WithSpanIDLabelScope(otelpyroscope.ScopeAllSpans),
		otelpyroscope.WithSpanNameLabelScope(otelpyroscope.ScopeAllSpans))
}

// StartProfiling pushes CPU, allocation, in-use and goroutine profiles of
// this process to the Pyroscope server at addr, as application
// glint.<role> (glint-worker → glint.worker) with tags. stop uploads what was
// collected last and stops.
func StartProfiling(addr, service string, tags map[string]string, log *slog.Logger) (stop func(), err error) {
	p, err := pyroscope.Start(pyroscope.Config{
		ApplicationName: "glint." + strings.TrimPrefix(service, "glint-"),
		ServerAddress:   addr,
		Tags:            tags,
		Logger:          pyroscopeLogger{log},
		ProfileTypes: []pyroscope.ProfileType{
			pyroscope.ProfileCPU, pyroscope.ProfileAllocObjects, pyroscope.ProfileAllocSpace,
			pyroscope.ProfileInuseObjects, pyroscope.ProfileInuseSpace, pyroscope.ProfileGoroutines,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("start profiling to %s: %w", addr, err)
	}
	return func() {
		p.Flush(true) // Stop alone uploads only the CPU profile
		if err := p.Stop(); err != nil {
			log.Warn("stop profiling", "err", err)
		}
	}, nil
}

// pyroscopeLogger sends pyroscope-go's messages to the process's logger;
// its chatty Info and Debug messages go to Debug.
type pyroscopeLogger struct{ log *slog.Logger }

func (l pyroscopeLogger) Infof(format string, args ...any) { l.log.Debug(fmt.Sprintf(format, args...)) }
func (l pyroscopeLogger) Debugf(format string, args ...any) {
	l.log.Debug(fmt.Sprintf(format, args...))
}
func (l pyroscopeLogger) Errorf(format string, args ...any) {
	l.log.Warn("profiling: " + fmt.Sprintf(format, args...))
}
