package worker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/telemetry"
)

// The launch steps are spans under the launch's caller (here, an untraced
// master: the LaunchExecutor span); the process's spans continue the launch,
// not process.start, which ends with the fork, and it is told when it was
// forked; the wait is a trace of its own linked to the launch.
func TestLaunchStepsAreSpansAndTheExecutorContinuesTheLaunch(t *testing.T) {
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
	tooltest.Eventually(t, "process.wait span ended", func() bool {
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
	for _, step := range []string{"workdir", "command", "logs", "process.start", "report"} {
		s, ok := spans[step]
		if !ok {
			t.Errorf("no %s span", step)
			continue
		}
		if s.Parent().SpanID() != launch.SpanContext().SpanID() || s.SpanContext().TraceID() != launch.SpanContext().TraceID() {
			t.Errorf("%s is not a child of the LaunchExecutor span", step)
		}
	}
	wait := spans["process.wait"]
	if wait == nil || wait.Parent().IsValid() || len(wait.Links()) != 1 || wait.Links()[0].SpanContext.SpanID() != launch.SpanContext().SpanID() {
		t.Errorf("process.wait is not a root linked to the LaunchExecutor span")
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
	// The executor got the launch's context in its environment, and its
	// fork time, which falls within process.start.
	want := fmt.Sprintf("env TRACEPARENT=00-%s-%s-01\n", launch.SpanContext().TraceID(), launch.SpanContext().SpanID())
	waitFileContains(t, filepath.Join(dir, "stdout"), want)
	out, err := os.ReadFile(filepath.Join(dir, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	var forked int64
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "env "+child.ForkedAtEnv+"="); ok {
			forked, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if at := time.Unix(0, forked); at.Before(start.StartTime()) || at.After(start.EndTime()) {
		t.Errorf("%s is %v, not within process.start (%v–%v)", child.ForkedAtEnv, at, start.StartTime(), start.EndTime())
	}
	// The reports are sent after the steps that made them ended: the RUNNING
	// one under the launch, the final one before the wait ends.
	running, final := 0, 0
	for _, s := range recorder.Ended() {
		if s.Name() != "glint.master.v1.MasterService/ExecutorStateChanged" || s.SpanKind() != trace.SpanKindClient {
			continue
		}
		switch s.Parent().SpanID() {
		case launch.SpanContext().SpanID():
			running++
		case wait.SpanContext().SpanID():
			final++
			if s.EndTime().After(wait.EndTime()) {
				t.Errorf("the final report ends after process.wait")
			}
		}
	}
	if running < 1 || final != 1 {
		t.Errorf("%d reports under the launch, %d under process.wait; want the RUNNING one and the final one", running, final)
	}
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
	tooltest.Eventually(t, "the driver's final report sent", func() bool {
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
		if s.Name() == "process.wait" && len(s.Links()) == 1 && s.Links()[0].SpanContext.SpanID() == launch.SpanContext().SpanID() {
			counts[s.Name()]++
			waits = append(waits, s)
		} else if s.Parent().SpanID() == launch.SpanContext().SpanID() {
			counts[s.Name()]++
		} else {
			continue
		}
		if !slices.Contains(s.Attributes(), telemetry.DriverID.String(id)) {
			t.Errorf("%s has no %s attribute", s.Name(), telemetry.DriverID)
		}
	}
	// fail-once exits 3, is restarted and exits 0: two starts, each traced.
	for _, step := range []string{"workdir", "command", "logs", "process.start", "report", "process.wait"} {
		if counts[step] != 2 {
			t.Errorf("%d %s spans under (process.wait: linked to) LaunchDriver, want 2 (one per start)", counts[step], step)
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
