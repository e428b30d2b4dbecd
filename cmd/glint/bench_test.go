package main

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/glint-cluster/glint/internal/servicetest"
	"github.com/glint-cluster/glint/pkg/app"
	"github.com/glint-cluster/glint/pkg/examples"
	"github.com/glint-cluster/glint/pkg/telemetry"
	"github.com/glint-cluster/glint/services/driver"
)

// tracedAndNot starts two identical two-worker clusters, one exporting every
// span to a real Jaeger and one with tracing off, and returns them with a
// tracer provider exporting to that Jaeger for what runs in the benchmark.
func tracedAndNot(b *testing.B) (off, on *testCluster, traced trace.TracerProvider) {
	j := startJaeger(b)
	off = startClusterWithEnv(b, nil, 2)
	on = startClusterWithEnv(b, j.env(), 2)
	exporter, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(j.otlp))
	if err != nil {
		b.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return off, on, tp
}

// BenchmarkLaunchLatency measures, per executor, the time from the worker
// receiving LaunchExecutor to the driver registering the executor, on two
// identical two-worker clusters: one exporting every span to a real Jaeger,
// one with tracing off. Each iteration launches four executors on each. It
// reports both means and their ratio (the target is at most 1.05).
func BenchmarkLaunchLatency(b *testing.B) {
	off, on, traced := tracedAndNot(b)

	var offSum, onSum time.Duration
	var offN, onN int
	for b.Loop() {
		d, n := launchExecutors(b, off, noop.NewTracerProvider())
		offSum, offN = offSum+d, offN+n
		d, n = launchExecutors(b, on, traced)
		onSum, onN = onSum+d, onN+n
	}
	offMean := float64(offSum.Microseconds()) / float64(offN) / 1000
	onMean := float64(onSum.Microseconds()) / float64(onN) / 1000
	b.ReportMetric(offMean, "off-ms/launch")
	b.ReportMetric(onMean, "jaeger-ms/launch")
	b.ReportMetric(onMean/offMean, "ratio")
}

// launchExecutors runs pi on four one-core executors of c and returns the
// summed LaunchExecutor-to-registered time and the number of executors.
func launchExecutors(b *testing.B, c *testCluster, tp trace.TracerProvider) (time.Duration, int) {
	timelines := runOnFourExecutors(b, c, tp, examples.Pi(), "4").Timelines()
	var sum time.Duration
	n := 0
	for _, t := range timelines {
		if !t.Launched.IsZero() && !t.Registered.IsZero() {
			sum += t.Registered.Sub(t.Launched)
			n++
		}
	}
	if n != 4 {
		b.Fatalf("%d executors with launch and registration times, want 4: %+v", n, timelines)
	}
	return sum, n
}

// runOnFourExecutors runs a with args in an in-process driver on four
// one-core executors of c, all registered before it starts, in a submit
// span of tp, and returns once c's cores are free again.
func runOnFourExecutors(b *testing.B, c *testCluster, tp trace.TracerProvider, a *app.App, args ...string) *driver.Driver {
	d, err := servicetest.NewDriver(b, driver.Config{
		Masters: []string{c.master.url}, App: a, Args: args, ExecutorCores: 1, MaxCores: 4, ExecutorMemoryMiB: 256,
		ExecutorCommand: []string{glintBin, "executor"}, SubmitToken: testToken, Instruments: telemetry.Instruments{TracerProvider: tp},
		Conf: map[string]string{"spark.scheduler.minRegisteredResourcesRatio": "1.0", "spark.scheduler.maxRegisteredResourcesWaitingTime": "10m"},
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, span := tp.Tracer("bench").Start(context.Background(), "submit")
	err = d.Run(ctx)
	span.End()
	if err != nil {
		b.Fatal(err)
	}
	c.waitFor(b, "cores free again", func(s masterJSON) bool {
		for _, w := range s.Workers {
			if w.CoresUsed != 0 {
				return false
			}
		}
		return len(s.ActiveApps) == 0
	})
	return d
}

// dispatchTasks is how many no-op tasks BenchmarkTaskDispatch runs per job.
const dispatchTasks = 4000

// BenchmarkTaskDispatch measures no-op task dispatch (driver → four one-core
// executors and back), in tasks per second of one RunTasks call once the
// executors are ready, on two identical clusters: one exporting spans to a
// real Jaeger with the default task sampling, one with tracing off. It
// reports both rates and their ratio (the target is at least 0.95).
func BenchmarkTaskDispatch(b *testing.B) {
	off, on, traced := tracedAndNot(b)

	var offTime, onTime time.Duration
	for b.Loop() {
		offTime += dispatch(b, off, noop.NewTracerProvider())
		onTime += dispatch(b, on, traced)
	}
	offRate := float64(b.N*dispatchTasks) / offTime.Seconds()
	onRate := float64(b.N*dispatchTasks) / onTime.Seconds()
	b.ReportMetric(offRate, "off-tasks/s")
	b.ReportMetric(onRate, "jaeger-tasks/s")
	b.ReportMetric(onRate/offRate, "ratio")
}

// dispatch runs dispatchTasks no-op tasks (the sleep app's task with 0s) on
// four one-core executors of c and returns how long RunTasks took.
func dispatch(b *testing.B, c *testCluster, tp trace.TracerProvider) time.Duration {
	var took time.Duration
	sleep := examples.Sleep()
	timed := &app.App{Name: sleep.Name, Tasks: sleep.Tasks, Run: func(ctx context.Context, ac app.Context, _ []string) error {
		inputs := make([][]byte, dispatchTasks)
		for i := range inputs {
			inputs[i] = []byte("0s")
		}
		start := time.Now()
		_, err := ac.RunTasks(ctx, "sleep", inputs)
		took = time.Since(start)
		return err
	}}
	runOnFourExecutors(b, c, tp, timed)
	return took
}
