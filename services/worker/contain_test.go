package worker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry"
	"github.com/glint-cluster/glint/services/master"
)

// allocBytes is what an alloc child touches: more than the 64 MiB the
// tests' executors are granted, with the overhead (128 MiB in all).
const allocBytes = 256 << 20

// cachedBytes is what a cache child writes to a file.
const cachedBytes = 48 << 20

// testCgroup is a worker cgroup of the test's own.
func testCgroup(t *testing.T) string {
	return fmt.Sprintf("glint-test-%s-%d", strings.ReplaceAll(t.Name(), "/", "_"), os.Getpid())
}

// assertNoCgroup fails the test if the cgroup path is in any hierarchy
// under /sys/fs/cgroup.
func assertNoCgroup(t *testing.T, path string) {
	t.Helper()
	dirs := []string{filepath.Join("/sys/fs/cgroup", path)}
	for _, c := range []string{"cpu", "cpuacct", "memory", "pids"} {
		dirs = append(dirs, filepath.Join("/sys/fs/cgroup", c, path))
	}
	for _, dir := range dirs {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s is left (%v)", dir, err)
		}
	}
}

// A contained worker runs each executor and cluster-mode driver in a cgroup
// of its own under the worker's, says so in /json, and removes every
// cgroup it made when it stops.
func TestAContainedWorkerRunsEachProcessInItsCgroupAndLeavesNone(t *testing.T) {
	if testing.Short() {
		t.Skip("-short is the fast loop (make test-short): this starts real processes in cgroups; make test runs it")
	}
	cg := "/" + testCgroup(t)
	c := startCluster(t, clusterConfig{runMaster: true, worker: Config{Cgroup: testCgroup(t)}})
	w := c.worker
	if st := w.fetchJSON(t); !st.Contained || st.Cgroup != cg {
		t.Fatalf("/json contained %v, cgroup %q; want true, %q", st.Contained, st.Cgroup, cg)
	}
	appID := c.registerApp(t, executorCommand(t, "hold", 0), 1)
	c.waitMasterExecutor(t, appID, 0, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)
	e, _ := w.executor(t, appID, 0)
	if got, want := tooltest.CgroupOf(t, e.PID), cg+"/executor-"+appID+"-0"; got != want {
		t.Errorf("executor in cgroup %s, want %s", got, want)
	}
	resp, err := c.master.SubmitDriver(context.Background(), connect.NewRequest(&masterv1.SubmitDriverRequest{
		Description: &masterv1.DriverDescription{Name: "worker-test-driver", Cores: 1, MemoryMib: 64, Command: driverCommand(t, "hold")},
	}))
	if err != nil {
		t.Fatalf("submit driver: %v", err)
	}
	id := resp.Msg.GetDriverId()
	var pid int
	tooltest.Eventually(t, "the driver running", func() bool {
		for _, d := range w.fetchJSON(t).Drivers {
			if d.ID == id && d.PID != 0 {
				pid = d.PID
			}
		}
		return pid != 0
	})
	if got, want := tooltest.CgroupOf(t, pid), cg+"/"+id; got != want {
		t.Errorf("driver in cgroup %s, want %s", got, want)
	}
	if err := w.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	assertNoCgroup(t, cg)
}

// An executor that allocates past its memory limit is killed by the kernel
// and ends FAILED with its limit and peak in its message, at the worker and
// at the master.
func TestAContainedExecutorOverItsMemoryEndsOutOfMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("-short is the fast loop (make test-short): this starts real processes in cgroups; make test runs it")
	}
	c := startCluster(t, clusterConfig{worker: Config{Cgroup: testCgroup(t)}})
	appID := c.registerApp(t, executorCommand(t, "alloc", 0), 1)
	e := c.worker.waitFinishedExecutor(t, appID, 0)
	const want = "killed: memory limit 128.0 MiB exceeded (peak "
	if e.State != "FAILED" || !strings.HasPrefix(e.Message, want) || !strings.Contains(e.Message, "signal 9") {
		t.Errorf("executor ended %s %q, want FAILED %q…killed by signal 9", e.State, e.Message, want)
	}
	if m := c.waitMasterExecutor(t, appID, 0, masterv1.ExecutorState_EXECUTOR_STATE_FAILED).GetMessage(); !strings.HasPrefix(m, want) {
		t.Errorf("the master's message %q, want %q…", m, want)
	}
}

// An executor granted one core uses at most one, however many threads
// spin in it: the CPU the worker measures grows no faster than 1.1 s a
// second.
func TestAContainedExecutorUsesAtMostItsCores(t *testing.T) {
	if testing.Short() {
		t.Skip("-short is the fast loop (make test-short): this starts real processes in cgroups; make test runs it")
	}
	c := startCluster(t, clusterConfig{worker: Config{Cgroup: testCgroup(t), UsageInterval: 20 * time.Millisecond}})
	w := c.worker
	cmd := executorCommand(t, "spin", 0)
	cmd.Env["GOMAXPROCS"] = "4"
	appID := c.registerApp(t, cmd, 1)
	c.waitMasterExecutor(t, appID, 0, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)
	t.Cleanup(func() {
		if err := os.WriteFile(filepath.Join(w.cfg.WorkDir, appID, "0", "release"), nil, 0o600); err != nil {
			t.Error(err)
		}
	})
	cpu := func() float64 {
		e, _ := w.executor(t, appID, 0)
		return e.CPUSeconds
	}
	var start float64
	tooltest.Eventually(t, "the executor to spin", func() bool { start = cpu(); return start > 0.1 })
	began := time.Now()
	var used float64
	tooltest.Eventually(t, "the executor to use 2 s of CPU", func() bool { used = cpu() - start; return used >= 2 })
	took := time.Since(began)
	t.Logf("used %.2f s of CPU in %v: %.2f cores", used, took, used/took.Seconds())
	if cores := used / took.Seconds(); cores > 1.1 {
		t.Errorf("the executor used %.2f cores, want at most 1.1", cores)
	}
}

// A contained executor's usage is its cgroup's, what its limit applies to:
// the file it wrote counts as memory while its pages stay cached, as no
// process's resident memory shows it.
func TestAContainedExecutorsUsageIsItsCgroups(t *testing.T) {
	if testing.Short() {
		t.Skip("-short is the fast loop (make test-short): this starts real processes in cgroups; make test runs it")
	}
	c := startCluster(t, clusterConfig{worker: Config{Cgroup: testCgroup(t), UsageInterval: 20 * time.Millisecond}})
	w := c.worker
	appID := c.registerApp(t, executorCommand(t, "cache", 0), 1)
	dir := filepath.Join(w.cfg.WorkDir, appID, "0")
	t.Cleanup(func() {
		if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o600); err != nil {
			t.Error(err)
		}
	})
	waitFileContains(t, filepath.Join(dir, "stdout"), "cached")
	tooltest.Eventually(t, "the executor's memory counting the file it wrote", func() bool {
		e, _ := w.executor(t, appID, 0)
		return e.MemoryBytes >= cachedBytes && e.PeakBytes >= e.MemoryBytes && e.CPUSeconds > 0
	})
}

// Without a cgroup hierarchy it can write, a worker says so once, shows
// contained: false, and runs its executors unconfined.
func TestAWorkerWithoutACgroupHierarchyRunsUnconfined(t *testing.T) {
	if testing.Short() {
		t.Skip("-short is the fast loop (make test-short): this starts real processes in cgroups; make test runs it")
	}
	logs := &syncBuffer{}
	c := startCluster(t, clusterConfig{worker: Config{
		Cgroup: testCgroup(t), CgroupRoot: t.TempDir(),
		Instruments: telemetry.Instruments{Logger: slog.New(slog.NewTextHandler(logs, nil))},
	}})
	if st := c.worker.fetchJSON(t); st.Contained || st.Cgroup != "" {
		t.Errorf("/json contained %v, cgroup %q; want false and none", st.Contained, st.Cgroup)
	}
	appID := c.registerApp(t, executorCommand(t, "exit", 0), 2)
	for id := range int32(2) {
		if e := c.worker.waitFinishedExecutor(t, appID, id); e.State != "EXITED" {
			t.Errorf("executor %d ended %s %q, want EXITED", id, e.State, e.Message)
		}
	}
	if n := strings.Count(logs.String(), "run unconfined"); n != 1 {
		t.Errorf("%d log lines say the worker runs unconfined, want 1:\n%s", n, logs)
	}
}

// workerChild is the worker mode of runChild: a worker of the master
// $GLINT_WORKER_TEST_MASTER on the work dir $GLINT_WORKER_TEST_WORK_DIR
// in the cgroup $GLINT_WORKER_TEST_CGROUP. It prints "worker URL" once it
// serves, and runs until it is killed.
func workerChild() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return 2
	}
	url := "http://" + ln.Addr().String()
	w, err := New(Config{
		Masters: []string{os.Getenv("GLINT_WORKER_TEST_MASTER")}, URL: url, Cores: 4, MemoryMiB: 4096,
		WorkDir: os.Getenv("GLINT_WORKER_TEST_WORK_DIR"), Cgroup: os.Getenv("GLINT_WORKER_TEST_CGROUP"),
		RegisterInterval: 100 * time.Millisecond,
	})
	if err != nil {
		fmt.Println(err)
		return 2
	}
	go func() { _ = rpc.Serve(context.Background(), ln, w.Handler()) }()
	fmt.Println("worker " + url)
	if err := w.Run(context.Background()); err != nil {
		fmt.Println(err)
		return 2
	}
	return 0
}

// A worker SIGKILLed with an executor that outlives it (it ignores the
// SIGTERM its worker's death sends) leaves its cgroups; the next worker on
// the same work dir kills that executor and removes them at start, and
// removes its own when it stops.
func TestAWorkerRestartedAfterSIGKILLRemovesTheCgroupsLeft(t *testing.T) {
	if testing.Short() {
		t.Skip("-short is the fast loop (make test-short): this starts real processes in cgroups; make test runs it")
	}
	url := startMaster(t, master.Config{}, false)
	c := &cluster{masterURL: url, master: newMasterClient(t, url), driverURL: startDriverStub(t)}
	cg, dir := testCgroup(t), t.TempDir()
	killed := exec.Command(testBinary(t))
	killed.Env = append(os.Environ(), childModeEnv+"=worker", "GLINT_WORKER_TEST_MASTER="+url,
		"GLINT_WORKER_TEST_WORK_DIR="+dir, "GLINT_WORKER_TEST_CGROUP="+cg)
	out, err := killed.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := killed.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		killed.Process.Kill()
		killed.Wait()
	})
	// After the lines every child prints (runChild).
	r := bufio.NewReader(out)
	line, err := r.ReadString('\n')
	for err == nil && !strings.HasPrefix(line, "worker ") {
		line, err = r.ReadString('\n')
	}
	if err != nil {
		t.Fatalf("the worker child did not say it serves: %v", err)
	}
	first := &testWorker{url: strings.TrimSpace(strings.TrimPrefix(line, "worker "))}
	appID := c.registerApp(t, executorCommand(t, "ignore-term", 0), 1)
	c.waitMasterExecutor(t, appID, 0, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)
	waitFileContains(t, filepath.Join(dir, appID, "0", "stdout"), "ready")
	e, _ := first.executor(t, appID, 0)
	t.Cleanup(func() { syscall.Kill(e.PID, syscall.SIGKILL) })

	if err := killed.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed.Wait()
	if tooltest.CgroupOf(t, e.PID) != "/"+cg+"/executor-"+appID+"-0" {
		t.Fatalf("the executor of the killed worker is in cgroup %s, want its own", tooltest.CgroupOf(t, e.PID))
	}

	second := startWorker(t, Config{Cgroup: cg, WorkDir: dir}, url)
	tooltest.Eventually(t, "the left executor to die", func() bool { return !tooltest.Alive(e.PID) })
	assertNoCgroup(t, "/"+cg+"/executor-"+appID+"-0")
	if err := second.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	assertNoCgroup(t, "/"+cg)
}
