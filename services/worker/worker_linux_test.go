package worker

import (
	"errors"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
)

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER from <linux/prctl.h>.
const prSetChildSubreaper = 36

// becomeSubreaper makes orphaned descendants children of the test process
// until the test ends, so that it can reap them and see how they died.
func becomeSubreaper(t *testing.T) {
	t.Helper()
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		t.Skipf("the kernel refused prctl(PR_SET_CHILD_SUBREAPER), which this test needs to see the grandchild die: %v", errno)
	}
	t.Cleanup(func() { syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 0, 0) })
}

func TestRunEndingKillsGrandchildren(t *testing.T) {
	becomeSubreaper(t)
	c := startCluster(t, clusterConfig{worker: Config{KillGrace: 100 * time.Millisecond}})
	appID := c.registerApp(t, executorCommand(t, "spawn", 0), 1)
	c.waitMasterExecutor(t, appID, 0, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)
	out := waitFileContains(t, filepath.Join(c.worker.cfg.WorkDir, appID, "0", "stdout"), "grandchild ", "ready")
	m := regexp.MustCompile(`grandchild (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no grandchild pid in:\n%s", out)
	}
	grandchild, _ := strconv.Atoi(m[1])
	reaped := false
	t.Cleanup(func() {
		if !reaped {
			syscall.Kill(grandchild, syscall.SIGKILL)
			var ws syscall.WaitStatus
			syscall.Wait4(grandchild, &ws, 0, nil)
		}
	})

	if err := c.worker.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// The grandchild ignores SIGTERM and outlived its parent; the worker's
	// SIGKILL to the process group still reached it.
	var ws syscall.WaitStatus
	tooltest.Eventually(t, "the grandchild to die", func() bool {
		pid, err := syscall.Wait4(grandchild, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.ECHILD) {
			t.Fatalf("grandchild %d was not re-parented to the test", grandchild)
		}
		return pid == grandchild
	})
	reaped = true
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("grandchild ended %v, want killed by SIGKILL", ws)
	}
}
