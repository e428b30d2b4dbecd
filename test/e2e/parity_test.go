package e2e

import (
	"cmp"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/glint-cluster/glint/internal/jaeger"
	"github.com/glint-cluster/glint/internal/tooltest"
)

// workerID is the id the master gave the worker process p (worker ids end
// with the worker's port).
func (c *testCluster) workerID(t *testing.T, p *proc) string {
	t.Helper()
	port := p.url[strings.LastIndexByte(p.url, ':')+1:]
	for _, w := range c.state(t).Workers {
		if strings.HasSuffix(w.ID, "-"+port) {
			return w.ID
		}
	}
	t.Fatalf("no worker listed for %s", p.url)
	return ""
}

// executorsOn counts the active applications' executors by worker, in state
// (any state when "").
func executorsOn(s masterJSON, state string) map[string]int {
	on := map[string]int{}
	for _, a := range s.ActiveApps {
		for _, e := range a.Executors {
			if state == "" || e.State == state {
				on[e.Worker]++
			}
		}
	}
	return on
}

func TestDecommissioningAWorkerLetsItsExecutorsFinishAndTheAppComplete(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 2)
	// One executor on each worker, each holding one task; one attempt per
	// task, so a task failure would fail the job.
	release := filepath.Join(t.TempDir(), "release")
	wait := runInBackground(t, nil, "submit", "--master", c.master.url, "--executor-cores", "1",
		"--total-executor-cores", "2", "--executor-memory", "256m", "--conf", "spark.task.maxFailures=1",
		"--log-level", "warn", "hold", release, "2")
	c.waitFor(t, "an executor running on each worker", func(s masterJSON) bool { return len(executorsOn(s, "RUNNING")) == 2 })
	gone, stays := c.workerID(t, c.workers[0]), c.workerID(t, c.workers[1])
	var draining string // the metrics of the executor on the worker to decommission
	for _, g := range byRole(discover(t, c.master.url), "executor") {
		waitForSample(t, "http://"+g.Targets[0], "glint_executor_tasks_running", 1)
		if g.Labels["worker"] == gone {
			draining = "http://" + g.Targets[0]
		}
	}
	out, stderr, err := runGlint(t, "decommission", "--master", c.master.url, gone)
	if err != nil || !strings.Contains(out, "decommissioned") {
		t.Fatalf("glint decommission %s: %v\n%s%s", gone, err, out, stderr)
	}
	// Its executor's cores are the app's again at once: a replacement starts
	// on the other worker while the decommissioned executor holds its task.
	c.waitFor(t, "the worker DECOMMISSIONED, its executor too, and a replacement on the other worker", func(s masterJSON) bool {
		state := ""
		for _, w := range s.Workers {
			if w.ID == gone {
				state = w.State
			}
		}
		return state == "DECOMMISSIONED" && executorsOn(s, "DECOMMISSIONED")[gone] == 1 && executorsOn(s, "RUNNING")[stays] == 2
	})
	// The decommissioned executor still holds its task.
	waitForSample(t, draining, "glint_executor_tasks_running", 1)
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := wait(); err != nil {
		t.Fatalf("the job failed after decommissioning a worker: %v", err)
	}
	s := c.waitFor(t, "the application completed", func(s masterJSON) bool { return len(s.CompletedApps) == 1 })
	a := s.CompletedApps[0]
	if a.State != "FINISHED" {
		t.Errorf("application %s, want FINISHED", a.State)
	}
	for _, e := range a.Executors {
		if e.Worker != gone {
			continue
		}
		// Nothing new ran on the decommissioned worker, and its executor
		// finished its task rather than having it killed.
		if e.ID > 1 {
			t.Errorf("executor %d was placed on the decommissioned worker", e.ID)
		}
		if log := readFile(filepath.Join(c.workDirs[0], a.ID, strconv.Itoa(e.ID), "stderr")); strings.Contains(log, "killing task") || log == "" {
			t.Errorf("the decommissioned executor's task was killed, or it has no log:\n%s", log)
		}
	}
	// SIGPWR decommissions a worker too, as in Spark.
	if err := syscall.Kill(c.workers[1].cmd.Process.Pid, syscall.SIGPWR); err != nil {
		t.Fatal(err)
	}
	c.waitFor(t, "the worker sent SIGPWR DECOMMISSIONED", func(s masterJSON) bool { return s.alive() == 0 })
	out, _, err = runGlint(t, "decommission", "--master", c.master.url, stays)
	if err != nil || !strings.Contains(out, "already decommissioned") {
		t.Errorf("glint decommission %s after SIGPWR: %v %q, want already decommissioned", stays, err, out)
	}
	if _, stderr, err := runGlint(t, "decommission", "--master", c.master.url, "worker-1"); exitCode(err) == 0 || !strings.Contains(stderr, "invalid") {
		t.Errorf("glint decommission with a bad id: exit %d, stderr %q; want a clear error", exitCode(err), stderr)
	}
}

func TestDefaultCoresCapAnAppThatSetsNoTotalExecutorCores(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 2, "--default-cores", "1")
	release := filepath.Join(t.TempDir(), "release")
	wait := runInBackground(t, nil, "submit", "--master", c.master.url, "--executor-cores", "1",
		"--executor-memory", "256m", "--log-level", "warn", "hold", release, "2")
	s := c.waitFor(t, "the app's one executor running", func(s masterJSON) bool { return len(executorsOn(s, "RUNNING")) == 1 })
	out, _, err := runGlint(t, "status", "--master", c.master.url, s.ActiveApps[0].ID)
	if err != nil || !strings.Contains(out, "capped at 1 cores by the master's --default-cores") {
		t.Errorf("glint status: %v\n%s; want it to say the app is capped", err, out)
	}
	if n := len(c.state(t).ActiveApps[0].Executors); n != 1 {
		t.Errorf("%d executors, want 1 (4 cores are free, the default caps the app at 1)", n)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := runGlint(t, "master", "--default-cores", "-2"); exitCode(err) == 0 || !strings.Contains(stderr, "--default-cores") {
		t.Errorf("glint master --default-cores -2: exit %d, stderr %q; want a clear error", exitCode(err), stderr)
	}
}

func TestWorkerCleanupRemovesOnlyOldDirectoriesOfFinishedApps(t *testing.T) {
	t.Parallel()
	master := start(t, "master", nil, "master", "--listen", "127.0.0.1:0")
	work := t.TempDir()
	old := time.Now().Add(-2 * time.Hour)
	// made writes the file path and dates it and its directories up to work
	// mtime, outermost first: the worker's cleanup may remove a directory as
	// soon as everything in it is old, so the file is dated last, and the
	// test touches nothing of its tree after that.
	made := func(path string, mtime time.Time) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("log\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		var tree []string
		for p := path; p != work; p = filepath.Dir(p) {
			tree = append(tree, p)
		}
		for _, p := range slices.Backward(tree) {
			if err := os.Chtimes(p, mtime, mtime); err != nil {
				t.Fatal(err)
			}
		}
	}
	start(t, "worker", nil, "worker", "--master", master.url, "--listen", "127.0.0.1:0", "--cores", "2", "--memory", "2g",
		"--work-dir", work, "--cleanup-interval", "100ms", "--cleanup-ttl", "1h")
	c := &testCluster{master: master}
	c.waitFor(t, "the worker alive", func(s masterJSON) bool { return s.alive() == 1 })
	// A running application whose files are all old is kept.
	release := filepath.Join(t.TempDir(), "release")
	wait := runInBackground(t, nil, "submit", "--master", master.url, "--executor-memory", "256m", "--log-level", "warn", "hold", release, "1")
	s := c.waitFor(t, "the app's executor running", func(s masterJSON) bool { return len(executorsOn(s, "RUNNING")) == 1 })
	running := s.ActiveApps[0].ID
	if err := filepath.WalkDir(filepath.Join(work, running), func(p string, _ fs.DirEntry, _ error) error { return os.Chtimes(p, old, old) }); err != nil {
		t.Fatal(err)
	}
	// Made last, the old directories are gone only after a pass that saw
	// everything else as it is now.
	made(filepath.Join(work, "app-20250101000000-0003", "0", "stderr"), time.Now())
	made(filepath.Join(work, "keep", "notes"), old)
	made(filepath.Join(work, "app-20250101000000-0001", "0", "stderr"), old)
	made(filepath.Join(work, "driver-20250101000000-0002", "stdout"), old)
	for _, gone := range []string{"app-20250101000000-0001", "driver-20250101000000-0002"} {
		tooltest.Eventually(t, gone+" cleaned up", func() bool {
			_, err := os.Stat(filepath.Join(work, gone))
			return err != nil
		})
	}
	// Passes ran after the old ones went; these survived them.
	for _, kept := range []string{"app-20250101000000-0003", "keep", running} {
		if _, err := os.Stat(filepath.Join(work, kept)); err != nil {
			t.Errorf("%s was removed: %v", kept, err)
		}
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
}

func TestDynamicAllocationGrowsWithTheBacklogAndReleasesIdleExecutors(t *testing.T) {
	t.Parallel()
	j := startJaeger(t)
	c := startClusterWithEnv(t, j.env(), 2) // 4 cores
	dir := t.TempDir()
	tasksDone, appDone := filepath.Join(dir, "tasks"), filepath.Join(dir, "app")
	wait := runInBackground(t, j.env(), "submit", "--master", c.master.url, "--executor-cores", "1", "--executor-memory", "256m",
		"--conf", "spark.dynamicAllocation.enabled=true", "--conf", "spark.dynamicAllocation.initialExecutors=1",
		"--conf", "spark.dynamicAllocation.maxExecutors=3", "--conf", "spark.dynamicAllocation.schedulerBacklogTimeout=200ms",
		"--conf", "spark.dynamicAllocation.executorIdleTimeout=1s", "--log-level", "warn",
		"hold", tasksDone, "6", appDone)
	// Six held tasks: the target grows 1 → 2 → 3 (the max), never beyond.
	s := c.waitFor(t, "three executors running", func(s masterJSON) bool { return sum(executorsOn(s, "RUNNING")) == 3 })
	if n := len(s.ActiveApps[0].Executors); n != 3 {
		t.Errorf("%d executors, want 3 (maxExecutors)", n)
	}
	app := s.ActiveApps[0]
	// The tasks end; the application goes on with its executors idle, and
	// each is released once idle for a second.
	if err := os.WriteFile(tasksDone, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s = c.waitFor(t, "the idle executors released", func(s masterJSON) bool {
		return len(s.ActiveApps) == 1 && sum(executorsOn(s, "RUNNING")) == 0 && sum(executorsOn(s, "KILLED")) == 3
	})
	if n := len(s.ActiveApps[0].Executors); n != 3 {
		t.Errorf("%d executors after the release, want the 3 released (no replacement)", n)
	}
	drivers := byRole(discover(t, c.master.url), "driver")
	if len(drivers) != 1 {
		t.Fatalf("%d drivers discovered, want 1", len(drivers))
	}
	// The master lists them killed once their workers report it; the
	// driver counts each release once its kill call returned and each
	// executor gone once the master told it: waited for, not assumed.
	var requests, released, registered float64
	tooltest.Poll(30*time.Second, 10*time.Millisecond, func() bool {
		page := scrape(t, "http://"+drivers[0].Targets[0])
		requests, _ = sample(t, page, "glint_driver_executor_requests_total", nil)
		released, _ = sample(t, page, "glint_driver_executors_released_total", nil)
		registered, _ = sample(t, page, "glint_driver_executors_registered", nil)
		return released == 3 && registered == 0
	})
	if requests < 3 || released != 3 || registered != 0 {
		t.Errorf("driver counted %v requests, %v releases and %v executors left; want at least 3 (2, 3, then fewer), 3 and none",
			requests, released, registered)
	}
	if err := os.WriteFile(appDone, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
	// Each request and release is a span of the application's trace.
	spans := func(tr *jaeger.Trace, name string) int {
		return count(tr, func(s jaeger.Span) bool { return s.OperationName == name && s.Service == "glint-driver" })
	}
	tr := j.waitForTrace(t, app.TraceID, func(tr *jaeger.Trace) bool {
		return spans(tr, "requestExecutors") == int(requests) && spans(tr, "killExecutors") >= 1
	})
	var requested []jaeger.Span
	for _, s := range tr.Spans {
		if s.OperationName == "requestExecutors" {
			requested = append(requested, s)
		}
	}
	slices.SortFunc(requested, func(a, b jaeger.Span) int { return cmp.Compare(a.StartTime, b.StartTime) })
	var targets []any
	for _, s := range requested {
		for _, tag := range s.Tags {
			if tag.Key == "glint.executors.target" {
				targets = append(targets, tag.Value)
			}
		}
	}
	// From the initial 1: one more, then two more but capped at 3; at the end fewer.
	if len(targets) < 3 || fmt.Sprint(targets[:2]) != "[2 3]" {
		t.Errorf("executor targets requested %v, want 2, 3, then lower ones", targets)
	}
}
