package driver_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/glint-cluster/glint/internal/faultproxy"
	"github.com/glint-cluster/glint/internal/servicetest"
	"github.com/glint-cluster/glint/internal/tooltest"
	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/driver/v1/driverv1connect"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/app"
	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry"
	"github.com/glint-cluster/glint/services/driver"
	"github.com/glint-cluster/glint/services/executor"
	"github.com/glint-cluster/glint/services/master"
)

// startMaster serves a real master on a loopback port.
func startMaster(t testing.TB) string {
	t.Helper()
	return servicetest.Master(t, master.Config{SpreadOut: true, MaxExecutorRetries: 10})
}

// asMaster is a client that calls d as its master does, with the token the
// driver gave the master.
func asMaster(d *driver.Driver) driverv1connect.DriverServiceClient {
	return driverv1connect.NewDriverServiceClient(rpc.NewHTTPClient(), d.URL(), rpc.ClientOptions(noop.NewTracerProvider(), driver.MasterToken(d))...)
}

// startDriver starts a driver for a; the cluster has no workers, so the test
// starts executors itself.
func startDriver(t testing.TB, a *app.App, conf map[string]string) *driver.Driver {
	t.Helper()
	return servicetest.Driver(t, driver.Config{
		Masters: []string{startMaster(t)}, App: a,
		ExecutorCommand: []string{"/bin/false"}, Conf: conf, ExecutorMemoryMiB: 256,
	})
}

// startExecutor runs an executor backend for d in this process, on loopback,
// and returns a function that waits for it to end.
func startExecutor(t testing.TB, d *driver.Driver, a *app.App, id, cores int32) (wait func() error) {
	t.Helper()
	cfg := executorConfig(t, d, a, id, cores)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var runErr error
	ln, _ := servicetest.Listen(t)
	go func() {
		defer close(done)
		runErr = servicetest.RunExecutor(ctx, ln, cfg)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("executor %d did not stop", id)
		}
	})
	return func() error { <-done; return runErr }
}

// executorConfig is the configuration of executor id of d running a.
func executorConfig(t testing.TB, d *driver.Driver, a *app.App, id, cores int32) executor.Config {
	t.Helper()
	apps, err := app.NewRegistry(a)
	if err != nil {
		t.Fatal(err)
	}
	return executor.Config{
		ExecutorArgs: child.ExecutorArgs{
			DriverURL: d.URL(), ExecutorID: id, Hostname: "127.0.0.1", Cores: cores, AppID: d.AppID(),
			WorkerURL: "http://127.0.0.1:1",
		},
		Apps: apps, AppToken: d.AppToken(), RetryInterval: 10 * time.Millisecond,
	}
}

func echoApp(task app.TaskFunc) *app.App {
	return &app.App{
		Name:  "t",
		Run:   func(context.Context, app.Context, []string) error { return nil },
		Tasks: map[string]app.TaskFunc{"task": task},
	}
}

func inputs(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = []byte(fmt.Sprint(i))
	}
	return out
}

func TestRegisterExecutorRejectsUnknownAppsDuplicatesAndBadInput(t *testing.T) {
	d := startDriver(t, echoApp(nil), nil)
	client := driverv1connect.NewDriverServiceClient(rpc.NewHTTPClient(), d.URL(), rpc.ClientOptions(noop.NewTracerProvider(), d.AppToken())...)
	register := func(appID string, id, cores int32, url string) error {
		_, err := client.RegisterExecutor(context.Background(), connect.NewRequest(&driverv1.RegisterExecutorRequest{
			AppId: appID, ExecutorId: id, Hostname: "127.0.0.1", Cores: cores, ExecutorUrl: url,
		}))
		return err
	}
	for name, tc := range map[string]struct {
		err  error
		code connect.Code
	}{
		"unknown app":           {register("app-20260101000000-0999", 0, 1, "http://127.0.0.1:1"), connect.CodeNotFound},
		"zero cores":            {register(d.AppID(), 0, 0, "http://127.0.0.1:1"), connect.CodeInvalidArgument},
		"negative id":           {register(d.AppID(), -1, 1, "http://127.0.0.1:1"), connect.CodeInvalidArgument},
		"bad executor url":      {register(d.AppID(), 0, 1, "http://127.0.0.1:1/x?y"), connect.CodeInvalidArgument},
		"first is admitted":     {register(d.AppID(), 0, 1, "http://127.0.0.1:1"), 0},
		"its retry is admitted": {register(d.AppID(), 0, 1, "http://127.0.0.1:1"), 0},
		"duplicate id":          {register(d.AppID(), 0, 1, "http://127.0.0.1:2"), connect.CodeAlreadyExists},
		"same id, other cores":  {register(d.AppID(), 0, 2, "http://127.0.0.1:1"), connect.CodeAlreadyExists},
	} {
		if connect.CodeOf(tc.err) != tc.code && !(tc.code == 0 && tc.err == nil) {
			t.Errorf("%s: got %v, want code %v", name, tc.err, tc.code)
		}
	}
}

func TestAnExecutorThatAskedForItsPropertiesIsRegisteredOnlyOnceItRetrievedThem(t *testing.T) {
	d := startDriver(t, echoApp(nil), nil)
	client := driverv1connect.NewDriverServiceClient(rpc.NewHTTPClient(), d.URL(), rpc.ClientOptions(noop.NewTracerProvider(), d.AppToken())...)
	register := func(ctx context.Context) error {
		_, err := client.RegisterExecutor(ctx, connect.NewRequest(&driverv1.RegisterExecutorRequest{
			AppId: d.AppID(), ExecutorId: 0, Hostname: "127.0.0.1", Cores: 1, ExecutorUrl: "http://127.0.0.1:1", PropsAsked: true,
		}))
		return err
	}
	// The registration waits for the properties; this one gives up first.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := register(ctx); err == nil {
		t.Fatal("an executor that asked for its properties was registered before it retrieved them")
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		done <- register(ctx)
	}()
	// A boot's end that is no time is refused.
	if _, err := client.RetrieveSparkProps(context.Background(), connect.NewRequest(&driverv1.RetrieveSparkPropsRequest{AppId: d.AppID(), ExecutorId: 0,
		BootedAt: &timestamppb.Timestamp{Nanos: -1}})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("properties for an executor booted at no time: %v, want invalid_argument", err)
	}
	booted := time.Now().Add(-time.Millisecond).Round(time.Microsecond)
	if _, err := client.RetrieveSparkProps(context.Background(), connect.NewRequest(&driverv1.RetrieveSparkPropsRequest{AppId: d.AppID(), ExecutorId: 0,
		BootedAt: timestamppb.New(booted)})); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("register once the properties were retrieved: %v", err)
	}
	tl := d.Timelines()
	if len(tl) != 1 || tl[0].PropsRetrieved.IsZero() || tl[0].Registered.Before(tl[0].PropsRetrieved) || !tl[0].Booted.Equal(booted) {
		t.Errorf("timelines %+v: want executor 0 booted at %v, registered after it retrieved its properties", tl, booted)
	}
}

// An executor tries RegisterExecutor again when a call got no answer; the
// driver may have taken the call whose answer was lost (its caller gave up,
// or the connection broke after it arrived). The retry is the same executor's
// and is admitted: refused as a duplicate, the executor would exit, and its
// cores would be lost to the application while the master thinks it runs.
func TestAnExecutorWhoseRegistrationsAnswerWasLostRegistersAgain(t *testing.T) {
	a := echoApp(func(_ context.Context, in []byte) ([]byte, error) { return in, nil })
	d := startDriver(t, a, nil)
	target, err := url.Parse(d.URL())
	if err != nil {
		t.Fatal(err)
	}
	upstream := httputil.NewSingleHostReverseProxy(target)
	upstream.ErrorLog = log.New(io.Discard, "", 0) // the executor's last calls are cut off as the test ends
	var lost atomic.Bool
	ln, proxyURL := servicetest.Listen(t)
	serveCtx, stopServing := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- rpc.Serve(serveCtx, ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == driverv1connect.DriverServiceRegisterExecutorProcedure && lost.CompareAndSwap(false, true) {
				// The driver takes the first registration; its answer is lost.
				upstream.ServeHTTP(httptest.NewRecorder(), r)
				http.Error(w, "connection to the driver lost", http.StatusServiceUnavailable)
				return
			}
			upstream.ServeHTTP(w, r)
		}))
	}()
	defer func() { stopServing(); <-served }()
	cfg := executorConfig(t, d, a, 0, 1)
	cfg.DriverURL = proxyURL
	ctx, cancel := context.WithCancel(context.Background())
	exLn, _ := servicetest.Listen(t)
	ended := make(chan struct{})
	var runErr error
	go func() { defer close(ended); runErr = servicetest.RunExecutor(ctx, exLn, cfg) }()
	defer func() { cancel(); <-ended }()
	res := make(chan error, 1)
	go func() {
		_, err := d.RunTasks(context.Background(), "task", inputs(1))
		res <- err
	}()
	select {
	case err := <-res:
		if err != nil {
			t.Fatal(err)
		}
	case <-ended:
		t.Fatalf("the executor ended: %v; want it registered on its retry", runErr)
	case <-time.After(30 * time.Second):
		t.Fatal("the job did not run")
	}
	if !lost.Load() {
		t.Error("no registration's answer was lost")
	}
}

func TestRejectedExecutorStopsWithAClearError(t *testing.T) {
	a := echoApp(func(_ context.Context, in []byte) ([]byte, error) { return in, nil })
	d := startDriver(t, a, nil)
	client := driverv1connect.NewDriverServiceClient(rpc.NewHTTPClient(), d.URL(), rpc.ClientOptions(noop.NewTracerProvider(), d.AppToken())...)
	if _, err := client.RegisterExecutor(context.Background(), connect.NewRequest(&driverv1.RegisterExecutorRequest{
		AppId: d.AppID(), ExecutorId: 3, Hostname: "127.0.0.1", Cores: 1, ExecutorUrl: "http://127.0.0.1:1",
	})); err != nil {
		t.Fatal(err)
	}
	err := startExecutor(t, d, a, 3, 1)()
	if err == nil || !strings.Contains(err.Error(), "register with driver "+d.URL()+": rejected") || !strings.Contains(err.Error(), "duplicate executor id") {
		t.Errorf("executor error %v; want a rejection naming the step, the URL and the reason", err)
	}
}

func TestTasksSpreadOverExecutorsAndResultsKeepInputOrder(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]bool{}
	a := echoApp(func(ctx context.Context, in []byte) ([]byte, error) {
		mu.Lock()
		seen[string(in)] = true
		mu.Unlock()
		return append([]byte("r"), in...), nil
	})
	d := startDriver(t, a, nil)
	startExecutor(t, d, a, 0, 2)
	startExecutor(t, d, a, 1, 2)
	out, err := d.RunTasks(context.Background(), "task", inputs(50))
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range out {
		if string(o) != fmt.Sprintf("r%d", i) {
			t.Fatalf("output %d = %q", i, o)
		}
	}
	if len(seen) != 50 {
		t.Errorf("%d distinct tasks ran, want 50", len(seen))
	}
}

// An executor closes its connections once its callers hung up after its last
// answer, or a grace period after it: the driver hangs up on the executors it
// stops — all of them as the application ends, one when its worker is
// decommissioned — so that they exit at once and free their cores.
func TestTheDriverHangsUpOnTheExecutorsItStopped(t *testing.T) {
	for _, c := range []struct {
		name string
		stop func(t *testing.T, d *driver.Driver)
	}{
		{"the application ends", func(_ *testing.T, d *driver.Driver) { d.Stop(context.Background()) }},
		{"its worker is decommissioned", func(t *testing.T, d *driver.Driver) {
			client := asMaster(d)
			if _, err := client.ExecutorUpdated(context.Background(), connect.NewRequest(&driverv1.ExecutorUpdatedRequest{
				AppId: d.AppID(), ExecutorId: 0, State: masterv1.ExecutorState_EXECUTOR_STATE_DECOMMISSIONED, Message: "worker decommissioned",
			})); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := echoApp(func(_ context.Context, in []byte) ([]byte, error) { return in, nil })
			d := startDriver(t, a, nil)
			ln, url := servicetest.Listen(t)
			peers := &hangUps{Listener: ln, hungUp: make(chan struct{})}
			cfg := executorConfig(t, d, a, 0, 1)
			cfg.URL = url
			s, err := executor.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			serveCtx, stopServing := context.WithCancel(context.Background())
			served := make(chan error, 1)
			go func() { served <- rpc.Serve(serveCtx, peers, s.Handler()) }()
			defer func() { stopServing(); <-served }()
			ran := make(chan error, 1)
			go func() { ran <- s.Run(context.Background()) }()
			if _, err := d.RunTasks(context.Background(), "task", inputs(1)); err != nil {
				t.Fatal(err)
			}
			c.stop(t, d)
			if err := <-ran; err != nil {
				t.Fatal(err)
			}
			// The executor still serves: its shutdown (a GOAWAY that ends
			// the driver's connection if it comes while a call is open)
			// cannot be what made the driver hang up.
			select {
			case <-peers.hungUp:
			case <-time.After(10 * time.Second):
				t.Fatal("the driver did not hang up on the executor it stopped")
			}
		})
	}
}

// hangUps is a listener whose hungUp closes when a peer closes a connection.
type hangUps struct {
	net.Listener
	hungUp chan struct{}
	once   sync.Once
}

func (l *hangUps) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &hangUpConn{Conn: c, l: l}, nil
}

type hangUpConn struct {
	net.Conn
	l *hangUps
}

func (c *hangUpConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if errors.Is(err, io.EOF) {
		c.l.once.Do(func() { close(c.l.hungUp) })
	}
	return n, err
}

func TestTaskFailingMaxFailuresTimesFailsTheJob(t *testing.T) {
	var calls atomic.Int32
	a := echoApp(func(context.Context, []byte) ([]byte, error) {
		calls.Add(1)
		return nil, errors.New("disk on fire")
	})
	d := startDriver(t, a, map[string]string{"spark.task.maxFailures": "3"})
	startExecutor(t, d, a, 0, 1)
	_, err := d.RunTasks(context.Background(), "task", inputs(1))
	if err == nil || !strings.Contains(err.Error(), "failed 3 times") || !strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("got %v; want the job failed after 3 attempts with the task's error", err)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("task ran %d times, want 3", n)
	}
}

func TestFlakyTaskIsRetried(t *testing.T) {
	var calls atomic.Int32
	a := echoApp(func(_ context.Context, in []byte) ([]byte, error) {
		if calls.Add(1) <= 2 {
			return nil, errors.New("flake")
		}
		return in, nil
	})
	d := startDriver(t, a, nil)
	startExecutor(t, d, a, 0, 1)
	if out, err := d.RunTasks(context.Background(), "task", inputs(1)); err != nil || string(out[0]) != "0" {
		t.Errorf("got %q, %v; want the third attempt's result", out, err)
	}
}

func TestTasksOfALostExecutorRunElsewhere(t *testing.T) {
	// With spark.task.maxFailures=1, a task lost through no fault of the
	// application (its worker was lost, or is decommissioning) runs again;
	// one whose executor failed fails the job.
	for _, tt := range []struct {
		name    string
		updates []*driverv1.ExecutorUpdatedRequest
		wantErr bool
	}{
		{"worker lost", []*driverv1.ExecutorUpdatedRequest{
			{ExecutorId: 0, State: masterv1.ExecutorState_EXECUTOR_STATE_LOST, WorkerLost: true, Message: "worker lost"},
		}, false},
		{"worker decommissioned", []*driverv1.ExecutorUpdatedRequest{
			{ExecutorId: 0, State: masterv1.ExecutorState_EXECUTOR_STATE_DECOMMISSIONED, Message: "worker is stopping"},
			{ExecutorId: 0, State: masterv1.ExecutorState_EXECUTOR_STATE_KILLED, Message: "killed"},
		}, false},
		{"executor failed", []*driverv1.ExecutorUpdatedRequest{
			{ExecutorId: 0, State: masterv1.ExecutorState_EXECUTOR_STATE_FAILED, Message: "exit status 1"},
		}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			started := make(chan struct{}, 1)
			var calls atomic.Int32
			a := echoApp(func(ctx context.Context, in []byte) ([]byte, error) {
				if calls.Add(1) == 1 {
					started <- struct{}{}
					<-ctx.Done() // the first attempt hangs until its executor stops
					return nil, ctx.Err()
				}
				return in, nil
			})
			d := startDriver(t, a, map[string]string{"spark.task.maxFailures": "1"})
			startExecutor(t, d, a, 0, 1)
			type result struct {
				out [][]byte
				err error
			}
			res := make(chan result, 1)
			go func() {
				out, err := d.RunTasks(context.Background(), "task", inputs(1))
				res <- result{out, err}
			}()
			<-started
			startExecutor(t, d, a, 1, 1)
			// The master reports what became of executor 0.
			client := asMaster(d)
			for _, u := range tt.updates {
				u.AppId = d.AppID()
				if _, err := client.ExecutorUpdated(context.Background(), connect.NewRequest(u)); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case r := <-res:
				if tt.wantErr && r.err == nil {
					t.Errorf("got %q; want the job failed, its one attempt used", r.out)
				}
				if !tt.wantErr && (r.err != nil || string(r.out[0]) != "0") {
					t.Errorf("got %q, %v; want the task rerun on executor 1 without counting a failure", r.out, r.err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the job did not end after its executor was lost")
			}
		})
	}
}

func TestApplicationRemovedFailsRunningJobs(t *testing.T) {
	started := make(chan struct{}, 2)
	a := echoApp(func(ctx context.Context, in []byte) ([]byte, error) {
		started <- struct{}{}
		<-ctx.Done() // the task runs until its executor stops
		return nil, ctx.Err()
	})
	d := startDriver(t, a, nil)
	startExecutor(t, d, a, 0, 1)
	client := asMaster(d)
	errc := make(chan error, 1)
	go func() {
		_, err := d.RunTasks(context.Background(), "task", inputs(2))
		errc <- err
	}()
	<-started // the job is queued and one of its tasks runs
	if _, err := client.ApplicationRemoved(context.Background(), connect.NewRequest(&driverv1.ApplicationRemovedRequest{
		AppId: d.AppID(), Message: "KILLED: killed on request",
	})); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "killed on request") {
			t.Errorf("got %v, want the job failed with the master's reason", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the running job did not end when the master removed the application")
	}
	if _, err := d.RunTasks(context.Background(), "task", inputs(1)); err == nil {
		t.Error("a job started after removal ran")
	}
}

func TestBadSparkPropertiesAreRejected(t *testing.T) {
	for _, conf := range []map[string]string{
		{"spark.task.maxFailures": "zero"},
		{"spark.scheduler.minRegisteredResourcesRatio": "1.5"},
		{"spark.scheduler.maxRegisteredResourcesWaitingTime": "-3s"},
	} {
		_, err := driver.New(driver.Config{
			Masters: []string{"http://127.0.0.1:1"}, URL: "http://127.0.0.1:2", App: echoApp(nil), ExecutorCommand: []string{"x"}, Conf: conf,
		})
		if err == nil || !strings.Contains(err.Error(), "--conf") {
			t.Errorf("conf %v: got %v, want a --conf error", conf, err)
		}
	}
}

func TestDriverRegistersWithTheFirstMasterThatAnswers(t *testing.T) {
	// A reserved port nothing listens on, and nothing will while the test runs.
	down := fmt.Sprintf("http://127.0.0.1:%d", tooltest.FreePorts(t, 1)[0])
	d := servicetest.Driver(t, driver.Config{
		Masters: []string{down, startMaster(t)}, App: echoApp(nil),
		ExecutorCommand: []string{"/bin/false"},
	})
	if !strings.HasPrefix(d.AppID(), "app-") {
		t.Errorf("app id %q", d.AppID())
	}
	d, err := servicetest.NewDriver(t, driver.Config{
		Masters: []string{down}, App: echoApp(nil),
		ExecutorCommand: []string{"/bin/false"}, RegisterInterval: time.Millisecond, UnreachableTimeout: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	err = d.Register(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no master answered within 20ms") {
		t.Errorf("got %v, want no master answered", err)
	}
}

// roundsLog is a log handler that closes reached once registration has
// passed its masters in rounds rounds.
type roundsLog struct {
	mu      sync.Mutex
	seen    int
	rounds  int
	reached chan struct{}
}

func (h *roundsLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *roundsLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *roundsLog) WithGroup(string) slog.Handler            { return h }
func (h *roundsLog) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r.Message == "master did not take the registration; trying the next" {
		if h.seen++; h.seen == h.rounds {
			close(h.reached)
		}
	}
	return nil
}

// TestRegistrationWaitsOutAMasterDownForLongerThanTenRounds: while no
// master answers at all — one restarting, its port closed — registration
// goes on until UnreachableTimeout (submit's --retry-timeout), not a fixed
// number of rounds, and registers once the master is back.
func TestRegistrationWaitsOutAMasterDownForLongerThanTenRounds(t *testing.T) {
	proxy := faultproxy.New(t, strings.TrimPrefix(startMaster(t), "http://"))
	proxy.Cut()
	h := &roundsLog{rounds: 30, reached: make(chan struct{})}
	d, err := servicetest.NewDriver(t, driver.Config{
		Masters: []string{proxy.URL}, App: echoApp(nil), ExecutorCommand: []string{"/bin/false"},
		RegisterInterval: time.Millisecond, Instruments: telemetry.Instruments{Logger: slog.New(h)},
	})
	if err != nil {
		t.Fatal(err)
	}
	registered := make(chan error, 1)
	go func() { registered <- d.Register(context.Background()) }()
	select {
	case <-h.reached:
	case err := <-registered:
		t.Fatalf("registration ended after %d rounds: %v", h.seen, err)
	}
	proxy.Heal()
	if err := <-registered; err != nil || !strings.HasPrefix(d.AppID(), "app-") {
		t.Fatalf("registration once the master is back: %v, app %q", err, d.AppID())
	}
}

func TestOnlyTheApplicationsOwnIDIsAnsweredByPing(t *testing.T) {
	a := echoApp(func(context.Context, []byte) ([]byte, error) { return nil, nil })
	d := startDriver(t, a, nil)
	client := asMaster(d)
	if _, err := client.Ping(context.Background(), connect.NewRequest(&driverv1.PingRequest{AppId: d.AppID()})); err != nil {
		t.Fatalf("ping for its application: %v", err)
	}
	_, err := client.Ping(context.Background(), connect.NewRequest(&driverv1.PingRequest{AppId: "app-20261129140000-9999"}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("ping for another application: %v, want not_found", err)
	}
}

func TestGetProgressAnswersTheDriversProgressForItsApplicationOnly(t *testing.T) {
	a := echoApp(func(context.Context, []byte) ([]byte, error) { return nil, nil })
	d := startDriver(t, a, nil)
	client := asMaster(d)
	resp, err := client.GetProgress(context.Background(), connect.NewRequest(&driverv1.GetProgressRequest{AppId: d.AppID()}))
	if err != nil {
		t.Fatalf("progress of its application: %v", err)
	}
	want := d.Progress()
	if got := resp.Msg; int(got.GetExecutors()) != want.Executors || int(got.GetRegistered()) != want.Registered ||
		int(got.GetTasks()) != want.Tasks || int(got.GetTasksDone()) != want.TasksDone {
		t.Errorf("GetProgress %v, want %+v", got, want)
	}
	_, err = client.GetProgress(context.Background(), connect.NewRequest(&driverv1.GetProgressRequest{AppId: "app-20261129140000-9999"}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("progress of another application: %v, want not_found", err)
	}
}

// GetProgress tells each task set — its tasks' counts, its failed attempts
// with their messages, its time — and what each executor ran.
func TestGetProgressTellsEachTaskSetAndWhatEachExecutorRan(t *testing.T) {
	var failed atomic.Bool
	a := echoApp(func(_ context.Context, in []byte) ([]byte, error) {
		if string(in) == "1" && failed.CompareAndSwap(false, true) {
			return nil, errors.New("the first attempt of task 1 fails")
		}
		return in, nil
	})
	d := startDriver(t, a, nil)
	startExecutor(t, d, a, 0, 1)
	if _, err := d.RunTasks(context.Background(), "task", inputs(3)); err != nil {
		t.Fatal(err)
	}
	resp, err := asMaster(d).GetProgress(context.Background(), connect.NewRequest(&driverv1.GetProgressRequest{AppId: d.AppID()}))
	if err != nil {
		t.Fatal(err)
	}
	sets := resp.Msg.GetTaskSets()
	if len(sets) != 1 {
		t.Fatalf("task sets %v, want the one run", sets)
	}
	ts := sets[0]
	if ts.GetTasks() != 3 || ts.GetSucceeded() != 3 || ts.GetRunning() != 0 || ts.GetFailedAttempts() != 1 || ts.GetEndedAt() == nil ||
		ts.GetEndedAt().AsTime().Before(ts.GetStartedAt().AsTime()) || ts.GetError() != "" ||
		len(ts.GetFailures()) != 1 || !strings.Contains(ts.GetFailures()[0], "the first attempt of task 1 fails") {
		t.Errorf("task set %v: want 3 tasks succeeded after one failed attempt, with its message, ended", ts)
	}
	execs := resp.Msg.GetExecutorTasks()
	if len(execs) != 1 || execs[0].GetExecutorId() != 0 || execs[0].GetTasksDone() != 3 || execs[0].GetTasksFailed() != 1 {
		t.Errorf("executor tasks %v, want executor 0 with 3 done and 1 failed", execs)
	}
}

func TestMessagesFromADeposedMasterAreRefused(t *testing.T) {
	m := startMaster(t)
	d := servicetest.Driver(t, driver.Config{
		Masters: []string{m}, App: echoApp(nil), ExecutorCommand: []string{"/bin/false"}, ExecutorMemoryMiB: 256,
	})
	client := asMaster(d)
	ctx := context.Background()
	if _, err := client.MasterChanged(ctx, connect.NewRequest(&driverv1.MasterChangedRequest{AppId: d.AppID(), MasterUrl: m, Epoch: 7})); err != nil {
		t.Fatal(err)
	}
	_, err := client.ApplicationRemoved(ctx, connect.NewRequest(&driverv1.ApplicationRemovedRequest{AppId: d.AppID(), Message: "KILLED", Epoch: 6}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("ApplicationRemoved from epoch 6 after epoch 7: %v, want failed_precondition", err)
	}
	_, err = client.ExecutorUpdated(ctx, connect.NewRequest(&driverv1.ExecutorUpdatedRequest{AppId: d.AppID(), ExecutorId: 0, Epoch: 6,
		State: masterv1.ExecutorState_EXECUTOR_STATE_LOST, WorkerLost: true}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("ExecutorUpdated from epoch 6 after epoch 7: %v, want failed_precondition", err)
	}
	_, err = client.MasterChanged(ctx, connect.NewRequest(&driverv1.MasterChangedRequest{AppId: d.AppID(), MasterUrl: m, Epoch: 6}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("MasterChanged from epoch 6 after epoch 7: %v, want failed_precondition", err)
	}
}

func TestExecutorsTheRecoveredMasterDidNotFindAreRemovedAndTheirTasksRunElsewhere(t *testing.T) {
	// Executor 0 ended while no master led, so no master reports its end:
	// the recovered master's account of what it found is how the driver
	// learns it, and its task runs again without counting as a failure.
	started := make(chan struct{}, 1)
	var calls atomic.Int32
	a := echoApp(func(ctx context.Context, in []byte) ([]byte, error) {
		if calls.Add(1) == 1 {
			started <- struct{}{}
			<-ctx.Done() // the first attempt hangs: its executor says nothing more
			return nil, ctx.Err()
		}
		return in, nil
	})
	d := startDriver(t, a, map[string]string{"spark.task.maxFailures": "1"})
	startExecutor(t, d, a, 0, 1)
	res := make(chan error, 1)
	go func() {
		_, err := d.RunTasks(context.Background(), "task", inputs(1))
		res <- err
	}()
	<-started
	startExecutor(t, d, a, 1, 1)
	client := asMaster(d)
	recovered := func(ids []int32, next int32) {
		t.Helper()
		if _, err := client.ExecutorsRecovered(context.Background(), connect.NewRequest(&driverv1.ExecutorsRecoveredRequest{
			AppId: d.AppID(), ExecutorIds: ids, NextExecutorId: next})); err != nil {
			t.Fatal(err)
		}
	}
	ended := func() bool {
		for _, tl := range d.Timelines() {
			if tl.ExecutorID == 0 {
				return !tl.Ended.IsZero()
			}
		}
		t.Fatal("executor 0 has no timeline")
		return false
	}
	// Found, or under an id the master has yet to give: kept.
	recovered([]int32{0, 1}, 2)
	recovered([]int32{1}, 0)
	if ended() {
		t.Fatal("an executor the master found, or one it has yet to give the id of, was removed")
	}
	recovered([]int32{1}, 2)
	if !ended() {
		t.Error("executor 0, which the recovered master did not find, is not ended")
	}
	select {
	case err := <-res:
		if err != nil {
			t.Errorf("job: %v; want the task rerun on executor 1 without counting a failure", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the job did not end after the recovered master did not find executor 0")
	}
	_, err := client.ExecutorsRecovered(context.Background(), connect.NewRequest(&driverv1.ExecutorsRecoveredRequest{AppId: "app-20261129140000-9999", NextExecutorId: 2}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("an account of another application's executors: %v, want not_found", err)
	}
}
