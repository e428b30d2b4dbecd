package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/glint-cluster/glint/internal/etcdtest"
	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	workerv1 "github.com/glint-cluster/glint/pkg/api/glint/worker/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/worker/v1/workerv1connect"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// leaderOf returns the master among urls whose /json says status, and what
// it says; "" when none does.
func leaderOf(t testing.TB, urls []string, status string) (string, masterJSON) {
	t.Helper()
	for _, u := range urls {
		c := &testCluster{master: &proc{url: u}}
		resp, err := getPageOrErr(u + "/json")
		if err != nil {
			continue
		}
		resp.Body.Close()
		if s := c.state(t); s.Status == status {
			return u, s
		}
	}
	return "", masterJSON{}
}

func getPageOrErr(url string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	client := &http.Client{Timeout: 2 * time.Second}
	return client.Do(req)
}

// TestMastersOnEtcdFailOverAndADeposedLeaderIsFenced: three masters on a
// real etcd elect one leader; two workers and an application follow it. The
// leader is paused (SIGSTOP): a standby is elected, recovers the state from
// etcd, adopts the running executors (the same processes) and leads; a
// submission made meanwhile is retried by its client and lands once. The
// deposed leader's epoch is refused by the workers; resumed (SIGCONT), it
// notices it lost the lease and steps down. Both applications finish.
func TestMastersOnEtcdFailOverAndADeposedLeaderIsFenced(t *testing.T) {
	t.Parallel()
	endpoint := etcdtest.Start(t)
	ports := tooltest.FreePorts(t, 3)
	var urls []string
	var masters []*proc
	for i, port := range ports {
		m := start(t, fmt.Sprintf("master-%d", i), nil, "master", "--listen", fmt.Sprintf("127.0.0.1:%d", port),
			"--worker-timeout", "6s", "--recovery-mode", "etcd", "--etcd-endpoints", endpoint, "--etcd-lease-ttl", "2s")
		masters = append(masters, m)
		urls = append(urls, m.url)
	}
	all := strings.Join(urls, ",")
	var leader string
	var before masterJSON
	waitUntil(t, "one master elected", func() bool { leader, before = leaderOf(t, urls, "ALIVE"); return leader != "" })
	for _, u := range urls {
		if u == leader {
			continue
		}
		c := &testCluster{master: &proc{url: u}}
		if s := c.state(t); s.Status != "STANDBY" {
			t.Fatalf("master %s is %s beside leader %s, want STANDBY", u, s.Status, leader)
		}
		if code := readyz(t, u); code != http.StatusServiceUnavailable {
			t.Fatalf("standby %s: /readyz %d, want 503 (not the one a Service routes to)", u, code)
		}
	}
	if code := readyz(t, leader); code != http.StatusOK {
		t.Fatalf("leader %s: /readyz %d, want 200", leader, code)
	}
	oldEpoch := before.Epoch
	c := &testCluster{master: &proc{url: leader}}
	for i := range 2 {
		dir := t.TempDir()
		c.workers = append(c.workers, start(t, fmt.Sprintf("worker-%d", i), nil, "worker", "--master", all,
			"--listen", "127.0.0.1:0", "--cores", "2", "--memory", "2g", "--work-dir", dir,
			"--register-interval", "200ms", "--kill-grace", "2s"))
	}
	c.waitFor(t, "workers alive", func(s masterJSON) bool { return s.alive() == 2 })
	twins := watchForTwins(t, c.workers...)
	release := filepath.Join(t.TempDir(), "release")
	first := runInBackground(t, nil, "submit", "--master", all, "--name", "before-failover", "--executor-cores", "1",
		"--total-executor-cores", "2", "--executor-memory", "256m", "--conf", "spark.task.maxFailures=1",
		"--log-level", "warn", "hold", release, "2")
	c.waitFor(t, "two executors running", func(s masterJSON) bool { return len(runningExecutors(s)) == 2 })
	shape := clusterShapeOf(c.state(t))
	pids := map[string]int{}
	for _, p := range executorProcesses(c.workers...) {
		pids[p.key] = p.pid
	}

	var deposed *proc
	for _, m := range masters {
		if m.url == leader {
			deposed = m
		}
	}
	if err := syscall.Kill(deposed.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	// A submission while no master leads: its client tries the masters in
	// turn (the paused one last) until one takes it.
	others := slices.DeleteFunc(slices.Clone(urls), func(u string) bool { return u == leader })
	second := runInBackground(t, nil, "submit", "--master", strings.Join(append(others, leader), ","), "--name", "during-failover",
		"--executor-cores", "1", "--total-executor-cores", "1", "--executor-memory", "256m", "--log-level", "warn", "hold", release, "1")

	var next string
	var elected time.Duration
	waitUntil(t, "a standby elected", func() bool {
		next, _ = leaderOf(t, others, "RECOVERING")
		if next == "" {
			next, _ = leaderOf(t, others, "ALIVE")
		}
		elected = time.Since(paused)
		return next != ""
	})
	c.master = &proc{url: next}
	after := c.waitFor(t, "the new leader ALIVE with the state the old one had", func(s masterJSON) bool {
		return s.Status == "ALIVE" && s.alive() == 2 && containsAll(clusterShapeOf(s).Apps, shape.Apps)
	})
	t.Logf("leader paused → standby elected in %s (lease TTL 2s); → ALIVE in %s; epoch %d → %d",
		elected.Round(time.Millisecond), time.Since(paused).Round(time.Millisecond), oldEpoch, after.Epoch)
	if after.Epoch <= oldEpoch {
		t.Fatalf("new leader's epoch %d, want more than the old %d", after.Epoch, oldEpoch)
	}
	// A client given every master finds the leader (the paused one first).
	out, errOut, err := runGlint(t, "status", "--master", strings.Join(append([]string{leader}, others...), ","))
	if want := fmt.Sprintf("Master %s (ALIVE, epoch %d)", next, after.Epoch); err != nil || !strings.Contains(out, want) {
		t.Fatalf("glint status over all masters: %v\n%s%s\nwant %q", err, out, errOut, want)
	}
	for key, pid := range pids {
		if !processAlive(pid) {
			t.Fatalf("executor %s (pid %d) did not survive the failover", key, pid)
		}
	}

	// What the deposed leader would send the workers now is refused.
	for i, w := range c.workers {
		client := workerv1connect.NewWorkerServiceClient(rpc.NewHTTPClient(), w.url, rpc.ClientOptions(nil, testToken)...)
		_, err := client.LaunchExecutor(context.Background(), connect.NewRequest(&workerv1.LaunchExecutorRequest{
			MasterUrl: leader, Epoch: oldEpoch, AppId: "app-20261130120000-0999", ExecutorId: 0, Cores: 1, MemoryMib: 64,
			Description: &masterv1.ApplicationDescription{Name: "deposed", Command: &masterv1.Command{Args: []string{"/bin/true"}}},
		}))
		if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "deposed") {
			t.Fatalf("worker %d took a launch of the deposed epoch %d: %v", i, oldEpoch, err)
		}
	}
	if err := syscall.Kill(deposed.cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-deposed.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the resumed deposed leader did not step down\n%s", readFile(deposed.log))
	}
	if log := readFile(deposed.log); !strings.Contains(log, "lost the leadership") {
		t.Fatalf("the deposed leader exited without saying it lost the leadership:\n%s", log)
	}

	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	final := c.waitFor(t, "both applications completed", func(s masterJSON) bool { return len(s.CompletedApps) == 2 })
	for name, wait := range map[string]func() (string, error){"before-failover": first, "during-failover": second} {
		if _, err := wait(); err != nil {
			t.Fatalf("application %s: %v", name, err)
		}
	}
	names := map[string]int{}
	for _, a := range final.CompletedApps {
		names[a.Name]++
	}
	if names["before-failover"] != 1 || names["during-failover"] != 1 {
		t.Fatalf("completed applications by name %v, want each once", names)
	}
	if tw := twins(); len(tw) > 0 {
		t.Fatalf("two live executors with one id: %v", tw)
	}
}

// containsAll reports whether every one of want is in got.
func containsAll(got, want []string) bool {
	for _, w := range want {
		if !slices.Contains(got, w) {
			return false
		}
	}
	return true
}

// readyz is the status code of a master's GET /readyz (no token: it is public).
func readyz(t testing.TB, master string) int {
	t.Helper()
	resp, err := http.Get(master + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
