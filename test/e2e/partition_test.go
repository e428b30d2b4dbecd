package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/glint-cluster/glint/internal/faultproxy"
	"github.com/glint-cluster/glint/internal/tooltest"
)

// executorProcess is a live executor process found in /proc.
type executorProcess struct {
	pid       int
	key       string // app/executor id
	workerURL string
}

// executorProcesses lists the live executor processes of workers, from
// their environment. Other tests' masters may name their applications alike:
// only the executors of a test's own workers are its own.
func executorProcesses(workers ...*proc) []executorProcess {
	ours := map[string]bool{}
	for _, w := range workers {
		ours[w.url] = true
	}
	var out []executorProcess
	for _, pid := range glintProcesses() {
		env, err := os.ReadFile(filepath.Join("/proc", fmt.Sprint(pid), "environ"))
		if err != nil {
			continue
		}
		vars := map[string]string{}
		for kv := range bytes.SplitSeq(env, []byte{0}) {
			if k, v, ok := strings.Cut(string(kv), "="); ok {
				vars[k] = v
			}
		}
		if vars["GLINT_APP_ID"] != "" && vars["GLINT_EXECUTOR_ID"] != "" && ours[vars["GLINT_WORKER_URL"]] {
			out = append(out, executorProcess{pid: pid, key: vars["GLINT_APP_ID"] + "/" + vars["GLINT_EXECUTOR_ID"], workerURL: vars["GLINT_WORKER_URL"]})
		}
	}
	return out
}

// processesWithEnv lists the live processes of the test's glint binary with
// kv in their environment.
func processesWithEnv(kv string) []int {
	var out []int
	for _, pid := range glintProcesses() {
		env, err := os.ReadFile(filepath.Join("/proc", fmt.Sprint(pid), "environ"))
		if err == nil && slices.ContainsFunc(bytes.Split(env, []byte{0}), func(e []byte) bool { return string(e) == kv }) {
			out = append(out, pid)
		}
	}
	return out
}

// watchForTwins scans the processes until the test ends and records every
// moment two live executors of workers share an application and executor id.
func watchForTwins(t *testing.T, workers ...*proc) (twins func() []string) {
	var mu sync.Mutex
	var seen []string
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			byKey := map[string][]int{}
			for _, p := range executorProcesses(workers...) {
				byKey[p.key] = append(byKey[p.key], p.pid)
			}
			for key, pids := range byKey {
				if len(pids) > 1 {
					mu.Lock()
					seen = append(seen, fmt.Sprintf("%s in pids %v", key, pids))
					mu.Unlock()
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// TestAPartitionedWorkerIsReplacedAndKillsWhatWasReplacedWhenItHeals cuts a
// worker off from the master with a TCP proxy in the middle of a job: the
// master declares it dead after the timeout and places its work elsewhere;
// when the partition heals, the worker registers again and kills the
// executor that was replaced. The proxy carries the worker's calls to the
// master (registration, heartbeats, reports), which is what the master
// judges a worker by; the master does not call a worker it declared dead.
func TestAPartitionedWorkerIsReplacedAndKillsWhatWasReplacedWhenItHeals(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1, "--worker-timeout", "4s")
	proxy := faultproxy.New(t, strings.TrimPrefix(c.master.url, "http://"))
	dir := t.TempDir()
	cutOff := start(t, "worker-cut", nil, "worker", "--master", proxy.URL,
		"--listen", "127.0.0.1:0", "--cores", "2", "--memory", "2g", "--work-dir", dir,
		"--register-interval", "200ms", "--kill-grace", "2s")
	c.waitFor(t, "both workers alive", func(s masterJSON) bool { return s.alive() == 2 })
	twins := watchForTwins(t, append(c.workers, cutOff)...)

	// One executor on each worker, each holding one task; one attempt per task.
	release := filepath.Join(t.TempDir(), "release")
	wait := runInBackground(t, nil, "submit", "--master", c.master.url, "--executor-cores", "1",
		"--total-executor-cores", "2", "--executor-memory", "256m", "--conf", "spark.task.maxFailures=1",
		"--log-level", "warn", "hold", release, "2")
	c.waitFor(t, "two executors running", func(s masterJSON) bool { return len(runningExecutors(s)) == 2 })
	for _, g := range byRole(discover(t, c.master.url), "executor") {
		waitForSample(t, "http://"+g.Targets[0], "glint_executor_tasks_running", 1)
	}
	var replaced executorProcess
	for _, p := range executorProcesses(cutOff) {
		replaced = p
	}
	if replaced.pid == 0 {
		t.Fatal("no executor process of the worker behind the proxy")
	}

	proxy.Cut()
	cut := time.Now()
	c.waitFor(t, "the cut-off worker dead and its executor replaced on the other", func(s masterJSON) bool {
		on := runningExecutors(s)
		return s.alive() == 1 && len(on) == 2 && !on[replaced.key]
	})
	t.Logf("cut → worker declared dead and its executor replaced: %s (worker timeout 4s)", time.Since(cut).Round(time.Millisecond))
	if !tooltest.Alive(replaced.pid) {
		t.Fatalf("the cut-off worker's executor %s ended while cut off; the test wants it alive until the partition heals", replaced.key)
	}

	proxy.Heal()
	c.waitFor(t, "the worker registered again", func(s masterJSON) bool { return s.alive() == 2 })
	waitUntil(t, "the replaced executor killed by its worker", func() bool { return !tooltest.Alive(replaced.pid) })

	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := wait()
	if err != nil {
		t.Fatalf("the job failed across a partition: %v", err)
	}
	if !strings.Contains(out, "Held 2 tasks until") {
		t.Fatalf("job output:\n%s", out)
	}
	if tw := twins(); len(tw) > 0 {
		t.Fatalf("two live executors with one id: %v", tw)
	}
}

// runningExecutors are the RUNNING executors of the active applications, as
// app/id.
func runningExecutors(s masterJSON) map[string]bool {
	on := map[string]bool{}
	for _, a := range s.ActiveApps {
		for _, e := range a.Executors {
			if e.State == "RUNNING" {
				on[fmt.Sprintf("%s/%d", a.ID, e.ID)] = true
			}
		}
	}
	return on
}

// waitUntil polls cond until it holds, failing after two minutes: the
// processes these tests start answer slowly when many tests run at once.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tooltest.EventuallyWithin(t, 2*time.Minute, what, cond)
}
