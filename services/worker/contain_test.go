package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/telemetry"
)

// allocBytes is what an alloc child touches: more than the 64 MiB the
// tests' executors are granted, with the overhead (128 MiB in all).
const allocBytes = 256 << 20

// testCgroup is a worker cgroup of the test's own.
func testCgroup(t *testing.T) string {
	return fmt.Sprintf("glint-test/%s-%d", t.Name(), os.Getpid())
}

// cgroupOf is the path of process pid's cgroup: its memory controller's
// on v1, its unified one on v2.
func cgroupOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	unified := ""
	for line := range strings.Lines(string(b)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		switch {
		case len(parts) < 3:
		case parts[1] == "memory":
			return parts[2]
		case parts[1] == "":
			unified = parts[2]
		}
	}
	return unified
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
		t.Skip("starts processes")
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
	if got, want := cgroupOf(t, e.PID), cg+"/executor-"+appID+"-0"; got != want {
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
	eventually(t, "the driver running", func() bool {
		for _, d := range w.fetchJSON(t).Drivers {
			if d.ID == id && d.PID != 0 {
				pid = d.PID
			}
		}
		return pid != 0
	})
	if got, want := cgroupOf(t, pid), cg+"/"+id; got != want {
		t.Errorf("driver in cgroup %s, want %s", got, want)
	}
	if err := w.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	assertNoCgroup(t, cg)
}

// An executor that allocates past its memory limit is killed by the kernel
// and ends FAILED with "out of memory" and its limit in its message, at the
// worker and at the master.
func TestAContainedExecutorOverItsMemoryEndsOutOfMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c := startCluster(t, clusterConfig{worker: Config{Cgroup: testCgroup(t)}})
	appID := c.registerApp(t, executorCommand(t, "alloc", 0), 1)
	e := c.worker.waitFinishedExecutor(t, appID, 0)
	const want = "out of memory: killed at its memory limit of 128.0 MiB"
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
		t.Skip("starts processes")
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
	eventually(t, "the executor to spin", func() bool { start = cpu(); return start > 0.1 })
	began := time.Now()
	var used float64
	eventually(t, "the executor to use 2 s of CPU", func() bool { used = cpu() - start; return used >= 2 })
	took := time.Since(began)
	t.Logf("used %.2f s of CPU in %v: %.2f cores", used, took, used/took.Seconds())
	if cores := used / took.Seconds(); cores > 1.1 {
		t.Errorf("the executor used %.2f cores, want at most 1.1", cores)
	}
}

// Without a cgroup hierarchy it can write, a worker says so once, shows
// contained: false, and runs its executors unconfined.
func TestAWorkerWithoutACgroupHierarchyRunsUnconfined(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
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
