package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/glint-cluster/glint/internal/jaeger"
	"github.com/glint-cluster/glint/internal/tooltest"
	"github.com/glint-cluster/glint/pkg/contain"
	"github.com/glint-cluster/glint/pkg/telemetry"
)

// workerState is the part of a worker's /json the prestart test reads.
type workerState struct {
	Prestarted        int                `json:"prestarted"`
	FinishedExecutors []finishedExecutor `json:"finishedexecutors"`
}

type finishedExecutor struct {
	AppID string `json:"appid"`
	PID   int    `json:"pid"`
}

func (c *testCluster) worker(t *testing.T, i int) workerState {
	t.Helper()
	resp := getPage(t, c.client, c.workers[i].url+"/json")
	defer resp.Body.Close()
	var s workerState
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// idleStandby waits until the worker has one prestarted executor and returns
// its pid, the worker's only child then.
func idleStandby(t *testing.T, c *testCluster) int {
	t.Helper()
	var kids []int
	if !tooltest.Poll(30*time.Second, 20*time.Millisecond, func() bool {
		kids = childrenOf(c.workers[0].cmd.Process.Pid)
		return c.worker(t, 0).Prestarted == 1 && len(kids) == 1
	}) {
		t.Fatalf("no prestarted executor after 30 s: %+v", c.worker(t, 0))
	}
	return kids[0]
}

func TestALaunchClaimsAPrestartedExecutorOnceAndTheWorkerStartsAnother(t *testing.T) {
	t.Parallel()
	c := startSizedCluster(t, nil, 1, 2, []string{"--prestart-executors", "1"})
	var pids []int
	for run := range 2 {
		standby := idleStandby(t, c)
		if slices.Contains(pids, standby) {
			t.Fatalf("run %d: the prestarted process %d already served an application", run, standby)
		}
		stdout, stderr, err := runGlint(t, "submit", "--master", c.master.url, "--executor-cores", "1",
			"--total-executor-cores", "1", "--executor-memory", "256m", "pi", "2")
		if err != nil || !piResult.MatchString(stdout) {
			t.Fatalf("run %d: submit: %v\n%s\n%s", run, err, stdout, stderr)
		}
		// The driver stopped its executor before submit returned; the worker
		// records its end once it reaped it.
		var ended []finishedExecutor
		waitUntil(t, "the executor's end recorded", func() bool {
			ended = c.worker(t, 0).FinishedExecutors
			return len(ended) > run
		})
		if len(ended) != run+1 || ended[run].PID != standby {
			t.Fatalf("run %d: finished executors %+v, want the last to be the prestarted process %d", run, ended, standby)
		}
		// The claim handed the executor its log files in its work dir.
		log := readFile(filepath.Join(c.workDirs[0], ended[run].AppID, "0", "stderr"))
		if !strings.Contains(log, "executor registered") {
			t.Errorf("run %d: the executor's stderr in its work dir does not show its registration:\n%s", run, log)
		}
		pids = append(pids, standby)
	}
	if pids[0] == pids[1] {
		t.Errorf("both applications ran on process %d", pids[0])
	}
}

func TestAClaimedExecutorsTraceShowsTheClaimInsteadOfProcessStart(t *testing.T) {
	t.Parallel()
	j := startJaeger(t)
	c := startSizedCluster(t, j.env(), 1, 2, []string{"--prestart-executors", "2"})
	if !tooltest.Poll(30*time.Second, 20*time.Millisecond, func() bool { return c.worker(t, 0).Prestarted == 2 }) {
		t.Fatal("no two prestarted executors after 30 s")
	}
	stdout, stderr, err := glintWithEnv(t, j.env(), "submit", "--master", c.master.url, "--executor-cores", "1",
		"--total-executor-cores", "2", "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0", "--conf", waitForAll,
		"--executor-memory", "256m", "--log-level", "warn", "pi", "4")
	if err != nil {
		t.Fatalf("submit: %v\n%s\n%s", err, stdout, stderr)
	}
	app := c.waitFor(t, "app completed", func(s masterJSON) bool { return len(s.CompletedApps) == 1 }).CompletedApps[0]
	tr := j.waitForTrace(t, app.TraceID, complete(2))
	byID := map[string]jaeger.Span{}
	for _, s := range tr.Spans {
		byID[s.SpanID] = s
	}
	if n := count(tr, func(s jaeger.Span) bool { return s.OperationName == "process.start" }); n != 0 {
		t.Errorf("%d process.start spans, want none: both executors were prestarted", n)
	}
	// A claimed executor's calls continue its launch, as a started one's do;
	// it booted before, on no launch's path.
	claimed := count(tr, func(s jaeger.Span) bool {
		return s.Service == telemetry.ServiceExecutor && strings.HasSuffix(s.OperationName, "/RetrieveSparkProps") &&
			isExecutorSpan(byID[s.Parent()])
	})
	claims := count(tr, func(s jaeger.Span) bool {
		return s.OperationName == "claim" && isExecutorSpan(byID[s.Parent()])
	})
	if claims != 2 || claimed != 2 {
		t.Errorf("%d claim spans and %d executors' first calls under executor spans, want 2 and 2", claims, claimed)
	}
	if n := count(tr, func(s jaeger.Span) bool { return s.OperationName == "executor.boot" }); n != 0 {
		t.Errorf("%d executor.boot spans, want none: both executors booted before their launch", n)
	}
}

// A prestarted executor waits on one core, in a cgroup of its own under its
// worker's; claimed, it runs on its launch's cores, its cgroup become its
// launch's.
func TestAPrestartedExecutorRunsOnOneCoreUntilClaimedThenOnItsCores(t *testing.T) {
	t.Parallel()
	c := startSizedCluster(t, nil, 1, 2, []string{"--prestart-executors", "1"})
	standby := idleStandby(t, c)
	if got := tooltest.CgroupOf(t, standby); !regexp.MustCompile(`^/glint-worker-[0-9a-f]{12}/standby-\d+$`).MatchString(got) {
		t.Errorf("the prestarted executor is in cgroup %s before its claim, want one of its own under its worker's", got)
	}
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", standby))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Split(string(env), "\x00"), "GOMAXPROCS=1") {
		t.Errorf("the prestarted process's environment has no GOMAXPROCS=1")
	}
	// Its worker does not trace: it hands it no span relay.
	if got := spanRelay(t, standby, c.workers[0].cmd.Process.Pid); got != "" {
		t.Errorf("an untraced worker's prestarted executor has a span relay (%s)", got)
	}
	release := filepath.Join(t.TempDir(), "release")
	wait := runInBackground(t, nil, "submit", "--master", c.master.url, "--executor-cores", "2",
		"--total-executor-cores", "2", "--executor-memory", "256m", "--log-level", "warn", "hold", release, "1")
	var executors []sdGroup
	waitUntil(t, "the executor listed for scraping", func() bool {
		executors = byRole(discover(t, c.master.url), "executor")
		return len(executors) == 1
	})
	target := "http://" + executors[0].Targets[0]
	// Its task runs once it registered: it has taken its cores by then.
	waitForSample(t, target, "glint_executor_tasks_running", 1)
	if v, ok := sample(t, scrape(t, target), "go_sched_gomaxprocs_threads", nil); v != 2 {
		t.Errorf("the claimed two-core executor's GOMAXPROCS is %v (found: %v), want 2", v, ok)
	}
	if kids := childrenOf(c.workers[0].cmd.Process.Pid); !slices.Contains(kids, standby) {
		t.Errorf("the worker's children %v do not include the prestarted process %d: it was not claimed", kids, standby)
	}
	// The claim made its cgroup its launch's, under its worker's, limited
	// to the launch's memory.
	got := tooltest.CgroupOf(t, standby)
	if !regexp.MustCompile(`^/glint-worker-[0-9a-f]{12}/executor-app-[^/]+-0$`).MatchString(got) {
		t.Errorf("the claimed executor is in cgroup %s, want its launch's under its worker's", got)
	}
	limitFile := filepath.Join("/sys/fs/cgroup/memory", got, "memory.limit_in_bytes")
	if _, err := os.Stat(limitFile); err != nil {
		limitFile = filepath.Join("/sys/fs/cgroup", got, "memory.max")
	}
	if b, err := os.ReadFile(limitFile); err != nil || strings.TrimSpace(string(b)) != fmt.Sprint(contain.MemoryLimit(256)) {
		t.Errorf("the claimed executor's memory limit is %q (%v), want %d: 256 MiB and its overhead", b, err, contain.MemoryLimit(256))
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := wait(); err != nil {
		t.Fatalf("submit: %v\n%s", err, out)
	}
}
