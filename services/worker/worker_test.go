package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/protobuf/proto"

	"github.com/glint-cluster/glint/internal/tooltest"
	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/driver/v1/driverv1connect"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	"github.com/glint-cluster/glint/pkg/api/glint/worker/v1/workerv1connect"
	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/services/master"
)

// The test binary is also every child process the tests launch: with
// GLINT_WORKER_TEST_CHILD set, TestMain acts as the child named there.
const (
	childModeEnv = "GLINT_WORKER_TEST_CHILD"
	childExitEnv = "GLINT_WORKER_TEST_EXIT"
	// childLifetime bounds every child, so that even a failed test leaves
	// nothing running for long.
	childLifetime = 2 * time.Minute
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childModeEnv); mode != "" {
		os.Exit(runChild(mode))
	}
	os.Exit(m.Run())
}

// runChild is a child process. It prints its arguments, GLINT_*
// environment and the secrets it read (child.ReceiveSecrets), then, by mode:
//
//	exit         exits with $GLINT_WORKER_TEST_EXIT
//	hold         waits for the file "release" in its work dir, then exits so
//	ignore-term  ignores SIGTERM, prints "ready" and sleeps
//	spawn        starts an ignore-term grandchild in its process group,
//	             prints "grandchild PID" and sleeps
//	fail-once    exits 3 the first time it runs in its work dir, 0 after
//	burn         spins one core and starts a hold-memory grandchild (usage_test.go)
//	alloc        touches allocBytes, prints "allocated" and waits for "release"
//	spin         spins GOMAXPROCS cores until "release"
//	worker       runs a contained worker (contain_test.go)
//	probe        prints its user and tries to read each of $GLINT_WORKER_TEST_PROBE's
//	             paths (users_test.go), then behaves as hold
func runChild(mode string) int {
	dir := os.Getenv("GLINT_WORK_DIR")
	cwd, _ := os.Getwd()
	fmt.Printf("child %s args %q\n", mode, os.Args[1:])
	fmt.Printf("cwd %s\n", cwd)
	for _, k := range []string{"GLINT_WORK_DIR", "GLINT_APP_ID", "GLINT_EXECUTOR_ID", "GLINT_DRIVER_ID", "GLINT_WORKER_URL", "GLINT_WORKER_PID", "GLINT_TOKEN_FILE", "TRACEPARENT", "GLINT_FORKED_AT", "GOMAXPROCS"} {
		fmt.Printf("env %s=%s\n", k, os.Getenv(k))
	}
	if secrets, err := child.ReceiveSecrets(); err != nil {
		fmt.Printf("secrets: %v\n", err)
	} else {
		fmt.Printf("secrets: app token %q, submit token %q\n", secrets.AppToken, secrets.SubmitToken)
	}
	fmt.Fprintf(os.Stderr, "child %s stderr\n", mode)
	code, _ := strconv.Atoi(os.Getenv(childExitEnv))
	deadline := time.Now().Add(childLifetime)
	switch mode {
	case "exit":
		return code
	case "probe", "hold":
		if mode == "probe" {
			probe()
		}
		for time.Now().Before(deadline) {
			if _, err := os.Stat(filepath.Join(dir, "release")); err == nil {
				return code
			}
			time.Sleep(10 * time.Millisecond)
		}
		return 99
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ready")
		time.Sleep(time.Until(deadline))
		return 0
	case "spawn":
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 98
		}
		gc := exec.Command(exe)
		gc.Env = append(os.Environ(), childModeEnv+"=ignore-term")
		gc.Stdout, gc.Stderr = os.Stdout, os.Stderr
		if err := gc.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 98
		}
		fmt.Printf("grandchild %d\n", gc.Process.Pid)
		time.Sleep(time.Until(deadline))
		return 0
	case "burn", "hold-memory", "alloc", "spin", "cache":
		return usageChild(mode, dir, deadline)
	case "worker":
		return workerChild()
	case "fail-once":
		marker := filepath.Join(dir, "failed-once")
		if _, err := os.Stat(marker); err != nil {
			if err := os.WriteFile(marker, nil, 0o600); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
			return 3
		}
		return 0
	}
	fmt.Fprintf(os.Stderr, "unknown child mode %q\n", mode)
	return 97
}

// testBinary is the path of the test binary, argv[0] of every child.
func testBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short is the fast loop (make test-short): this test starts executor or driver processes; make test runs it")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// executorCommand runs the test binary as an executor child in mode.
func executorCommand(t *testing.T, mode string, exitCode int) *masterv1.Command {
	return &masterv1.Command{
		Args: []string{
			testBinary(t), "--executor-id", "{{EXECUTOR_ID}}", "--app-id", "{{APP_ID}}", "--cores", "{{CORES}}",
			"--hostname", "{{HOSTNAME}}", "--worker-url", "{{WORKER_URL}}",
		},
		Env: map[string]string{childModeEnv: mode, childExitEnv: strconv.Itoa(exitCode)},
	}
}

// driverCommand runs the test binary as a driver child in mode.
func driverCommand(t *testing.T, mode string) *masterv1.Command {
	return &masterv1.Command{
		Args: []string{testBinary(t), "--driver-id", "{{DRIVER_ID}}", "--worker-url", "{{WORKER_URL}}"},
		Env:  map[string]string{childModeEnv: mode},
	}
}

// testLogger discards the logs of code under test.
func testLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// listen opens an ephemeral loopback port.
func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// serve serves h on ln until the test ends.
func serve(t *testing.T, ln net.Listener, h http.Handler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- rpc.Serve(ctx, ln, h) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
}

// startMaster serves a real master on an ephemeral port, running its timeout
// checks when run is set, and returns its URL.
func startMaster(t *testing.T, cfg master.Config, run bool) string {
	t.Helper()
	return startWrappedMaster(t, cfg, run, nil)
}

// startWrappedMaster is startMaster with wrap, unless nil, in front of the
// master's handler: a test's injected faults.
func startWrappedMaster(t *testing.T, cfg master.Config, run bool, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	ln := listen(t)
	cfg.URL = "http://" + ln.Addr().String()
	cfg.SpreadOut = true
	if cfg.MaxExecutorRetries == 0 {
		cfg.MaxExecutorRetries = 10
	}
	m, err := master.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	serve(t, ln, h)
	if run {
		ctx, cancel := context.WithCancel(context.Background())
		ran := make(chan error, 1)
		go func() { ran <- m.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-ran; err != nil {
				t.Errorf("master run: %v", err)
			}
		})
	}
	return cfg.URL
}

// driverStub answers what the master probes of a driver (Ping), so that
// applications registered in tests stay alive; it is not a driver.
type driverStub struct {
	driverv1connect.UnimplementedDriverServiceHandler
}

func (driverStub) Ping(context.Context, *connect.Request[driverv1.PingRequest]) (*connect.Response[driverv1.PingResponse], error) {
	return connect.NewResponse(&driverv1.PingResponse{}), nil
}

func startDriverStub(t *testing.T) string {
	t.Helper()
	ln := listen(t)
	mux := http.NewServeMux()
	mux.Handle(driverv1connect.NewDriverServiceHandler(driverStub{}))
	serve(t, ln, mux)
	return "http://" + ln.Addr().String()
}

// testWorker is a worker served on an ephemeral port and running.
type testWorker struct {
	*Server
	url    string
	client workerv1connect.WorkerServiceClient
	// stop ends Run and returns its error; later calls return the same.
	stop func() error
}

// startWorker serves and runs a worker for masters; zero fields of cfg get
// test defaults (4 cores, 4 GiB, a temporary work dir).
func startWorker(t *testing.T, cfg Config, masters ...string) *testWorker {
	t.Helper()
	ln := listen(t)
	cfg.URL = "http://" + ln.Addr().String()
	cfg.Masters = masters
	if cfg.Cores == 0 {
		cfg.Cores = 4
	}
	if cfg.MemoryMiB == 0 {
		cfg.MemoryMiB = 4096
	}
	if cfg.WorkDir == "" {
		cfg.WorkDir = t.TempDir()
	}
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, ln, w.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-ran:
			case <-time.After(time.Minute):
				runErr = errors.New("worker Run did not return within a minute of its context ending")
			}
		})
		return runErr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("worker run: %v", err)
		}
	})
	return &testWorker{
		Server: w, url: cfg.URL, stop: stop,
		client: workerv1connect.NewWorkerServiceClient(newHTTPClient(t), cfg.URL, rpc.ClientOptions(noop.NewTracerProvider(), "")...),
	}
}

// cluster is a real master with one real worker registered with it.
type cluster struct {
	masterURL string
	master    masterv1connect.MasterServiceClient
	driverURL string
	worker    *testWorker
}

// clusterConfig adjusts a test cluster.
type clusterConfig struct {
	worker    Config
	master    master.Config
	runMaster bool
	// otherMasters are further masters the worker is given, after the
	// cluster's.
	otherMasters []string
	// wrapMaster, unless nil, stands in front of the master's handler.
	wrapMaster func(http.Handler) http.Handler
}

// startCluster starts a master and a worker and waits until the worker is ALIVE.
func startCluster(t *testing.T, cfg clusterConfig) *cluster {
	t.Helper()
	url := startWrappedMaster(t, cfg.master, cfg.runMaster, cfg.wrapMaster)
	c := &cluster{masterURL: url, master: newMasterClient(t, url), driverURL: startDriverStub(t)}
	c.worker = startWorker(t, cfg.worker, append([]string{url}, cfg.otherMasters...)...)
	tooltest.Eventually(t, "worker registered", func() bool {
		w := c.masterWorker(t, c.worker.ID())
		return w != nil && w.GetState() == masterv1.WorkerState_WORKER_STATE_ALIVE && c.worker.status().MasterURL == url
	})
	return c
}

// newHTTPClient returns an h2c client whose idle connections are closed
// before the servers of the test shut down (which otherwise wait for them).
func newHTTPClient(t *testing.T) *http.Client {
	c := rpc.NewHTTPClient()
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// newMasterClient returns a Connect client for the master at url.
func newMasterClient(t *testing.T, url string) masterv1connect.MasterServiceClient {
	return masterv1connect.NewMasterServiceClient(newHTTPClient(t), url, rpc.ClientOptions(noop.NewTracerProvider(), "")...)
}

func (c *cluster) state(t *testing.T) *masterv1.GetClusterStateResponse {
	t.Helper()
	resp, err := c.master.GetClusterState(context.Background(), connect.NewRequest(&masterv1.GetClusterStateRequest{}))
	if err != nil {
		t.Fatalf("get cluster state: %v", err)
	}
	return resp.Msg
}

// masterWorker returns the master's view of worker id, nil if it has none.
func (c *cluster) masterWorker(t *testing.T, id string) *masterv1.WorkerInfo {
	t.Helper()
	for _, w := range c.state(t).GetWorkers() {
		if w.GetId() == id {
			return w
		}
	}
	return nil
}

// masterApp returns the master's view of an application, active or completed.
func (c *cluster) masterApp(t *testing.T, appID string) *masterv1.ApplicationInfo {
	t.Helper()
	st := c.state(t)
	for _, a := range append(st.GetActiveApps(), st.GetCompletedApps()...) {
		if a.GetId() == appID {
			return a
		}
	}
	return nil
}

// masterExecutor returns the master's view of an executor, nil if it has none.
func (c *cluster) masterExecutor(t *testing.T, appID string, id int32) *masterv1.ExecutorInfo {
	t.Helper()
	for _, e := range c.masterApp(t, appID).GetExecutors() {
		if e.GetId() == id {
			return e
		}
	}
	return nil
}

// registerApp registers an application whose executors take one core each,
// maxCores in all, and run cmd.
func (c *cluster) registerApp(t *testing.T, cmd *masterv1.Command, maxCores int32) string {
	t.Helper()
	resp, err := c.master.RegisterApplication(context.Background(), connect.NewRequest(&masterv1.RegisterApplicationRequest{AppToken: rpc.NewToken(), MasterToken: rpc.NewToken(),
		Description: &masterv1.ApplicationDescription{
			Name: "worker-test", MemoryPerExecutorMib: 64, CoresPerExecutor: proto.Int32(1),
			MaxCores: proto.Int32(maxCores), Command: cmd,
		},
		DriverUrl: c.driverURL,
	}))
	if err != nil {
		t.Fatalf("register application: %v", err)
	}
	return resp.Msg.GetAppId()
}

// waitMasterExecutor waits until the master shows the executor in state.
func (c *cluster) waitMasterExecutor(t *testing.T, appID string, id int32, state masterv1.ExecutorState) *masterv1.ExecutorInfo {
	t.Helper()
	var e *masterv1.ExecutorInfo
	tooltest.Eventually(t, fmt.Sprintf("executor %s/%d %s at the master", appID, id, state), func() bool {
		e = c.masterExecutor(t, appID, id)
		return e.GetState() == state
	})
	return e
}

// executorJSON returns the worker's /json entry for an executor, running or
// finished, and whether it is finished.
func (w *testWorker) executor(t *testing.T, appID string, id int32) (executorJSON, bool) {
	t.Helper()
	st := w.fetchJSON(t)
	for _, e := range st.Executors {
		if e.AppID == appID && e.ID == id {
			return e, false
		}
	}
	for _, e := range st.FinishedExecutors {
		if e.AppID == appID && e.ID == id {
			return e, true
		}
	}
	return executorJSON{}, false
}

// waitFinishedExecutor waits until the worker lists the executor as finished.
func (w *testWorker) waitFinishedExecutor(t *testing.T, appID string, id int32) executorJSON {
	t.Helper()
	var e executorJSON
	tooltest.Eventually(t, fmt.Sprintf("executor %s/%d finished on the worker", appID, id), func() bool {
		var done bool
		e, done = w.executor(t, appID, id)
		return done
	})
	return e
}

// fetchJSON reads GET /json over HTTP.
func (w *testWorker) fetchJSON(t *testing.T) workerJSON {
	t.Helper()
	resp, err := http.Get(w.url + "/json")
	if err != nil {
		t.Fatalf("get /json: %v", err)
	}
	defer resp.Body.Close()
	var st workerJSON
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("decode /json: %v", err)
	}
	return st
}

// waitFileContains waits until the file holds every one of wants.
func waitFileContains(t *testing.T, name string, wants ...string) string {
	t.Helper()
	var data []byte
	tooltest.Eventually(t, fmt.Sprintf("%s to contain %q", name, wants), func() bool {
		data, _ = os.ReadFile(name)
		for _, w := range wants {
			if !strings.Contains(string(data), w) {
				return false
			}
		}
		return true
	})
	return string(data)
}

// assertGone checks that no process has pid: it was reaped.
func assertGone(t *testing.T, pid int) {
	t.Helper()
	if pid <= 0 {
		t.Fatalf("no pid recorded")
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("process %d still exists (kill 0: %v)", pid, err)
	}
}

func TestNewChecksConfig(t *testing.T) {
	dir := t.TempDir()
	valid := func() Config {
		return Config{
			Masters: []string{"127.0.0.1:7077"}, URL: "http://127.0.0.1:7078", Cores: 2, MemoryMiB: 512,
			WorkDir: filepath.Join(dir, "work"), Now: func() time.Time { return time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC) },
		}
	}
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{"valid config", func(*Config) {}, ""},
		{"no master", func(c *Config) { c.Masters = nil }, "no master URL"},
		{"bad master URL", func(c *Config) { c.Masters = []string{"ftp://x:1"} }, "scheme"},
		{"worker URL without port", func(c *Config) { c.URL = "http://127.0.0.1" }, "want host:port"},
		{"zero cores", func(c *Config) { c.Cores = 0 }, "cores 0 must be positive"},
		{"zero memory", func(c *Config) { c.MemoryMiB = 0 }, "memory 0 MiB must be positive"},
		{"no work dir", func(c *Config) { c.WorkDir = "" }, "no work dir"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := valid()
			tt.mutate(&cfg)
			s, err := New(cfg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("New: got error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if want := "worker-20250304050607-127.0.0.1-7078"; s.ID() != want {
				t.Errorf("ID() = %q, want %q", s.ID(), want)
			}
			if fi, err := os.Stat(cfg.WorkDir); err != nil || !fi.IsDir() {
				t.Errorf("work dir not created: %v", err)
			}
		})
	}
}
