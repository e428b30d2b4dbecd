package driver_test

import (
	"context"
	"slices"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/glint-cluster/glint/internal/servicetest"
	"github.com/glint-cluster/glint/internal/tooltest"
	"github.com/glint-cluster/glint/pkg/app"
	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/telemetry"
	"github.com/glint-cluster/glint/services/driver"
	"github.com/glint-cluster/glint/services/executor"
)

func TestMakeOffersFollowsTheExecutorsLaunchAndParentsItsTasks(t *testing.T) {
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	a := echoApp(func(_ context.Context, in []byte) ([]byte, error) { return in, nil })
	d := servicetest.Driver(t, driver.Config{
		Masters: []string{startMaster(t)}, App: a,
		ExecutorCommand: []string{"/bin/false"}, ExecutorMemoryMiB: 256, Instruments: telemetry.Instruments{TracerProvider: tp},
	})
	// The tasks are queued before any executor exists, so the executor's
	// LaunchedExecutor is what offers them.
	ran := make(chan error, 1)
	go func() {
		_, err := d.RunTasks(context.Background(), "task", inputs(3))
		ran <- err
	}()
	defer runTracedExecutor(t, d, a, tp)()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	var launched, makeOffers sdktrace.ReadOnlySpan
	tooltest.Eventually(t, "a makeOffers span under the LaunchedExecutor call", func() bool {
		for _, s := range recorder.Ended() {
			switch {
			case s.Name() == "glint.driver.v1.DriverService/LaunchedExecutor" && s.SpanKind().String() == "server":
				launched = s
			case s.Name() == "makeOffers" && launched != nil && s.Parent().SpanID() == launched.SpanContext().SpanID():
				makeOffers = s
			}
		}
		return launched != nil && makeOffers != nil
	})
	tasks := 0
	for _, s := range recorder.Ended() {
		if s.Name() == "glint.executor.v1.ExecutorService/LaunchTask" && s.SpanKind().String() == "client" &&
			s.Parent().SpanID() == makeOffers.SpanContext().SpanID() {
			tasks++
		}
	}
	if tasks != 1 {
		t.Errorf("%d LaunchTask calls under the first makeOffers, want 1 (one core)", tasks)
	}
}

// launchBatches runs task over n inputs on one one-core executor, every
// task batch traced, and returns how many tasks each LaunchTask carried.
func launchBatches(t *testing.T, task app.TaskFunc, n int) []int {
	t.Helper()
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	a := echoApp(task)
	d := servicetest.Driver(t, driver.Config{
		Masters: []string{startMaster(t)}, App: a, ExecutorCommand: []string{"/bin/false"}, ExecutorMemoryMiB: 256,
		Conf: map[string]string{"spark.glint.trace.taskSampleRatio": "1"}, Instruments: telemetry.Instruments{TracerProvider: tp},
	})
	defer runTracedExecutor(t, d, a, tp)()
	if _, err := d.RunTasks(context.Background(), "task", inputs(n)); err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for _, s := range recorder.Ended() {
		if s.Name() != "glint.executor.v1.ExecutorService/LaunchTask" || s.SpanKind().String() != "server" {
			continue
		}
		for _, kv := range s.Attributes() {
			if kv.Key == "glint.task.ids" {
				sizes = append(sizes, len(kv.Value.AsInt64Slice()))
			}
		}
	}
	return sizes
}

func TestBriefTasksAreLaunchedInBatchesOfAtMostTheCoresSlots(t *testing.T) {
	sizes := launchBatches(t, func(_ context.Context, in []byte) ([]byte, error) { return in, nil }, 300)
	if largest := slices.Max(sizes); largest < 2 || largest > child.TaskSlotsPerCore {
		t.Errorf("LaunchTask batches of %v tasks on one core, want some of 2 to %d", sizes, child.TaskSlotsPerCore)
	}
}

func TestLongerTasksGetOneTaskPerCore(t *testing.T) {
	sizes := launchBatches(t, func(_ context.Context, in []byte) ([]byte, error) {
		time.Sleep(2 * time.Millisecond) // the task's work: longer than a brief task
		return in, nil
	}, 20)
	for _, n := range sizes {
		if n != 1 {
			t.Fatalf("LaunchTask batches of %v tasks on one core for tasks of 2 ms, want 1 each", sizes)
		}
	}
}

// runTracedExecutor runs one one-core executor of a for d in this process,
// traced through tp, and returns what stops it.
func runTracedExecutor(t *testing.T, d *driver.Driver, a *app.App, tp trace.TracerProvider) (stop func()) {
	t.Helper()
	apps, err := app.NewRegistry(a)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ln, _ := servicetest.Listen(t)
	go func() {
		_ = servicetest.RunExecutor(ctx, ln, executor.Config{
			ExecutorArgs: child.ExecutorArgs{DriverURL: d.URL(), ExecutorID: 0, Hostname: "127.0.0.1", Cores: 1, AppID: d.AppID()},
			Apps:         apps, AppToken: d.AppToken(), Instruments: telemetry.Instruments{TracerProvider: tp},
		})
	}()
	return cancel
}
