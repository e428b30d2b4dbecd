package e2e

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/glint-cluster/glint/internal/tooltest"
	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/rpc"
)

var piResult = regexp.MustCompile(`Pi is roughly 3\.1[0-9]*`)

func TestPiInClientModeRunsOnExecutorProcesses(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 2)
	stdout, stderr, err := runGlint(t, "submit", "--master", c.master.url, "--executor-cores", "1",
		"--executor-memory", "256m", "--log-level", "warn", "pi", "20")
	if err != nil {
		t.Fatalf("submit: %v\nstdout: %s\nstderr: %s", err, stdout, stderr)
	}
	if !piResult.MatchString(stdout) {
		t.Errorf("stdout %q has no pi estimate", stdout)
	}
	s := c.waitFor(t, "app completed and cores freed", func(s masterJSON) bool {
		for _, w := range s.Workers {
			if w.CoresUsed != 0 {
				return false
			}
		}
		return len(s.ActiveApps) == 0 && len(s.CompletedApps) == 1
	})
	app := s.CompletedApps[0]
	if app.State != "FINISHED" || len(app.Executors) != 4 {
		t.Errorf("completed app %+v; want FINISHED with 4 executors", app)
	}
	// Every executor ran as a process of its own, of the executor program
	// beside glint, with its logs in the work dir.
	program := strconv.Quote(glintBin + child.ExecutorSuffix)
	logs := 0
	for _, dir := range c.workDirs {
		for _, stream := range []string{"stdout", "stderr"} {
			files, _ := filepath.Glob(filepath.Join(dir, app.ID, "*", stream))
			for _, f := range files {
				logs++
				if head := firstLine(t, f); !strings.HasPrefix(head, "Launch command: "+program+" ") {
					t.Errorf("%s starts with %q, want the launch command of %s", f, head, program)
				}
			}
		}
	}
	if logs != 8 {
		t.Errorf("found %d executor log files, want 8 (stdout and stderr of 4 executors)", logs)
	}
}

func TestAGlintWithNoExecutorProgramBesideItHasItsExecutorsRunGlintExecutor(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1)
	// glint alone, as `go run ./cmd/glint` builds it.
	lone := filepath.Join(t.TempDir(), "glint")
	if err := os.Link(glintBin, lone); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := runBinary(t, lone, nil, "submit", "--master", c.master.url, "--executor-cores", "1",
		"--total-executor-cores", "1", "--executor-memory", "256m", "--log-level", "warn", "pi", "2")
	if err != nil || !piResult.MatchString(stdout) {
		t.Fatalf("submit: %v\nstdout: %s\nstderr: %s", err, stdout, stderr)
	}
	files, _ := filepath.Glob(filepath.Join(c.workDirs[0], "app-*", "*", "stderr"))
	if len(files) != 1 {
		t.Fatalf("executor stderr files %v, want one", files)
	}
	if head, want := firstLine(t, files[0]), "Launch command: "+strconv.Quote(lone)+` "executor" `; !strings.HasPrefix(head, want) {
		t.Errorf("the executor's log starts with %q, want %q…", head, want)
	}
}

func firstLine(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan()
	return sc.Text()
}

func TestPiInClusterModeRunsTheDriverOnAWorker(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 2)
	stdout, stderr, err := runGlint(t, "submit", "--master", c.master.url, "--deploy-mode", "cluster", "--wait",
		"--driver-memory", "256m", "--executor-memory", "256m", "--total-executor-cores", "2", "pi", "10")
	if err != nil {
		t.Fatalf("submit: %v\nstdout: %s\nstderr: %s", err, stdout, stderr)
	}
	driverID := strings.TrimSpace(stdout)
	if !strings.HasPrefix(driverID, "driver-") {
		t.Fatalf("stdout %q, want the driver id", stdout)
	}
	var output string
	for _, dir := range c.workDirs {
		if b, err := os.ReadFile(filepath.Join(dir, driverID, "stdout")); err == nil {
			output = string(b)
		}
	}
	if !piResult.MatchString(output) {
		t.Errorf("driver stdout %q has no pi estimate", output)
	}
	// Submit said where the driver ran and where its output is; that page
	// shows it.
	where := regexp.MustCompile(`driver ` + driverID + ` runs on worker (worker-\S+); its output: (http://\S+/log/` + driverID + `/stdout) \(and /stderr\)\n`).FindStringSubmatch(stderr)
	if where == nil {
		t.Fatalf("stderr %q does not say where the driver runs and where its output is", stderr)
	}
	resp := getPage(t, nil, where[2])
	page, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !piResult.Match(page) {
		t.Errorf("%s: %v; the page has no pi estimate:\n%s", where[2], err, page)
	}
	c.waitFor(t, "driver finished and app completed", func(s masterJSON) bool {
		return len(s.ActiveApps) == 0 && len(s.CompletedApps) == 1 && s.CompletedApps[0].State == "FINISHED"
	})
}

// TestAClusterDriverThatFailsEndsItsApplicationFailed: wordcount on a
// missing file in cluster mode exits 1; its application ends FAILED with
// the reason — in /json, on the master's page, in glint status — and is
// counted so in /metrics, not shown FINISHED "unregistered by its driver".
func TestAClusterDriverThatFailsEndsItsApplicationFailed(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1)
	missing := filepath.Join(t.TempDir(), "missing.txt")
	stdout, stderr, err := runGlint(t, "submit", "--master", c.master.url, "--deploy-mode", "cluster", "--wait",
		"--driver-memory", "256m", "--executor-memory", "256m", "--log-level", "warn", "wordcount", missing)
	if exitCode(err) != 1 || !strings.Contains(stderr, "ended FAILED") {
		t.Fatalf("submit of a failing driver: %v, want exit 1 saying it ended FAILED\nstdout: %s\nstderr: %s", err, stdout, stderr)
	}
	s := c.waitFor(t, "the application completed", func(s masterJSON) bool {
		return len(s.ActiveApps) == 0 && len(s.CompletedApps) == 1 && s.CompletedApps[0].State != "RUNNING"
	})
	app := s.CompletedApps[0]
	if app.State != "FAILED" || !strings.Contains(app.StatusMessage, "no such file or directory") {
		t.Errorf("application %s %q, want FAILED saying the file is missing", app.State, app.StatusMessage)
	}
	resp := getPageWith(t, c.client, testToken, c.master.url+"/")
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	row := string(page)
	if i := strings.Index(row, `data-app="`+app.ID+`"`); i >= 0 {
		row = row[i:]
		row = row[:strings.Index(row, "</tr>")]
	}
	if !strings.Contains(row, ">FAILED<") || !strings.Contains(row, "no such file or directory") {
		t.Errorf("the master's page shows the application as\n%s\nwant FAILED with its reason", row)
	}
	// Its driver's logs are a link away, on the master's page and the
	// application's: they say why.
	driverLog := regexp.MustCompile(`<a id="driver-stderr" href="(` + regexp.QuoteMeta(c.workers[0].url) + `/log/driver-[0-9-]+/stderr)">`)
	resp = getPageWith(t, c.client, testToken, c.master.url+"/app/"+app.ID)
	appPage, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := driverLog.FindStringSubmatch(string(appPage))
	if m == nil || !strings.Contains(string(page), `<a class="stderr" href="`+m[1]+`">`) {
		t.Fatalf("no link to the driver's stderr on its worker on the application's page and the master's:\n%s", appPage)
	}
	resp = getPageWith(t, c.client, testToken, m[1])
	log, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(log), "no such file or directory") {
		t.Errorf("the driver's stderr page does not say why it failed:\n%s", log)
	}
	out, errOut, err := runGlint(t, "status", "--master", c.master.url)
	if err != nil || !regexp.MustCompile(app.ID+`\s.*FAILED`).MatchString(out) {
		t.Errorf("glint status: %v\n%s%s\nwant %s FAILED", err, out, errOut, app.ID)
	}
	if metrics := scrape(t, c.master.url); !strings.Contains(metrics, `glint_master_apps_ended_total{state="failed"} 1`) ||
		!strings.Contains(metrics, `glint_master_apps_ended_total{state="finished"} 0`) {
		t.Errorf("the master counts the application's end as\n%s", grepLines(metrics, "glint_master_apps_ended_total"))
	}
}

// grepLines is text's lines that contain s.
func grepLines(text, s string) string {
	var out []string
	for line := range strings.SplitSeq(text, "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

func TestWordCountPrintsTheMostFrequentWords(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1)
	file := filepath.Join(t.TempDir(), "words.txt")
	text := strings.Repeat("the quick brown fox jumps over the lazy dog\n", 50) + strings.Repeat("glint\n", 7)
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := runGlint(t, "submit", "--master", c.master.url, "--executor-memory", "256m", "--log-level", "warn", "wordcount", file)
	if err != nil {
		t.Fatalf("submit: %v\n%s", err, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if lines[0] != "the: 100" || !strings.Contains(stdout, "glint: 7") {
		t.Errorf("wordcount output:\n%s", stdout)
	}
}

func TestOversizedExecutorsWaitWithAReasonUntilKilled(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1)
	submit := exec.Command(glintBin, "submit", "--master", c.master.url, "--executor-cores", "64", "--log-level", "warn", "sleep", "1s")
	if err := submit.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = submit.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = submit.Process.Signal(syscall.SIGTERM)
		<-exited
	})
	s := c.waitFor(t, "app waiting with a reason", func(s masterJSON) bool {
		return len(s.ActiveApps) == 1 && strings.Contains(s.ActiveApps[0].StatusMessage, "requires more resources than any worker has")
	})
	if s.ActiveApps[0].State != "WAITING" {
		t.Errorf("app state %s, want WAITING", s.ActiveApps[0].State)
	}
	if out, errOut, err := runGlint(t, "kill", "--master", c.master.url, s.ActiveApps[0].ID); err != nil {
		t.Fatalf("kill: %v %s %s", err, out, errOut)
	}
	select {
	case <-exited:
		if exitCode(waitErr) == 0 {
			t.Errorf("submit of a killed app exited 0")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("submit did not end after its app was killed")
	}
	c.waitFor(t, "app killed", func(s masterJSON) bool {
		return len(s.CompletedApps) == 1 && s.CompletedApps[0].State == "KILLED"
	})
}

func TestBadInputGetsAClearErrorAndNonZeroExit(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1)
	m := c.master.url
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"zero executor memory", []string{"submit", "--master", m, "--executor-memory", "0", "pi"}, "--executor-memory"},
		{"unparseable memory", []string{"submit", "--master", m, "--executor-memory", "lots", "pi"}, "invalid size"},
		{"negative cores", []string{"submit", "--master", m, "--executor-cores", "-2", "pi"}, "--executor-cores -2"},
		{"negative total cores", []string{"submit", "--master", m, "--total-executor-cores", "-1", "pi"}, "--total-executor-cores -1"},
		{"unknown app", []string{"submit", "--master", m, "nosuchapp"}, `unknown app "nosuchapp"`},
		{"no app", []string{"submit", "--master", m}, "no APP given"},
		{"bad deploy mode", []string{"submit", "--master", m, "--deploy-mode", "moon", "pi"}, "--deploy-mode"},
		{"bad conf", []string{"submit", "--master", m, "--conf", "novalue", "pi"}, "KEY=VALUE"},
		{"bad task retries", []string{"submit", "--master", m, "--conf", "spark.task.maxFailures=0", "pi"}, "spark.task.maxFailures"},
		{"bad master url", []string{"submit", "--master", "ftp://x:1", "pi"}, "--master"},
		{"zero driver cores", []string{"submit", "--master", m, "--deploy-mode", "cluster", "--driver-cores", "0", "pi"}, "--driver-cores 0"},
		{"bad pi slices", []string{"submit", "--master", m, "--log-level", "error", "pi", "many"}, "SLICES"},
		{"kill bad id", []string{"kill", "--master", m, "../etc"}, "neither an application id"},
		{"kill unknown app", []string{"kill", "--master", m, "app-20260101000000-0042"}, "not_found"},
		{"status unknown id", []string{"status", "--master", m, "driver-20260101000000-0042"}, "not known"},
		{"worker zero cores", []string{"worker", "--master", m, "--cores", "0"}, "--cores 0"},
		{"worker zero memory", []string{"worker", "--master", m, "--memory", "0"}, "--memory"},
		{"worker too many cores", []string{"worker", "--master", m, "--cores", "100000"}, "--cores 100000: invalid argument: must be 1 to 4096"},
		{"worker too much memory", []string{"worker", "--master", m, "--memory", "100t"}, "must be 1 MiB to 64.0 TiB"},
		{"worker bad executor users", []string{"worker", "--master", m, "--executor-users", "500-400"}, `--executor-users: uid range "500-400": want FIRST-LAST`},
		{"worker executor cert without key", []string{"worker", "--master", m, "--executor-tls-cert-file", "x.crt"}, "--executor-tls-cert-file and --executor-tls-key-file go together"},
		{"master bad timeout", []string{"master", "--worker-timeout", "-1s"}, "--worker-timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, err := runGlint(t, tc.args...)
			if exitCode(err) == 0 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want non-zero and %q", exitCode(err), stderr, tc.want)
			}
		})
	}
	// None of it disturbed the cluster: an app still runs.
	if stdout, stderr, err := runGlint(t, "submit", "--master", m, "--executor-memory", "256m", "--log-level", "warn", "pi", "2"); err != nil || !piResult.MatchString(stdout) {
		t.Errorf("pi after bad input: %v\n%s\n%s", err, stdout, stderr)
	}
}

func TestStatusShowsTheClusterAsTableAndJSON(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 2)
	stdout, _, err := runGlint(t, "status", "--master", c.master.url)
	if alive := regexp.MustCompile(`(?m)^worker-\S+\s+\S+\s+ALIVE`).FindAllString(stdout, -1); err != nil || len(alive) != 2 {
		t.Errorf("status table (%v):\n%s", err, stdout)
	}
	stdout, _, err = runGlint(t, "status", "--master", c.master.url, "--json")
	if err != nil || !strings.Contains(stdout, `"workers"`) || !strings.Contains(stdout, "WORKER_STATE_ALIVE") {
		t.Errorf("status --json (%v):\n%s", err, stdout)
	}
}

func TestDemoRunsAClusterAndLeavesNothingBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("-short is the fast loop (make test-short): this test starts a whole cluster; make test runs it")
	}
	t.Parallel()
	// Every process the demo starts inherits this mark.
	mark := "GLINT_TEST_DEMO=" + rpc.NewToken()
	stdout, stderr, err := glintWithEnv(t, []string{mark}, "demo")
	if err != nil {
		t.Fatalf("demo: %v\nstdout: %s\nstderr: %s", err, stdout, stderr)
	}
	if left := processesWithEnv(mark); len(left) > 0 {
		t.Errorf("processes of the demo left after it exited: %v", left)
	}
	if !piResult.MatchString(stdout) || !strings.Contains(stdout, "Executor launches") {
		t.Errorf("demo output:\n%s", stdout)
	}
	if rows := regexp.MustCompile(`(?m)^\d+\s+worker-`).FindAllString(stdout, -1); len(rows) != 4 {
		t.Errorf("demo shows %d executor timelines, want 4:\n%s", len(rows), stdout)
	}
}

func TestExecutorsAndDriversExitWhenTheirWorkerDies(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1)
	// The tasks run until their worker dies: the release file is never made.
	never := filepath.Join(t.TempDir(), "never")
	if out, errOut, err := runGlint(t, "submit", "--master", c.master.url, "--deploy-mode", "cluster", "--driver-memory", "256m",
		"--executor-cores", "1", "--executor-memory", "256m", "--log-level", "warn", "hold", never, "2"); err != nil {
		t.Fatalf("submit: %v\n%s%s", err, out, errOut)
	}
	// The worker is killed as soon as it has forked the driver and the
	// executor, whether or not they have started watching it yet.
	worker := c.workers[0].cmd.Process.Pid
	var children []int
	if !tooltest.Poll(30*time.Second, time.Millisecond, func() bool { children = childrenOf(worker); return len(children) >= 2 }) {
		t.Fatalf("worker %d has children %v after 30s, want a driver and an executor\n%s", worker, children, readFile(c.workers[0].log))
	}
	if err := syscall.Kill(worker, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for _, pid := range children {
		tooltest.Eventually(t, fmt.Sprintf("process %d to end after its worker died", pid), func() bool {
			return syscall.Kill(pid, 0) != nil || !tooltest.Alive(pid)
		})
	}
}

// childrenOf lists the pids whose parent is pid.
func childrenOf(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var child, parent int
		if _, err := fmt.Sscan(e.Name(), &child); err != nil {
			continue
		}
		fields, err := tooltest.ProcStat(child)
		if err != nil || len(fields) < 2 {
			continue
		}
		if _, err := fmt.Sscan(fields[1], &parent); err == nil && parent == pid {
			out = append(out, child)
		}
	}
	return out
}

func TestHealthChecksAnEndpoint(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 0)
	if out, errOut, err := runGlint(t, "health", c.master.url+"/healthz"); err != nil || strings.TrimSpace(out) != "ok" {
		t.Errorf("health of a live master: %v %q %q", err, out, errOut)
	}
	if _, errOut, err := runGlint(t, "health", c.master.url+"/nowhere"); exitCode(err) == 0 || !strings.Contains(errOut, "404") {
		t.Errorf("health of a missing path: exit %d %q", exitCode(err), errOut)
	}
}

func TestSubmitEverySubmitsAgainUntilStopped(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1)
	submit := exec.Command(glintBin, "submit", "--master", c.master.url, "--every", "200ms", "--executor-memory", "256m", "--log-level", "warn", "pi", "2")
	if err := submit.Start(); err != nil {
		t.Fatal(err)
	}
	c.waitFor(t, "three runs finished", func(s masterJSON) bool { return len(s.CompletedApps) >= 3 })
	if err := submit.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := submit.Wait(); err != nil {
		t.Errorf("submit --every after SIGTERM: %v", err)
	}
	_, errOut, err := runGlint(t, "submit", "--master", c.master.url, "--every", "1s", "--executor-memory", "0", "pi")
	if exitCode(err) == 0 || !strings.Contains(errOut, "--executor-memory") {
		t.Errorf("bad flags with --every: exit %d %q", exitCode(err), errOut)
	}
}

func TestExecutorsAndDriversWhoseWorkerDiedBeforeTheyStartedExitAtOnce(t *testing.T) {
	t.Parallel()
	// The test process is their parent, not the worker they are told of.
	env := []string{"GLINT_WORKER_PID=" + strconv.Itoa(os.Getppid())}
	for _, args := range [][]string{
		{"executor", "--driver-url", "http://127.0.0.1:1", "--executor-id", "0", "--hostname", "127.0.0.1",
			"--cores", "1", "--app-id", "app-20261130120000-0001", "--worker-url", "http://127.0.0.1:1"},
		{"driver", "--driver-id", "driver-20261130120000-0001", "--master", "http://127.0.0.1:1", "pi"},
	} {
		_, stderr, err := glintWithEnv(t, env, args...)
		if exitCode(err) == 0 || !strings.Contains(stderr, "worker died before this process started") {
			t.Errorf("glint %s: exit %d, stderr %q; want it to exit at once naming its dead worker", args[0], exitCode(err), stderr)
		}
	}
}

func TestLosingAWorkerCostsTheJobNoTaskFailure(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 2, "--worker-timeout", "5s")
	// One executor on each worker, each holding one task; one attempt per task.
	release := filepath.Join(t.TempDir(), "release")
	wait := runInBackground(t, nil, "submit", "--master", c.master.url, "--executor-cores", "1",
		"--total-executor-cores", "2", "--executor-memory", "256m", "--conf", "spark.task.maxFailures=1",
		"--log-level", "warn", "hold", release, "2")
	running := func(s masterJSON) map[string]int {
		on := map[string]int{}
		for _, a := range s.ActiveApps {
			for _, e := range a.Executors {
				if e.State == "RUNNING" {
					on[e.Worker]++
				}
			}
		}
		return on
	}
	s := c.waitFor(t, "an executor running on each worker", func(s masterJSON) bool { return len(running(s)) == 2 })
	for _, g := range byRole(discover(t, c.master.url), "executor") {
		waitForSample(t, "http://"+g.Targets[0], "glint_executor_tasks_running", 1)
	}
	// The first worker dies with its executor and the task it held.
	lost := c.workers[0]
	var lostID string
	for id := range running(s) {
		// Worker ids end with the worker's port.
		if strings.HasSuffix(id, "-"+lost.url[strings.LastIndexByte(lost.url, ':')+1:]) {
			lostID = id
		}
	}
	if lostID == "" {
		t.Fatalf("no running executor on worker %s: %v", lost.url, running(s))
	}
	if err := syscall.Kill(lost.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.waitFor(t, "a replacement executor on the other worker", func(s masterJSON) bool {
		on := running(s)
		return s.alive() == 1 && on[lostID] == 0 && len(on) == 1 && sum(on) == 2
	})
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := wait(); err != nil {
		t.Fatalf("the job failed after losing a worker: %v", err)
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
