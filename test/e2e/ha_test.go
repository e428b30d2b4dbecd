package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

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
		if !tooltest.Alive(pid) {
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

// haMaster is a master on etcd with a port of its own, so that it can be
// started again there (as its supervisor would) after it was killed.
type haMaster struct {
	*proc
	name string
	args []string
}

// startHAMasters starts n masters on the etcd at endpoint, with a lease TTL
// of 2 s and extra flags.
func startHAMasters(t *testing.T, endpoint string, n int, extra ...string) []*haMaster {
	t.Helper()
	var masters []*haMaster
	for i, port := range tooltest.FreePorts(t, n) {
		m := &haMaster{name: fmt.Sprintf("master-%d", i), args: append([]string{"master", "--listen", fmt.Sprintf("127.0.0.1:%d", port),
			"--recovery-mode", "etcd", "--etcd-endpoints", endpoint, "--etcd-lease-ttl", "2s"}, extra...)}
		m.proc = start(t, m.name, nil, m.args...)
		masters = append(masters, m)
	}
	return masters
}

// restart starts the master again, on its port, once it exited.
func (m *haMaster) restart(t *testing.T) {
	t.Helper()
	<-m.done
	m.proc = start(t, m.name+"-restarted", nil, m.args...)
}

// electedOf waits until one of masters is ALIVE and returns it and the others.
func electedOf(t *testing.T, masters []*haMaster) (*haMaster, []*haMaster) {
	t.Helper()
	var urls []string
	for _, m := range masters {
		urls = append(urls, m.url)
	}
	var leader string
	waitUntil(t, "a master elected and ALIVE", func() bool { leader, _ = leaderOf(t, urls, "ALIVE"); return leader != "" })
	var elected *haMaster
	var others []*haMaster
	for _, m := range masters {
		if m.url == leader {
			elected = m
		} else {
			others = append(others, m)
		}
	}
	return elected, others
}

// statusOf is a master's status as its /json says it.
func statusOf(url string) (string, error) {
	resp, err := getPageOrErr(url + "/json")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var s masterJSON
	err = json.NewDecoder(resp.Body).Decode(&s)
	return s.Status, err
}

// pause stops a process (SIGSTOP) and makes sure it runs again before the
// test ends, so that it can be stopped; resume is SIGCONT.
func pause(t *testing.T, pid int) (resume func()) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resume = func() {
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Error(err)
		}
	}
	t.Cleanup(resume)
	return resume
}

// rawConn is an HTTP/1.1 connection to a master on which the test writes
// requests and reads answers by hand: the kernel takes both (the connection
// into the listen queue, the request into the socket's buffer) while the
// master is stopped, and they wait there for it.
type rawConn struct {
	conn net.Conn
	in   *bufio.Reader
	host string
}

func dialRaw(t *testing.T, base string) *rawConn {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rawConn{conn: conn, in: bufio.NewReader(conn), host: u.Host}
}

// send writes GET path, with the test's token.
func (c *rawConn) send(t *testing.T, path string) {
	t.Helper()
	if _, err := fmt.Fprintf(c.conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", path, c.host, testToken); err != nil {
		t.Fatal(err)
	}
}

// read reads the next answer.
func (c *rawConn) read() (int, string, error) {
	if err := c.conn.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(c.in, nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// answersAsLeader reports whether a master's answer to GET path says it
// leads: /readyz 200, /json ALIVE.
func answersAsLeader(path string, code int, body string) bool {
	if path == "/readyz" {
		return code == http.StatusOK
	}
	var s masterJSON
	return json.Unmarshal([]byte(body), &s) == nil && s.Status == "ALIVE"
}

// A leader stopped (SIGSTOP) past its lease while another was elected, then
// woken (SIGCONT): from the first request it answers after it woke — those
// that waited in its listen queue meanwhile included — to its exit, it
// never says it leads. Its /readyz and /json are polled as fast as they
// answer from the instant of SIGCONT.
func TestAWokenDeposedLeaderNeverAnswersAsTheLeader(t *testing.T) {
	t.Parallel()
	masters := startHAMasters(t, etcdtest.Start(t), 2)
	old, others := electedOf(t, masters)
	next := others[0]
	// Requests sent while it is stopped wait for it: on connections it had
	// taken (idle between requests) and on new ones, in its listen queue.
	paths := []string{"/readyz", "/json"}
	var conns []*rawConn
	for range 16 {
		c := dialRaw(t, old.url)
		c.send(t, "/readyz")
		if code, body, err := c.read(); err != nil || code != http.StatusOK {
			t.Fatalf("the leader's /readyz: %d %s %v", code, body, err)
		}
		conns = append(conns, c)
	}
	resume := pause(t, old.cmd.Process.Pid)
	waitUntil(t, "the other master elected and ALIVE", func() bool { s, err := statusOf(next.url); return err == nil && s == "ALIVE" })
	for range 48 {
		conns = append(conns, dialRaw(t, old.url))
	}
	for i, c := range conns {
		c.send(t, paths[i%len(paths)])
	}
	resume()
	client := &http.Client{Timeout: 5 * time.Second}
	answered := 0
	deadline := time.Now().Add(2 * time.Minute)
	for exited := false; !exited; {
		select {
		case <-old.done:
			exited = true
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the woken deposed leader did not step down within two minutes\n%s", readFile(old.log))
		}
		for _, path := range paths {
			req, err := http.NewRequest(http.MethodGet, old.url+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+testToken)
			resp, err := client.Do(req)
			if err != nil {
				continue // it exited
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				continue
			}
			answered++
			if answersAsLeader(path, resp.StatusCode, string(b)) {
				t.Fatalf("the woken deposed leader answered GET %s as the leader: %d %s", path, resp.StatusCode, b)
			}
		}
	}
	for i, c := range conns {
		code, body, err := c.read()
		if err != nil {
			continue // not taken before it exited
		}
		answered++
		if path := paths[i%len(paths)]; answersAsLeader(path, code, body) {
			t.Fatalf("a GET %s sent while the deposed leader was stopped was answered as the leader's: %d %s", path, code, body)
		}
	}
	t.Logf("%d answers of the woken deposed leader before it exited, none as the leader", answered)
	if log := readFile(old.log); !strings.Contains(log, "lost the leadership") {
		t.Fatalf("the deposed leader exited without saying it lost the leadership:\n%s", log)
	}
}

// A cluster-mode driver calls the master with the submit token the leader
// made for it, which a standby does not know. Given the standby first (as
// its submitter was), it is told to try the next master, registers with
// the leader and runs its application.
func TestAClusterModeDriverGivenTheStandbyFirstRunsItsApplication(t *testing.T) {
	t.Parallel()
	leader, others := electedOf(t, startHAMasters(t, etcdtest.Start(t), 2))
	standby := others[0]
	dir := t.TempDir()
	c := &testCluster{master: leader.proc, workDirs: []string{dir}}
	c.workers = append(c.workers, start(t, "worker", nil, "worker", "--master", leader.url+","+standby.url,
		"--listen", "127.0.0.1:0", "--cores", "2", "--memory", "2g", "--work-dir", dir, "--register-interval", "200ms", "--kill-grace", "2s"))
	c.waitFor(t, "the worker alive", func(s masterJSON) bool { return s.alive() == 1 })
	stdout, stderr, err := runGlint(t, "submit", "--master", standby.url+","+leader.url, "--deploy-mode", "cluster", "--wait",
		"--driver-memory", "256m", "--executor-memory", "256m", "--total-executor-cores", "1", "pi", "10")
	driverID := strings.TrimSpace(stdout)
	output := readFile(filepath.Join(dir, driverID, "stdout"))
	if err != nil || !piResult.MatchString(output) {
		t.Fatalf("submit: %v\nstdout: %s\nstderr: %s\ndriver stdout: %s\ndriver stderr: %s", err, stdout, stderr, output,
			readFile(filepath.Join(dir, driverID, "stderr")))
	}
	c.waitFor(t, "the application FINISHED", func(s masterJSON) bool {
		return len(s.CompletedApps) == 1 && s.CompletedApps[0].State == "FINISHED"
	})
}

// A client-mode driver given the standby first registers while the leader
// is killed and started again: the standby is elected and recovers for a
// whole worker timeout (a paused worker never reports), refusing
// registrations meanwhile; the restarted master is a standby. The driver
// tries them in turn until the new leader takes it — longer than the ~10 s
// a driver tried before — and its application runs.
func TestADriverWaitsOutAFailoverAndARecoveryWithTheStandbyFirst(t *testing.T) {
	t.Parallel()
	const workerTimeout = 12 * time.Second
	leader, others := electedOf(t, startHAMasters(t, etcdtest.Start(t), 2, "--worker-timeout", workerTimeout.String()))
	standby := others[0]
	c := &testCluster{master: leader.proc}
	for i := range 2 {
		c.workers = append(c.workers, start(t, fmt.Sprintf("worker-%d", i), nil, "worker", "--master", leader.url+","+standby.url,
			"--listen", "127.0.0.1:0", "--cores", "2", "--memory", "2g", "--work-dir", t.TempDir(), "--register-interval", "200ms", "--kill-grace", "2s"))
	}
	c.waitFor(t, "the workers alive", func(s masterJSON) bool { return s.alive() == 2 })
	pause(t, c.workers[1].cmd.Process.Pid)

	if err := leader.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	submit := runInBackground(t, nil, "submit", "--master", standby.url+","+leader.url, "--executor-memory", "256m",
		"--total-executor-cores", "1", "--log-level", "warn", "pi", "4")
	leader.restart(t)
	waitUntil(t, "the standby elected and ALIVE", func() bool { s, err := statusOf(standby.url); return err == nil && s == "ALIVE" })
	t.Logf("leader killed → the standby ALIVE in %s (lease 2 s, worker timeout %s)", time.Since(killed).Round(time.Millisecond), workerTimeout)
	out, err := submit()
	if err != nil || !piResult.MatchString(out) {
		t.Fatalf("submit: %v\n%s", err, out)
	}
	if s, err := statusOf(leader.url); err != nil || s != "STANDBY" {
		t.Fatalf("the restarted master is %s (%v), want STANDBY; its log:\n%s", s, err, readFile(leader.proc.log))
	}
}

// While etcd is paused (SIGSTOP), the leader cannot renew its lease: it
// answers as a standby once the lease may have lapsed — at the latest a TTL
// after etcd stopped — never as the leader again, and steps down. Started
// again meanwhile, it stands by; a driver registering meanwhile, given
// every master, waits until etcd is back and a master leads, and its
// application runs.
func TestWhileEtcdIsPausedTheLeaderStandsDownAndADriverWaitsForTheNext(t *testing.T) {
	t.Parallel()
	const leaseTTL = 2 * time.Second // startHAMasters'
	endpoint, member := startEtcdProcess(t)
	leader, others := electedOf(t, startHAMasters(t, endpoint, 2, "--worker-timeout", "6s"))
	standby := others[0]
	c := &testCluster{master: leader.proc}
	c.workers = append(c.workers, start(t, "worker", nil, "worker", "--master", leader.url+","+standby.url,
		"--listen", "127.0.0.1:0", "--cores", "2", "--memory", "2g", "--work-dir", t.TempDir(), "--register-interval", "200ms", "--kill-grace", "2s"))
	c.waitFor(t, "the worker alive", func(s masterJSON) bool { return s.alive() == 1 })

	// The leader's /readyz, polled from before etcd's pause until it exits.
	type answer struct {
		sent time.Time
		code int
	}
	polled := make(chan []answer, 1)
	go func() {
		var answers []answer
		client := &http.Client{Timeout: 5 * time.Second}
		for {
			select {
			case <-leader.done:
				polled <- answers
				return
			default:
			}
			sent := time.Now()
			if resp, err := client.Get(leader.url + "/readyz"); err == nil {
				resp.Body.Close()
				answers = append(answers, answer{sent, resp.StatusCode})
			}
		}
	}()
	resumeEtcd := pause(t, member)
	waitUntil(t, "etcd stopped", func() bool { return processStopped(t, member) })
	lapsed := time.Now().Add(leaseTTL) // the lease was last renewed before now
	select {
	case <-leader.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the leader did not step down within two minutes of etcd's pause\n%s", readFile(leader.log))
	}
	answers := <-polled
	asLeader := 0
	for i, a := range answers {
		if a.code != http.StatusOK {
			continue
		}
		asLeader++
		if !a.sent.Before(lapsed) {
			t.Fatalf("/readyz asked %s after its lease may have lapsed answered 200", a.sent.Sub(lapsed))
		}
		if i > 0 && answers[i-1].code != http.StatusOK {
			t.Fatalf("/readyz answered 200 after answering %d: the leader said it leads again", answers[i-1].code)
		}
	}
	t.Logf("/readyz of the leader while etcd was paused: %d answers 200, then %d as a standby until it stepped down", asLeader, len(answers)-asLeader)

	leader.restart(t)
	submit := runInBackground(t, nil, "submit", "--master", leader.url+","+standby.url, "--executor-memory", "256m",
		"--total-executor-cores", "1", "--log-level", "warn", "pi", "4")
	waitUntil(t, "both masters standing by", func() bool {
		a, errA := statusOf(leader.url)
		b, errB := statusOf(standby.url)
		return errA == nil && errB == nil && a == "STANDBY" && b == "STANDBY"
	})
	resumeEtcd()
	out, err := submit()
	if err != nil || !piResult.MatchString(out) {
		t.Fatalf("submit: %v\n%s", err, out)
	}
}

// processStopped reports whether the process pid is stopped (state T).
func processStopped(t *testing.T, pid int) bool {
	t.Helper()
	state, err := tooltest.ProcState(pid)
	if err != nil {
		t.Fatal(err)
	}
	return state == 'T'
}

// etcdMemberEnv, when set ("DIR CLIENT_PORT PEER_PORT"), makes the test
// binary an etcd member instead of running the tests: one a test can pause,
// which an etcd embedded in the test's own process is not.
const etcdMemberEnv = "GLINT_TEST_ETCD_MEMBER"

func init() {
	if spec, ok := os.LookupEnv(etcdMemberEnv); ok {
		os.Exit(runEtcdMember(spec))
	}
}

// runEtcdMember serves an etcd member as spec says until SIGTERM.
func runEtcdMember(spec string) int {
	var dir string
	var clientPort, peerPort int
	if _, err := fmt.Sscan(spec, &dir, &clientPort, &peerPort); err != nil {
		fmt.Fprintf(os.Stderr, "%s=%q: %v\n", etcdMemberEnv, spec, err)
		return 2
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM)
	client := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", clientPort)}
	peer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", peerPort)}
	cfg := embed.NewConfig()
	cfg.Dir, cfg.Name = dir, "test"
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start etcd:", err)
		return 1
	}
	defer e.Close()
	select {
	case <-stop:
		return 0
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "etcd:", err)
		return 1
	}
}

// startEtcdProcess runs an etcd member in a child process until the test
// ends, and returns its client URL and pid.
func startEtcdProcess(t *testing.T) (string, int) {
	t.Helper()
	ports := tooltest.FreePorts(t, 2)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "etcd.log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %d", etcdMemberEnv, filepath.Join(dir, "data"), ports[0], ports[1]))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Errorf("the etcd member did not exit within 20s of SIGTERM\n%s", readFile(logPath))
			_ = cmd.Process.Kill()
			<-done
		}
	})
	endpoint := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	cli := etcdtest.Client(t, endpoint)
	waitUntil(t, "the etcd member serving", func() bool {
		select {
		case <-done:
			t.Fatalf("the etcd member exited\n%s", readFile(logPath))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := cli.Get(ctx, "/")
		return err == nil
	})
	return endpoint, cmd.Process.Pid
}
