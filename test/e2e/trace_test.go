package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/glint-cluster/glint/internal/jaeger"
	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry"
)

// jaegerServer is a real Jaeger v2 (tools/jaeger) with in-memory storage on
// loopback ports.
type jaegerServer struct {
	otlp   string // OTLP/HTTP endpoint
	query  string // query API and UI
	client *jaeger.Client
}

func startJaeger(t testing.TB) *jaegerServer {
	t.Helper()
	bin := tooltest.Binary(t, "tools/jaeger/go.mod", "jaeger")
	p := tooltest.FreePorts(t, 4)
	dir := t.TempDir()
	config := fmt.Sprintf(`service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:%d
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: 127.0.0.1:%d
    grpc:
      endpoint: 127.0.0.1:%d
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%d
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`, p[0], p[1], p[2], p[3])
	path := filepath.Join(dir, "jaeger.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	tooltest.Start(t, "jaeger", fmt.Sprintf("http://127.0.0.1:%d/status", p[0]), bin, "--config", "file:"+path)
	j := &jaegerServer{otlp: fmt.Sprintf("http://127.0.0.1:%d", p[3]), query: fmt.Sprintf("http://127.0.0.1:%d", p[1])}
	j.client = &jaeger.Client{URL: j.query}
	return j
}

// env is what makes glint processes export their spans to this Jaeger.
func (j *jaegerServer) env() []string {
	return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + j.otlp, "OTEL_BSP_SCHEDULE_DELAY=100"}
}

// waitForTrace polls Jaeger until trace id satisfies complete.
func (j *jaegerServer) waitForTrace(t testing.TB, id string, complete func(*jaeger.Trace) bool) *jaeger.Trace {
	t.Helper()
	var last *jaeger.Trace
	var err error
	if !tooltest.Poll(30*time.Second, 200*time.Millisecond, func() bool {
		var tr *jaeger.Trace
		if tr, err = j.client.Trace(context.Background(), id); err != nil {
			return false
		}
		last = tr
		return complete(tr)
	}) {
		t.Fatalf("trace %s incomplete after 30s (%v); spans: %v", id, err, spanNames(last))
	}
	return last
}

func spanNames(tr *jaeger.Trace) []string {
	if tr == nil {
		return nil
	}
	var out []string
	for _, s := range tr.Spans {
		out = append(out, s.Service+":"+s.OperationName)
	}
	return out
}

// waitForAll makes a driver that waits for all its executors
// (minRegisteredResourcesRatio=1.0) wait as long as that takes on a loaded
// machine, not Spark's 30 s.
const waitForAll = "spark.scheduler.maxRegisteredResourcesWaitingTime=10m"

// launchSteps are the span names of the launch path, in order (DESIGN.md).
var launchSteps = []string{telemetry.SubmitSpan("pi"), "schedule", "executor 0", "/LaunchExecutor", "process.start", "executor.boot", "/RetrieveSparkProps", "/RegisterExecutor", "makeOffers", "/LaunchTask"}

func hasStep(tr *jaeger.Trace, step string) bool {
	for _, s := range tr.Spans {
		if s.OperationName == step || (strings.HasPrefix(step, "/") && strings.HasSuffix(s.OperationName, step)) {
			return true
		}
	}
	return false
}

func count(tr *jaeger.Trace, match func(jaeger.Span) bool) int {
	n := 0
	for _, s := range tr.Spans {
		if match(s) {
			n++
		}
	}
	return n
}

func TestOneTraceSpansTheWholeLaunchAcrossEveryProcess(t *testing.T) {
	t.Parallel()
	j := startJaeger(t)
	c := startClusterWithEnv(t, j.env(), 2)
	// All four executors register before tasks run, so each gets tasks.
	stdout, stderr, err := glintWithEnv(t, j.env(), "submit", "--master", c.master.url, "--executor-cores", "1",
		"--total-executor-cores", "4", "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0", "--conf", waitForAll,
		"--executor-memory", "256m", "--log-level", "warn", "pi", "8")
	if err != nil {
		t.Fatalf("submit: %v\n%s\n%s", err, stdout, stderr)
	}
	app := c.waitFor(t, "app completed", func(s masterJSON) bool { return len(s.CompletedApps) == 1 }).CompletedApps[0]
	if len(app.TraceID) != 32 {
		t.Fatalf("master shows trace id %q for %s", app.TraceID, app.ID)
	}
	tr := j.waitForTrace(t, app.TraceID, complete(4))
	if failed := shapeOf(tr).failed; len(failed) > 0 {
		t.Errorf("a successful run's trace has error spans %v", failed)
	}

	for _, step := range launchSteps {
		if !hasStep(tr, step) {
			t.Errorf("no %s span in the trace", step)
		}
	}
	services := map[string]bool{}
	byID := map[string]jaeger.Span{}
	for _, s := range tr.Spans {
		services[s.Service] = true
		byID[s.SpanID] = s
	}
	if len(services) < 5 {
		t.Errorf("spans from %d services %v, want at least 5 (submit, master, worker, executor, driver)", len(services), services)
	}
	roots := 0
	for _, s := range tr.Spans {
		switch p := s.Parent(); {
		case p == "":
			roots++
			if s.OperationName != telemetry.SubmitSpan("pi") {
				t.Errorf("root span is %s:%s, want the submit span, %q", s.Service, s.OperationName, telemetry.SubmitSpan("pi"))
			}
		case byID[p].SpanID == "":
			t.Errorf("span %s:%s has parent %s, which is not in the trace", s.Service, s.OperationName, p)
		}
	}
	if roots != 1 {
		t.Errorf("%d root spans, want 1", roots)
	}

	// Each executor's boot and start-up calls are children of its span.
	starts := 0
	for _, s := range tr.Spans {
		if s.Service != telemetry.ServiceExecutor || !strings.Contains("executor.boot /RetrieveSparkProps /RegisterExecutor /LaunchedExecutor", s.OperationName[strings.LastIndex(s.OperationName, "/")+1:]) {
			continue
		}
		exec, _ := s.Tag(string(telemetry.ExecutorID))
		if p := byID[s.Parent()]; p.OperationName != "executor "+exec || !isExecutorSpan(p) {
			t.Errorf("executor %s's %s is a child of %s:%s, not of its span", exec, s.OperationName, p.Service, p.OperationName)
		}
		starts++
	}
	if starts != 12 {
		t.Errorf("%d executor boots and start-up calls, want 12 (3 for each of 4 executors)", starts)
	}
	for _, s := range tr.Spans {
		if s.OperationName == "process.start" {
			for _, key := range []string{"process.pid", "process.executable.path", "process.command_args", string(telemetry.AppID), string(telemetry.ExecutorID), string(telemetry.WorkerID)} {
				if _, ok := s.Tag(key); !ok {
					t.Errorf("process.start has no %s", key)
				}
			}
		}
	}

	t.Run("glint trace prints each executor's launch, and every span with --all", func(t *testing.T) {
		out, errOut, err := runGlint(t, "trace", "--jaeger", j.query, app.ID)
		if err != nil {
			t.Fatalf("glint trace: %v\n%s", err, errOut)
		}
		for _, want := range []string{"Trace " + app.TraceID + " of " + app.ID, "Executor launches", "Tasks: "} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
		rows := regexp.MustCompile(`(?m)^\d+\s+worker-\S+(\s+[\d.]+\*?){7}$`).FindAllString(out, -1)
		if len(rows) != 4 {
			t.Errorf("%d complete executor rows, want 4:\n%s", len(rows), out)
		}
		for _, r := range rows {
			if strings.Count(r, "*") != 1 {
				t.Errorf("row %q marks %d phases slowest, want 1", r, strings.Count(r, "*"))
			}
		}
		if strings.Contains(out, "glint-submit") {
			t.Errorf("the default output lists spans:\n%s", out)
		}
		all, errOut, err := runGlint(t, "trace", "--all", "--jaeger", j.query, app.ID)
		if err != nil {
			t.Fatalf("glint trace --all: %v\n%s", err, errOut)
		}
		for _, want := range []string{"glint-submit", "submit", "process.start", "makeOffers", "Executor launches"} {
			if !strings.Contains(all, want) {
				t.Errorf("--all output lacks %q:\n%s", want, all)
			}
		}
		_, errOut, err = runGlint(t, "trace", "--jaeger", "http://127.0.0.1:1", app.ID)
		if exitCode(err) == 0 || !strings.Contains(errOut, "unreachable") {
			t.Errorf("unreachable jaeger: exit %d, %q", exitCode(err), errOut)
		}
		_, errOut, err = runGlint(t, "trace", "--jaeger", j.query, "app-20200101000000-0001")
		if exitCode(err) == 0 || !strings.Contains(errOut, "no trace of glint-master with glint.app.id=app-20200101000000-0001 in Jaeger") ||
			strings.Contains(errOut, "map[") || !strings.Contains(errOut, "ran untraced") {
			t.Errorf("unknown app: exit %d, %q; want what was searched, in plain words, and why it may be missing", exitCode(err), errOut)
		}
	})
}

// shape is what a person sees of a trace: how many spans, how deep, and
// which ended in error.
type shape struct {
	spans, depth int
	failed       []string
}

func shapeOf(tr *jaeger.Trace) shape {
	byID := map[string]jaeger.Span{}
	for _, s := range tr.Spans {
		byID[s.SpanID] = s
	}
	sh := shape{spans: len(tr.Spans)}
	for _, s := range tr.Spans {
		d := 1
		for p := byID[s.Parent()]; p.SpanID != ""; p = byID[p.Parent()] {
			d++
		}
		sh.depth = max(sh.depth, d)
		if s.Failed() {
			msg, _ := s.Tag("otel.status_description")
			sh.failed = append(sh.failed, s.Service+":"+s.OperationName+": "+msg)
		}
	}
	return sh
}

// complete holds once a client-mode run's trace has all its spans: the
// executors flush theirs as they exit, submit last of all, and the master
// ends each executor's span when the executor ends.
func complete(executors int) func(*jaeger.Trace) bool {
	return func(tr *jaeger.Trace) bool {
		return count(tr, func(s jaeger.Span) bool {
			return s.Service == telemetry.ServiceSubmit && strings.HasPrefix(s.OperationName, telemetry.SubmitSpan(""))
		}) == 1 && count(tr, func(s jaeger.Span) bool {
			return s.Service == telemetry.ServiceExecutor && strings.HasSuffix(s.OperationName, "/StopExecutor")
		}) == executors && count(tr, isExecutorSpan) == executors &&
			// The workers' RUNNING reports.
			count(tr, func(s jaeger.Span) bool {
				return s.Service == telemetry.ServiceMaster && strings.HasSuffix(s.OperationName, "/ExecutorStateChanged")
			}) == executors
	}
}

// isExecutorSpan is whether s is the master's span of an executor.
func isExecutorSpan(s jaeger.Span) bool {
	return s.Service == telemetry.ServiceMaster && strings.HasPrefix(s.OperationName, "executor ")
}

func TestTheLaunchTraceStaysSmallAndShallowWhateverTheTaskCount(t *testing.T) {
	t.Parallel()
	j := startJaeger(t)
	c := startClusterWithEnv(t, j.env(), 2)
	shapes := map[int]shape{}
	var last appJSON
	for i, tasks := range []int{10, 2000} {
		// Every batch of task offers traced, so that task traces exist to
		// be found, and any that leaked into the application's would show.
		stdout, stderr, err := glintWithEnv(t, j.env(), "submit", "--master", c.master.url, "--executor-cores", "1",
			"--total-executor-cores", "4", "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0", "--conf", waitForAll,
			"--conf", "spark.glint.trace.taskSampleRatio=1.0", "--executor-memory", "256m", "--log-level", "warn",
			"sleep", "0s", strconv.Itoa(tasks))
		if err != nil {
			t.Fatalf("submit: %v\n%s\n%s", err, stdout, stderr)
		}
		last = c.waitFor(t, "app completed", func(s masterJSON) bool { return len(s.CompletedApps) == i+1 }).CompletedApps[i]
		shapes[tasks] = shapeOf(j.waitForTrace(t, last.TraceID, complete(4)))
		t.Logf("%d tasks: the application's trace has %d spans, %d deep", tasks, shapes[tasks].spans, shapes[tasks].depth)
	}
	for tasks, sh := range shapes {
		if sh.depth > 20 {
			t.Errorf("%d tasks: trace %d spans deep, want at most 20", tasks, sh.depth)
		}
		if len(sh.failed) > 0 {
			t.Errorf("%d tasks: a successful run's trace has error spans %v", tasks, sh.failed)
		}
	}
	if few, many := shapes[10].spans, shapes[2000].spans; many > few+few/10 {
		t.Errorf("the trace has %d spans for 2000 tasks and %d for 10, want nearly the same", many, few)
	}

	// The tasks were traced apart, each batch linked to its task set's
	// runTasks span in the application's trace.
	app, err := j.client.Trace(context.Background(), last.TraceID)
	if err != nil {
		t.Fatal(err)
	}
	runTasks := map[string]bool{}
	for _, s := range app.Spans {
		if s.OperationName == "runTasks" {
			runTasks[s.SpanID] = true
		}
	}
	traces, err := j.client.Search(context.Background(), telemetry.ServiceDriver, "makeOffers",
		map[string]string{string(telemetry.AppID): last.ID}, 20)
	if err != nil {
		t.Fatal(err)
	}
	linked := 0
	for _, tr := range traces {
		for _, s := range tr.Spans {
			for _, r := range s.References {
				if tr.TraceID != last.TraceID && s.OperationName == "makeOffers" && r.TraceID == last.TraceID && runTasks[r.SpanID] {
					linked++
				}
			}
		}
	}
	if linked == 0 {
		t.Errorf("none of %d traces with the app's makeOffers is a task trace linked to its runTasks span", len(traces))
	}
}

func TestFailedLaunchMarksTheStepThatFailed(t *testing.T) {
	t.Parallel()
	j := startJaeger(t)
	// Two failed launches, a second apart (the relaunch backoff), fail the app.
	c := startClusterWithEnv(t, j.env(), 1, "--max-executor-retries", "2")
	driver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer driver.Close()
	master := masterv1connect.NewMasterServiceClient(rpc.NewHTTPClient(), c.master.url, rpc.ClientOptions(noop.NewTracerProvider(), testToken)...)
	one := int32(1)
	resp, err := master.RegisterApplication(context.Background(), connect.NewRequest(&masterv1.RegisterApplicationRequest{AppToken: rpc.NewToken(), MasterToken: rpc.NewToken(),
		DriverUrl: driver.URL,
		Description: &masterv1.ApplicationDescription{
			Name: "missing-binary", MemoryPerExecutorMib: 256, CoresPerExecutor: &one, MaxCores: &one,
			Command: &masterv1.Command{Args: []string{"/nonexistent/glint", "executor"}},
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	appID := resp.Msg.GetAppId()
	s := c.waitFor(t, "the app to fail", func(s masterJSON) bool {
		return len(s.CompletedApps) == 1 && s.CompletedApps[0].State == "FAILED"
	})
	if alive := s.alive(); alive != 1 {
		t.Errorf("%d workers alive after the failed launches, want 1", alive)
	}
	tr := j.waitForTrace(t, s.CompletedApps[0].TraceID, func(tr *jaeger.Trace) bool {
		return count(tr, func(s jaeger.Span) bool { return s.OperationName == "process.start" }) >= 1
	})
	for _, sp := range tr.Spans {
		if sp.OperationName != "process.start" {
			continue
		}
		msg, _ := sp.Tag("otel.status_description")
		if !sp.Failed() || !sp.HasEvent("exception") || !strings.Contains(msg, "/nonexistent/glint") || !strings.Contains(msg, "no such file or directory") {
			t.Errorf("process.start of %s: failed=%v exception=%v status %q; want Error with the exec error", appID, sp.Failed(), sp.HasEvent("exception"), msg)
		}
		break
	}
	// glint trace says why without --all: each failed step with its error.
	out, errOut, err := runGlint(t, "trace", "--jaeger", j.query, appID)
	if err != nil {
		t.Fatalf("glint trace: %v\n%s", err, errOut)
	}
	if !regexp.MustCompile(`(?s)\nFailed steps \(\d+\)\n.*glint-worker\s+process\.start\s+exec: [^\n]*/nonexistent/glint[^\n]*no such file or directory`).MatchString(out) {
		t.Errorf("glint trace %s shows no failed process.start with its error:\n%s", appID, out)
	}
}

func TestClusterModeDriverJoinsTheTraceOfItsSubmission(t *testing.T) {
	t.Parallel()
	j := startJaeger(t)
	c := startClusterWithEnv(t, j.env(), 2)
	// Both executors register before tasks run, so the driver stops both.
	stdout, stderr, err := glintWithEnv(t, j.env(), "submit", "--master", c.master.url, "--deploy-mode", "cluster", "--wait",
		"--driver-memory", "256m", "--executor-memory", "256m", "--total-executor-cores", "2",
		"--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0", "--conf", waitForAll, "--log-level", "warn", "pi", "4")
	if err != nil {
		t.Fatalf("submit: %v\n%s\n%s", err, stdout, stderr)
	}
	app := c.waitFor(t, "app completed", func(s masterJSON) bool { return len(s.CompletedApps) == 1 }).CompletedApps[0]
	tr := j.waitForTrace(t, app.TraceID, func(tr *jaeger.Trace) bool {
		return hasStep(tr, telemetry.SubmitSpan("pi")) && hasStep(tr, "/LaunchDriver") && count(tr, func(s jaeger.Span) bool {
			return s.Service == telemetry.ServiceExecutor && strings.HasSuffix(s.OperationName, "/StopExecutor")
		}) == 2
	})
	if failed := shapeOf(tr).failed; len(failed) > 0 {
		t.Errorf("a successful cluster-mode run's trace has error spans %v", failed)
	}
	byID := map[string]jaeger.Span{}
	for _, s := range tr.Spans {
		byID[s.SpanID] = s
	}
	if out := outliving(tr); len(out) > 0 {
		t.Errorf("%d spans do not lie within their parent: %v", len(out), out)
	}
	// The driver's registration (an anchored call: the master's span only)
	// is a child of the span the worker started the driver process in: the
	// master's span of the driver, which the process's TRACEPARENT names.
	for _, s := range tr.Spans {
		if s.Service != telemetry.ServiceMaster || !strings.HasSuffix(s.OperationName, "/RegisterApplication") {
			continue
		}
		p := byID[s.Parent()]
		if id, _ := p.Tag(string(telemetry.DriverID)); p.OperationName != "driver "+id || p.Service != telemetry.ServiceMaster {
			t.Fatalf("the driver's RegisterApplication is a child of %s:%s, not of its driver's span", p.Service, p.OperationName)
		}
		return
	}
	t.Fatalf("no RegisterApplication span of glint-master in the submission's trace: %v", spanNames(tr))
}

// spanRelay says how process pid sends its spans: "" when it has no span
// relay, else what is wrong with it unless it holds, as GLINT_SPANS_FD
// names, one end of a pipe whose other end worker holds ("ok").
func spanRelay(t *testing.T, pid, worker int) string {
	t.Helper()
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	var fd string
	for _, kv := range strings.Split(string(env), "\x00") {
		if v, ok := strings.CutPrefix(kv, telemetry.RelayFDEnv+"="); ok {
			fd = v
		}
	}
	if fd == "" {
		return ""
	}
	pipe, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd))
	if err != nil || !strings.HasPrefix(pipe, "pipe:") {
		return fmt.Sprintf("%s=%s is %q (%v), not a pipe", telemetry.RelayFDEnv, fd, pipe, err)
	}
	held, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", worker))
	for _, f := range held {
		if l, _ := os.Readlink(f); l == pipe {
			return "ok"
		}
	}
	return fmt.Sprintf("the worker does not hold the other end of %s", pipe)
}

func TestATracedWorkersExecutorsHandTheirSpansToIt(t *testing.T) {
	t.Parallel()
	j := startJaeger(t)
	// A prestarted executor, and one started for its launch.
	warm := startSizedCluster(t, j.env(), 1, 1, []string{"--prestart-executors", "1"})
	if got := spanRelay(t, idleStandby(t, warm), warm.workers[0].cmd.Process.Pid); got != "ok" {
		t.Errorf("a prestarted executor's span relay: %q", got)
	}
	cold := startSizedCluster(t, j.env(), 1, 1, nil)
	release := filepath.Join(t.TempDir(), "release")
	wait := runInBackground(t, j.env(), "submit", "--master", cold.master.url, "--executor-cores", "1",
		"--total-executor-cores", "1", "--executor-memory", "256m", "--log-level", "warn", "hold", release, "1")
	worker := cold.workers[0].cmd.Process.Pid
	waitUntil(t, "the executor listed for scraping", func() bool {
		return len(byRole(discover(t, cold.master.url), "executor")) == 1
	})
	executors := childrenOf(worker)
	if len(executors) != 1 {
		t.Fatalf("the worker runs %d processes, want its one executor", len(executors))
	}
	if got := spanRelay(t, executors[0], worker); got != "ok" {
		t.Errorf("an executor's span relay: %q", got)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := wait(); err != nil {
		t.Fatalf("submit: %v\n%s", err, out)
	}
}
