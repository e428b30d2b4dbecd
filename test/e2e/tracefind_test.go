package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/glint-cluster/glint/internal/jaeger"
	"github.com/glint-cluster/glint/pkg/telemetry"
)

// outliving lists the spans of tr that do not lie within their parent in the
// same trace: Jaeger marks them with a clock-skew warning.
func outliving(tr *jaeger.Trace) []string {
	byID := map[string]jaeger.Span{}
	for _, s := range tr.Spans {
		byID[s.SpanID] = s
	}
	var out []string
	for _, s := range tr.Spans {
		p, ok := byID[s.Parent()]
		if !ok {
			continue
		}
		if s.StartTime+s.Duration > p.StartTime+p.Duration || s.StartTime < p.StartTime {
			out = append(out, fmt.Sprintf("%s:%s under %s:%s", s.Service, s.OperationName, p.Service, p.OperationName))
		}
	}
	sort.Strings(out)
	return out
}

// A healthy run's trace is titled with the application's name, found by its
// id, has no span outside its parent, and shows each executor as a span of
// its own with its boot, its start-up calls and its end; the waits for the
// executors' processes are traces of their own linked to it; and the
// master's probes of the drivers start no trace.
func TestAHealthyRunsTraceIsNamedFoundByItsAppAndNoSpanOutlivesItsParent(t *testing.T) {
	t.Parallel()
	j := startJaeger(t)
	// Probes every 2 s: a quarter of the worker timeout.
	c := startClusterWithEnv(t, j.env(), 2, "--worker-timeout", "8s")
	stdout, stderr, err := glintWithEnv(t, j.env(), "submit", "--master", c.master.url, "--executor-cores", "1",
		"--total-executor-cores", "2", "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0", "--conf", waitForAll,
		"--executor-memory", "256m", "--log-level", "warn", "pi", "8")
	if err != nil {
		t.Fatalf("submit: %v\n%s\n%s", err, stdout, stderr)
	}
	app := c.waitFor(t, "app completed", func(s masterJSON) bool { return len(s.CompletedApps) == 1 }).CompletedApps[0]
	tr := j.waitForTrace(t, app.TraceID, complete(2))
	out := outliving(tr)
	t.Logf("%d spans, %d outlive their parent: %v", len(tr.Spans), len(out), out)
	if len(out) > 0 {
		t.Errorf("%d spans do not lie within their parent: %v", len(out), out)
	}

	byID := map[string]jaeger.Span{}
	var root jaeger.Span
	for _, s := range tr.Spans {
		byID[s.SpanID] = s
		if s.Parent() == "" {
			root = s
		}
	}
	id, _ := root.Tag(string(telemetry.AppID))
	name, _ := root.Tag(string(telemetry.AppName))
	if root.OperationName != telemetry.SubmitSpan("pi") || id != app.ID || name != "pi" {
		t.Errorf("root span %q with %s=%q, %s=%q; want %q with %s and pi", root.OperationName,
			telemetry.AppID, id, telemetry.AppName, name, telemetry.SubmitSpan("pi"), app.ID)
	}
	found, err := j.client.Find(context.Background(), telemetry.ServiceSubmit, map[string]string{string(telemetry.AppID): app.ID})
	if err != nil || found != app.TraceID {
		t.Errorf("Jaeger finds trace %q (%v) of glint-submit by %s=%s, want %s", found, err, telemetry.AppID, app.ID, app.TraceID)
	}

	// Each executor: its span, with its end as an event, and its boot ending
	// before its first call.
	for _, exec := range []string{"0", "1"} {
		var span, boot, props *jaeger.Span
		for i, s := range tr.Spans {
			e, _ := s.Tag(string(telemetry.ExecutorID))
			switch {
			case e != exec:
			case isExecutorSpan(s):
				span = &tr.Spans[i]
			case s.OperationName == "executor.boot":
				boot = &tr.Spans[i]
			case strings.HasSuffix(s.OperationName, "/RetrieveSparkProps") && s.Service == telemetry.ServiceExecutor:
				props = &tr.Spans[i]
			}
		}
		if span == nil || span.OperationName != "executor "+exec {
			t.Errorf("no span named %q in the trace", "executor "+exec)
			continue
		}
		if !span.HasEvent("EXITED") && !span.HasEvent("KILLED") {
			t.Errorf("executor %s's span has no EXITED or KILLED event: %v", exec, span.Logs)
		}
		if boot == nil || props == nil || boot.Parent() != span.SpanID || boot.StartTime+boot.Duration > props.StartTime {
			t.Errorf("executor %s: boot %v, RetrieveSparkProps %v; want the boot under its span, ended before the call", exec, boot, props)
		}
	}
	waits, err := j.client.Search(context.Background(), telemetry.ServiceWorker, "process.wait", map[string]string{string(telemetry.AppID): app.ID}, 20)
	if err != nil {
		t.Fatal(err)
	}
	linked := 0
	for _, w := range waits {
		for _, s := range w.Spans {
			for _, r := range s.References {
				if s.OperationName == "process.wait" && r.TraceID == app.TraceID {
					linked++
				}
			}
		}
	}
	if linked != 2 {
		t.Errorf("%d process.wait traces linked to the application's, want 2", linked)
	}

	// A minute of a cluster idle but for an application that sleeps: its
	// driver probed some 30 times, the workers heartbeating every 2 s. The
	// master's spans are in the applications' traces, or in those of events
	// that have their own: a worker's registration, an executor's end
	// (process.wait, linked to its application's) — none of a probe or a
	// heartbeat.
	if stdout, stderr, err := glintWithEnv(t, j.env(), "submit", "--master", c.master.url, "--total-executor-cores", "1",
		"--executor-memory", "256m", "--log-level", "warn", "sleep", "60s", "1"); err != nil {
		t.Fatalf("submit sleep: %v\n%s\n%s", err, stdout, stderr)
	}
	var sleep appJSON
	for _, a := range c.waitFor(t, "sleep completed", func(s masterJSON) bool { return len(s.CompletedApps) == 2 }).CompletedApps {
		if a.ID != app.ID {
			sleep = a
		}
	}
	j.waitForTrace(t, sleep.TraceID, complete(1))
	traces, err := j.client.Search(context.Background(), telemetry.ServiceMaster, "", map[string]string{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range traces {
		own := count(&tr, func(s jaeger.Span) bool {
			return s.OperationName == "process.wait" || strings.HasSuffix(s.OperationName, "/RegisterWorker")
		}) > 0
		if tr.TraceID != app.TraceID && tr.TraceID != sleep.TraceID && !own {
			var names []string
			for _, s := range tr.Spans {
				names = append(names, s.Service+" "+s.OperationName)
			}
			t.Errorf("a trace of the master's own in Jaeger: %s %q, want none", tr.TraceID, names)
		}
	}
}

// A worker's loss is in the application's trace: the lost executor's span
// has the loss and LOST as events, and what the master tells the driver of
// it is a span of that trace, not a trace of its own.
func TestAWorkersLossIsInTheApplicationsTrace(t *testing.T) {
	t.Parallel()
	j := startJaeger(t)
	c := startClusterWithEnv(t, j.env(), 2, "--worker-timeout", "4s")
	release := filepath.Join(t.TempDir(), "release")
	wait := runInBackground(t, j.env(), "submit", "--master", c.master.url, "--executor-cores", "1",
		"--total-executor-cores", "2", "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0", "--conf", waitForAll,
		"--executor-memory", "256m", "--log-level", "warn", "hold", release, "2")
	s := c.waitFor(t, "two executors running", func(s masterJSON) bool {
		running := 0
		for _, a := range s.ActiveApps {
			for _, e := range a.Executors {
				if e.State == "RUNNING" {
					running++
				}
			}
		}
		return running == 2
	})
	app := s.ActiveApps[0]
	lost := c.workers[1]
	if err := syscall.Kill(lost.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.waitFor(t, "an executor lost", func(s masterJSON) bool {
		return slices.ContainsFunc(s.ActiveApps, func(a appJSON) bool {
			return slices.ContainsFunc(a.Executors, func(e executorJSON) bool {
				return e.State == "LOST"
			})
		})
	})
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := wait(); err != nil {
		t.Fatalf("submit: %v\n%s", err, out)
	}
	tr := j.waitForTrace(t, app.TraceID, func(tr *jaeger.Trace) bool {
		return count(tr, func(s jaeger.Span) bool { return isExecutorSpan(s) && s.HasEvent("LOST") }) == 1 &&
			count(tr, func(s jaeger.Span) bool { return strings.HasPrefix(s.OperationName, telemetry.SubmitSpan("")) }) == 1
	})
	for _, s := range tr.Spans {
		if isExecutorSpan(s) && s.HasEvent("LOST") && (!s.HasEvent("worker lost") || !s.Failed()) {
			t.Errorf("the lost executor's span %s: events %v, failed %v; want worker lost, LOST and an error", s.OperationName, s.Logs, s.Failed())
		}
	}
	updates, err := j.client.Search(context.Background(), telemetry.ServiceMaster, "glint.driver.v1.DriverService/ExecutorUpdated", map[string]string{}, 20)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range updates {
		if u.TraceID != app.TraceID {
			t.Errorf("an ExecutorUpdated call in trace %s, not the application's %s: %v", u.TraceID, app.TraceID, spanNames(&u))
		}
	}
	if len(updates) == 0 {
		t.Errorf("no ExecutorUpdated call in Jaeger")
	}
}
