package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/glint-cluster/glint/internal/tooltest"
)

// clusterShape is what /json says of workers and active applications, in a
// form two states can be compared by.
type clusterShape struct {
	Workers []string
	Apps    []string
}

func clusterShapeOf(s masterJSON) clusterShape {
	var out clusterShape
	for _, w := range s.Workers {
		out.Workers = append(out.Workers, w.ID+" "+w.State+fmt.Sprintf(" %d cores used", w.CoresUsed))
	}
	for _, a := range s.ActiveApps {
		for _, e := range a.Executors {
			out.Apps = append(out.Apps, fmt.Sprintf("%s %s executor %d %s on %s", a.ID, a.State, e.ID, e.State, e.Worker))
		}
	}
	slices.Sort(out.Workers)
	slices.Sort(out.Apps)
	return out
}

// fileRecoveryCluster starts a master in --recovery-mode file with a 6 s
// worker timeout, on a port of its own so that a restart with the returned
// arguments comes back where its workers and clients look for it, and
// workers of cores cores each.
func fileRecoveryCluster(t *testing.T, workers, cores int) (*testCluster, []string) {
	t.Helper()
	port := tooltest.FreePorts(t, 1)[0]
	args := []string{"master", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--worker-timeout", "6s",
		"--recovery-mode", "file", "--recovery-dir", filepath.Join(t.TempDir(), "recovery")}
	c := &testCluster{master: start(t, "master", nil, args...)}
	if workers > 0 {
		c.startWorkers(t, nil, workers, cores)
	}
	return c, args
}

// killMaster kills the cluster's master (SIGKILL) and reaps it.
func (c *testCluster) killMaster(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(c.master.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-c.master.done
}

// TestAKilledMasterRecoversFromItsFileAndKeepsTheRunningExecutors: a master
// in --recovery-mode file is killed (SIGKILL) while two applications hold
// executors on two workers; restarted on the same address, it recovers:
// /json shows what it showed before, the executors are the same processes
// (none relaunched, no two with one id), and the applications finish.
func TestAKilledMasterRecoversFromItsFileAndKeepsTheRunningExecutors(t *testing.T) {
	t.Parallel()
	c, args := fileRecoveryCluster(t, 2, 2)
	twins := watchForTwins(t, c.workers...)

	releases := []string{filepath.Join(t.TempDir(), "release-a"), filepath.Join(t.TempDir(), "release-b")}
	var waits []func() (string, error)
	for _, release := range releases {
		waits = append(waits, runInBackground(t, nil, "submit", "--master", c.master.url, "--executor-cores", "1",
			"--total-executor-cores", "2", "--executor-memory", "256m", "--log-level", "warn", "hold", release, "2"))
	}
	c.waitFor(t, "four executors running", func(s masterJSON) bool { return len(runningExecutors(s)) == 4 })
	for _, g := range byRole(discover(t, c.master.url), "executor") {
		waitForSample(t, "http://"+g.Targets[0], "glint_executor_tasks_running", 1)
	}
	before := clusterShapeOf(c.state(t))
	pids := map[string]int{}
	for _, p := range executorProcesses(c.workers...) {
		pids[p.key] = p.pid
	}

	c.killMaster(t)
	c.master = start(t, "master-restarted", nil, args...)
	after := c.waitFor(t, "the master ALIVE with the state it had", func(s masterJSON) bool {
		return s.Status == "ALIVE" && reflect.DeepEqual(clusterShapeOf(s), before)
	})
	t.Logf("recovered: %v", clusterShapeOf(after))
	now := map[string]int{}
	for _, p := range executorProcesses(c.workers...) {
		now[p.key] = p.pid
	}
	if !reflect.DeepEqual(now, pids) {
		t.Fatalf("executor processes before the kill %v, after the recovery %v: want the same", pids, now)
	}

	for i, release := range releases {
		if err := os.WriteFile(release, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := waits[i]()
		if err != nil {
			t.Fatalf("application %d after the master's recovery: %v", i, err)
		}
		if !strings.Contains(out, "Held 2 tasks until") {
			t.Fatalf("application %d output:\n%s", i, out)
		}
	}
	if tw := twins(); len(tw) > 0 {
		t.Fatalf("two live executors with one id: %v", tw)
	}
}

// TestAMasterWokenFromAPauseKeepsItsWorkers: a master stopped (SIGSTOP) for
// longer than its worker timeout hears no heartbeat meanwhile; woken, it does
// not take its workers, which heartbeated all along, for lost.
func TestAMasterWokenFromAPauseKeepsItsWorkers(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 2, "--worker-timeout", "2s")
	if err := syscall.Kill(c.master.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the injected fault: a pause past the worker timeout
	if err := syscall.Kill(c.master.cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	woke := time.Now()
	c.waitFor(t, "every worker heard from after the master woke", func(s masterJSON) bool {
		for _, w := range s.Workers {
			if time.UnixMilli(w.LastHeartbeat).Before(woke) {
				return false
			}
		}
		return len(s.Workers) == 2
	})
	if s := c.state(t); s.alive() != 2 || strings.Contains(readFile(c.master.log), `"removing worker"`) {
		t.Fatalf("workers after the master's pause: %+v; want both ALIVE, never removed\n%s", s.Workers, readFile(c.master.log))
	}
}
