package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/glint-cluster/glint/internal/etcdtest"
	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// lockedBuffer is a buffer a process writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// client is a glint client command running in the background.
type client struct {
	out  lockedBuffer // stdout and stderr
	done chan struct{}
	err  error
}

// startClient runs glint args... in the background; the test's end stops
// and reaps it.
func startClient(t *testing.T, args ...string) *client {
	t.Helper()
	c := &client{done: make(chan struct{})}
	cmd := exec.Command(glintBin, args...)
	cmd.Stdout, cmd.Stderr = &c.out, &c.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.err = cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-c.done
	})
	return c
}

// wait waits for the command's end and returns its output and error.
func (c *client) wait() (string, error) {
	<-c.done
	return c.out.String(), c.err
}

// retrying says whether the command said it retries a call.
func (c *client) retrying() bool {
	return strings.Contains(c.out.String(), "retrying for up to 1m0s (--retry-timeout)")
}

var driverIDPattern = regexp.MustCompile(`driver-\d{14}-\d{4}`)

// submitHeld starts glint submit --wait in cluster mode with masters, of a
// hold application that release lets end, and returns the client and its
// driver's id once the driver's executor runs.
func submitHeld(t *testing.T, c *testCluster, masters, release string) (*client, string) {
	t.Helper()
	submit := startClient(t, "submit", "--master", masters, "--deploy-mode", "cluster", "--wait", "--driver-memory", "256m",
		"--executor-memory", "256m", "--total-executor-cores", "1", "--log-level", "warn", "hold", release, "1")
	c.waitFor(t, "the driver's executor running", func(s masterJSON) bool { return len(runningExecutors(s)) == 1 })
	waitUntil(t, "submit printing the driver's id", func() bool { return driverIDPattern.MatchString(submit.out.String()) })
	return submit, driverIDPattern.FindString(submit.out.String())
}

// TestSubmitWaitAndStatusOutliveAMasterKilledAndRestarted: while a
// cluster-mode driver runs, its master (--recovery-mode file) is killed;
// glint submit --wait, which follows the driver, and glint status, asked for
// it meanwhile, retry until the master is back on its address, and the
// submit exits 0 once the driver FINISHED.
func TestSubmitWaitAndStatusOutliveAMasterKilledAndRestarted(t *testing.T) {
	t.Parallel()
	c, args := fileRecoveryCluster(t, 1, 2)
	release := filepath.Join(t.TempDir(), "release")
	submit, driverID := submitHeld(t, c, c.master.url, release)

	c.killMaster(t)
	status := startClient(t, "status", "--master", c.master.url, driverID)
	waitUntil(t, "submit --wait and status retrying", func() bool { return submit.retrying() && status.retrying() })
	c.master = start(t, "master-restarted", nil, args...)
	c.waitFor(t, "the master ALIVE with the driver's executor", func(s masterJSON) bool {
		return s.Status == "ALIVE" && len(runningExecutors(s)) == 1
	})
	if out, err := status.wait(); err != nil || !strings.Contains(out, driverID+"  hold") {
		t.Errorf("glint status %s across the master's restart: %v\n%s", driverID, err, out)
	}

	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := submit.wait()
	if err != nil {
		t.Fatalf("submit --wait across the master's restart: %v\n%s", err, out)
	}
	if !strings.Contains(out, "driver "+driverID+" is FINISHED") {
		t.Errorf("submit --wait output has no FINISHED driver:\n%s", out)
	}
	if d := c.drivers(t); len(d.ActiveDrivers) != 0 || len(d.CompletedDrivers) != 1 || d.CompletedDrivers[0].ID != driverID || d.CompletedDrivers[0].State != "FINISHED" {
		t.Errorf("drivers %+v, want %s alone, FINISHED", d, driverID)
	}
}

// connKey holds, in a request's context, the connection it came on.
type connKey struct{}

// answerLoser is a proxy in front of a master that passes every call on and
// loses the master's answer to the first call of one procedure: it reads the
// answer whole and closes the caller's connection instead, as a connection
// that broke after the master acted does. A TCP proxy (internal/faultproxy)
// cuts connections, but cannot tell where one answer begins among the
// frames of a connection's calls.
type answerLoser struct {
	url  string
	lost atomic.Int32
}

func loseFirstAnswer(t *testing.T, masterURL, procedure string) *answerLoser {
	t.Helper()
	target, err := url.Parse(masterURL)
	if err != nil {
		t.Fatal(err)
	}
	transport := rpc.NewHTTPClient().Transport
	pass := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target) }, Transport: transport}
	a := &answerLoser{}
	var first sync.Once
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lose := false
		if r.URL.Path == procedure {
			first.Do(func() { lose = true })
		}
		if !lose {
			pass.ServeHTTP(w, r)
			return
		}
		out := r.Clone(r.Context())
		out.URL.Scheme, out.URL.Host, out.Host, out.RequestURI = target.Scheme, target.Host, target.Host, ""
		if resp, err := transport.RoundTrip(out); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			a.lost.Add(1)
		}
		r.Context().Value(connKey{}).(net.Conn).Close()
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(h)
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) }
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	a.url = "http://" + ln.Addr().String()
	return a
}

// TestASubmissionWhoseAnswerWasLostMakesOneDriver: glint submit in cluster
// mode, the master's answer to its SubmitDriver lost, sends it again and
// gets the driver the first made: one driver runs, and --wait exits 0.
func TestASubmissionWhoseAnswerWasLostMakesOneDriver(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1)
	proxy := loseFirstAnswer(t, c.master.url, masterv1connect.MasterServiceSubmitDriverProcedure)
	stdout, stderr, err := runGlint(t, "submit", "--master", proxy.url, "--deploy-mode", "cluster", "--wait", "--driver-memory", "256m",
		"--executor-memory", "256m", "--total-executor-cores", "1", "pi", "2")
	if err != nil {
		t.Fatalf("submit: %v\n%s%s", err, stdout, stderr)
	}
	if proxy.lost.Load() != 1 || !strings.Contains(stderr, "SubmitDriver: unavailable") {
		t.Fatalf("%d answers lost, stderr %q; want the first SubmitDriver's lost and retried", proxy.lost.Load(), stderr)
	}
	id := strings.TrimSpace(stdout)
	if d := c.drivers(t); len(d.ActiveDrivers) != 0 || len(d.CompletedDrivers) != 1 || d.CompletedDrivers[0].ID != id || d.CompletedDrivers[0].State != "FINISHED" {
		t.Errorf("drivers %+v, want %s alone, FINISHED", d, id)
	}
}

// TestASubmissionRepeatedAfterTheMasterRestartedMakesOneDriver: the
// master keeps a driver's submission id in its recovery file, so the same
// SubmitDriver, sent before and after the master was killed and restarted,
// is answered with one driver.
func TestASubmissionRepeatedAfterTheMasterRestartedMakesOneDriver(t *testing.T) {
	t.Parallel()
	c, args := fileRecoveryCluster(t, 0, 0)
	master := masterv1connect.NewMasterServiceClient(rpc.NewHTTPClient(), c.master.url, rpc.ClientOptions(noop.NewTracerProvider(), testToken)...)
	req := &masterv1.SubmitDriverRequest{SubmissionId: "QHZ3M7XK2WJ4TB6NRPLCDE5FGA", Description: &masterv1.DriverDescription{
		Name: "d", Cores: 1, MemoryMib: 256, Command: &masterv1.Command{Args: []string{glintBin, "driver", "pi"}},
	}}
	submit := func() string {
		t.Helper()
		resp, err := master.SubmitDriver(context.Background(), connect.NewRequest(req))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.GetDriverId()
	}
	first := submit()
	if again := submit(); again != first {
		t.Fatalf("the same submission again: %s, want %s", again, first)
	}
	c.killMaster(t)
	c.master = start(t, "master-restarted", nil, args...)
	if again := submit(); again != first {
		t.Fatalf("the same submission after the master's restart: %s, want %s", again, first)
	}
	if d := c.drivers(t); len(d.ActiveDrivers) != 1 || len(d.CompletedDrivers) != 0 {
		t.Errorf("drivers %+v, want %s alone", d, first)
	}
}

// TestSubmitWaitFollowsItsDriverAcrossAFailover: two masters on etcd; the
// leader is killed while a cluster-mode driver runs. glint submit --wait,
// given both (the killed one first), retries its polls through the standby's
// unavailable until the standby leads, and exits 0 once the driver FINISHED.
func TestSubmitWaitFollowsItsDriverAcrossAFailover(t *testing.T) {
	t.Parallel()
	endpoint := etcdtest.Start(t)
	var urls []string
	var masters []*proc
	for i, port := range tooltest.FreePorts(t, 2) {
		m := start(t, fmt.Sprintf("master-%d", i), nil, "master", "--listen", fmt.Sprintf("127.0.0.1:%d", port),
			"--worker-timeout", "6s", "--recovery-mode", "etcd", "--etcd-endpoints", endpoint, "--etcd-lease-ttl", "2s")
		masters = append(masters, m)
		urls = append(urls, m.url)
	}
	var leader string
	waitUntil(t, "one master elected", func() bool { leader, _ = leaderOf(t, urls, "ALIVE"); return leader != "" })
	leaderAt := slices.IndexFunc(masters, func(m *proc) bool { return m.url == leader })
	standby := urls[1-leaderAt]
	all := leader + "," + standby
	c := &testCluster{master: masters[leaderAt]}
	c.workers = append(c.workers, start(t, "worker", nil, "worker", "--master", all, "--listen", "127.0.0.1:0", "--cores", "2",
		"--memory", "2g", "--work-dir", t.TempDir(), "--register-interval", "200ms", "--kill-grace", "2s"))
	c.waitFor(t, "the worker alive", func(s masterJSON) bool { return s.alive() == 1 })
	release := filepath.Join(t.TempDir(), "release")
	submit, driverID := submitHeld(t, c, all, release)

	c.killMaster(t)
	c.master = masters[1-leaderAt]
	c.waitFor(t, "the standby ALIVE with the driver's executor", func(s masterJSON) bool {
		return s.Status == "ALIVE" && len(runningExecutors(s)) == 1
	})
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := submit.wait()
	if err != nil {
		t.Fatalf("submit --wait across the failover: %v\n%s", err, out)
	}
	if !submit.retrying() || !strings.Contains(out, "driver "+driverID+" is FINISHED") {
		t.Errorf("submit --wait output has no retried poll or no FINISHED driver:\n%s", out)
	}
	if d := c.drivers(t); len(d.ActiveDrivers) != 0 || len(d.CompletedDrivers) != 1 || d.CompletedDrivers[0].ID != driverID || d.CompletedDrivers[0].State != "FINISHED" {
		t.Errorf("drivers %+v, want %s alone, FINISHED", d, driverID)
	}
}
