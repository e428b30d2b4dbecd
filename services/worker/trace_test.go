package worker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/telemetry"
)

func TestLaunchStepsAreSpansAndTheExecutorContinuesProcessStart(t *testing.T) {
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	c := startCluster(t, clusterConfig{worker: Config{Instruments: telemetry.Instruments{TracerProvider: tp}}})
	appID := c.registerApp(t, executorCommand(t, "hold", 0), 1)
	c.waitMasterExecutor(t, appID, 0, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)
	dir := filepath.Join(c.worker.cfg.WorkDir, appID, "0")
	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c.waitMasterExecutor(t, appID, 0, masterv1.ExecutorState_EXECUTOR_STATE_EXITED)

	var launch sdktrace.ReadOnlySpan
	eventually(t, "process.wait span ended", func() bool {
		for _, s := range recorder.Ended() {
			if s.Name() == "process.wait" {
				return true
			}
		}
		return false
	})
	// Executor 0's spans (the master launches a replacement once it exits).
	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range recorder.Ended() {
		if !slices.Contains(s.Attributes(), telemetry.ExecutorID.Int(0)) {
			continue
		}
		spans[s.Name()] = s
		if s.Name() == "glint.worker.v1.WorkerService/LaunchExecutor" {
			launch = s
		}
	}
	if launch == nil {
		t.Fatalf("no LaunchExecutor server span among %v", names(recorder.Ended()))
	}
	for _, step := range []string{"workdir", "command", "logs", "process.start", "report", "process.wait"} {
		s, ok := spans[step]
		if !ok {
			t.Errorf("no %s span", step)
			continue
		}
		if s.Parent().SpanID() != launch.SpanContext().SpanID() || s.SpanContext().TraceID() != launch.SpanContext().TraceID() {
			t.Errorf("%s is not a child of the LaunchExecutor span", step)
		}
	}
	start := spans["process.start"]
	attrs := map[string]string{}
	for _, kv := range start.Attributes() {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	for _, key := range []string{"process.pid", "process.executable.path", "process.command_args", "glint.app.id", "glint.executor.id", "glint.worker.id"} {
		if attrs[key] == "" {
			t.Errorf("process.start has no %s; attributes %v", key, attrs)
		}
	}
	// The executor got the process.start span's context in its environment.
	want := fmt.Sprintf("env TRACEPARENT=00-%s-%s-01\n", start.SpanContext().TraceID(), start.SpanContext().SpanID())
	waitFileContains(t, filepath.Join(dir, "stdout"), want)
	report := spans["report"]
	for _, s := range recorder.Ended() {
		if s.Name() == "glint.master.v1.MasterService/ExecutorStateChanged" && s.Parent().SpanID() == report.SpanContext().SpanID() {
			return
		}
	}
	t.Errorf("the RUNNING report to the master is not a child of the report span")
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	slices.Sort(out)
	return out
}

func TestSupervisedDriverStartsAreSpansUnderLaunchDriver(t *testing.T) {
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	c := startCluster(t, clusterConfig{worker: Config{SuperviseBackoffCap: 10 * time.Millisecond, Instruments: telemetry.Instruments{TracerProvider: tp}}})
	resp, err := c.master.SubmitDriver(context.Background(), connect.NewRequest(&masterv1.SubmitDriverRequest{
		Description: &masterv1.DriverDescription{
			Name: "worker-trace-driver", Cores: 1, MemoryMib: 64, Supervise: true, Command: driverCommand(t, "fail-once"),
		},
	}))
	if err != nil {
		t.Fatalf("submit driver: %v", err)
	}
	id := resp.Msg.GetDriverId()
	eventually(t, "the driver's final report sent", func() bool {
		return slices.ContainsFunc(recorder.Ended(), func(s sdktrace.ReadOnlySpan) bool {
			return s.Name() == "glint.master.v1.MasterService/DriverStateChanged" && s.SpanKind() == trace.SpanKindClient
		})
	})

	var launch sdktrace.ReadOnlySpan
	counts := map[string]int{}
	var waits []sdktrace.ReadOnlySpan
	for _, s := range recorder.Ended() {
		if s.Name() == "glint.worker.v1.WorkerService/LaunchDriver" {
			launch = s
		}
	}
	if launch == nil {
		t.Fatalf("no LaunchDriver server span among %v", names(recorder.Ended()))
	}
	for _, s := range recorder.Ended() {
		if s.Parent().SpanID() != launch.SpanContext().SpanID() {
			continue
		}
		counts[s.Name()]++
		if s.Name() == "process.wait" {
			waits = append(waits, s)
		}
		if !slices.Contains(s.Attributes(), telemetry.DriverID.String(id)) {
			t.Errorf("%s has no %s attribute", s.Name(), telemetry.DriverID)
		}
	}
	// fail-once exits 3, is restarted and exits 0: two starts, each traced.
	for _, step := range []string{"workdir", "command", "logs", "process.start", "report", "process.wait"} {
		if counts[step] != 2 {
			t.Errorf("%d %s spans under LaunchDriver, want 2 (one per start)", counts[step], step)
		}
	}
	slices.SortFunc(waits, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	if len(waits) == 2 && (waits[0].Status().Code != codes.Error || waits[1].Status().Code == codes.Error) {
		t.Errorf("process.wait statuses %v, %v; want the failed run Error, the finished one not", waits[0].Status(), waits[1].Status())
	}
	for _, s := range recorder.Ended() {
		if s.Name() == "glint.master.v1.MasterService/DriverStateChanged" && s.SpanKind() == trace.SpanKindClient &&
			len(waits) == 2 && s.Parent().SpanID() != waits[1].SpanContext().SpanID() {
			t.Errorf("the final DriverStateChanged is not a child of the last process.wait span")
		}
	}
}
