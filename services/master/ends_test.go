package master

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	workerv1 "github.com/glint-cluster/glint/pkg/api/glint/worker/v1"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// scrape reads the master's /metrics, the handler Prometheus scrapes: each
// sample by its series as exposed (`name{label="value"}`).
func (c *cluster) scrape(t *testing.T) map[string]float64 {
	t.Helper()
	resp, err := http.Get(c.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("/metrics: %s %s", resp.Status, b)
	}
	samples := map[string]float64{}
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		line := lines.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		samples[line[:i]] = v
	}
	return samples
}

// wantSamples checks the samples named, each of which must be exposed.
func wantSamples(t *testing.T, got map[string]float64, want map[string]float64) {
	t.Helper()
	for series, v := range want {
		if g, ok := got[series]; !ok || g != v {
			t.Errorf("%s = %v (exposed %v), want %v", series, g, ok, v)
		}
	}
}

// clusterDriver submits a driver, has the worker at wp take it and
// registers its application, RUNNING on the worker's executor.
func clusterDriver(t *testing.T, c *cluster, wp *peer) (driver, app string) {
	t.Helper()
	driver = submitDriver(t, c, false)
	wp.expect(t, "LaunchDriver "+driver)
	c.waitLaunched(t, driver)
	resp, err := c.client.RegisterApplication(context.Background(), connect.NewRequest(&masterv1.RegisterApplicationRequest{
		AppToken: rpc.NewToken(), MasterToken: rpc.NewToken(), Description: appDesc(512, 1), DriverUrl: newPeer(t).url, DriverId: driver}))
	if err != nil {
		t.Fatal(err)
	}
	app = resp.Msg.GetAppId()
	wp.expect(t, "LaunchExecutor "+app+"/0")
	return driver, app
}

func (c *cluster) driverEnds(t *testing.T, driver, worker string, state masterv1.DriverState, message string) {
	t.Helper()
	if _, err := c.client.DriverStateChanged(context.Background(), connect.NewRequest(&masterv1.DriverStateChangedRequest{
		DriverId: driver, WorkerId: worker, State: state, Message: message,
	})); err != nil {
		t.Fatal(err)
	}
}

// TestAnApplicationEndsAsItsDriverDid: a cluster-mode application ends as
// its driver's end says — one the driver unregistered FINISHED, then exited
// non-zero (wordcount on a missing file), is FAILED with the driver's exit —
// and every end is counted once, when it is settled.
func TestAnApplicationEndsAsItsDriverDid(t *testing.T) {
	const exited1 = "exited with code 1"
	for _, tc := range []struct {
		name       string
		unregister bool
		driver     masterv1.DriverState
		want       string
		message    string
	}{
		{"unregistered, then exited 0", true, masterv1.DriverState_DRIVER_STATE_FINISHED, "FINISHED", "unregistered by its driver"},
		{"unregistered, then exited 1", true, masterv1.DriverState_DRIVER_STATE_FAILED, "FAILED", "ended FAILED: " + exited1 + " after it unregistered"},
		{"unregistered, then killed", true, masterv1.DriverState_DRIVER_STATE_KILLED, "FINISHED", "unregistered by its driver"},
		{"exited 1 without unregistering", false, masterv1.DriverState_DRIVER_STATE_FAILED, "FAILED", "ended FAILED: " + exited1},
		{"killed without unregistering", false, masterv1.DriverState_DRIVER_STATE_KILLED, "KILLED", "ended KILLED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, Config{})
			wp := newPeer(t)
			worker := c.registerWorker(t, wp, 7078, 4, 4096)
			driver, app := clusterDriver(t, c, wp)
			if tc.unregister {
				if _, err := c.client.UnregisterApplication(context.Background(), connect.NewRequest(&masterv1.UnregisterApplicationRequest{AppId: app})); err != nil {
					t.Fatal(err)
				}
				// Its driver still runs: the end is not settled, nor counted.
				wantSamples(t, c.scrape(t), map[string]float64{`glint_master_apps_ended_total{state="finished"}`: 0})
			}
			c.driverEnds(t, driver, worker, tc.driver, exited1)
			a := c.app(t, app)
			if got := lifecycle.Name(a.GetState()); got != tc.want || !strings.Contains(a.GetStatusMessage(), tc.message) {
				t.Errorf("application %s %q, want %s %q", got, a.GetStatusMessage(), tc.want, tc.message)
			}
			samples := c.scrape(t)
			for _, st := range []string{"FINISHED", "FAILED", "KILLED"} {
				want := 0.0
				if st == tc.want {
					want = 1
				}
				wantSamples(t, samples, map[string]float64{`glint_master_apps_ended_total{state="` + strings.ToLower(st) + `"}`: want})
			}
			wantSamples(t, samples, map[string]float64{`glint_master_drivers_ended_total{state="` + lifecycle.Label(tc.driver) + `"}`: 1})
		})
	}
}

// TestAFailedApplicationRecoveredAfterItsDriverEndsAsTheDriverDid: a master
// that recovers an application its driver unregistered FINISHED while the
// driver still ran settles it when the driver ends, and counts no end it
// reloaded already settled.
func TestAFailedApplicationRecoveredAfterItsDriverEndsAsTheDriverDid(t *testing.T) {
	dir := t.TempDir()
	st := mustOpen(t, dir)
	c := newCluster(t, Config{Store: st})
	wp := newPeer(t)
	worker := c.registerWorker(t, wp, 7078, 4, 4096)
	driver, app := clusterDriver(t, c, wp)
	settled := c.registerApp(t, newPeer(t), appDesc(512, 1))
	for _, id := range []string{app, settled} {
		if _, err := c.client.UnregisterApplication(context.Background(), connect.NewRequest(&masterv1.UnregisterApplicationRequest{AppId: id})); err != nil {
			t.Fatal(err)
		}
	}
	wantSamples(t, c.scrape(t), map[string]float64{`glint_master_apps_ended_total{state="finished"}`: 1})
	c.srv.mu.Lock()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	c.srv.mu.Unlock()

	r := recoveringCluster(t, dir, Config{})
	wantSamples(t, r.scrape(t), map[string]float64{`glint_master_apps_ended_total{state="finished"}`: 0})
	if _, err := r.client.RegisterWorker(context.Background(), connect.NewRequest(&masterv1.RegisterWorkerRequest{
		WorkerId: worker, Host: "127.0.0.1", Port: 7078, Cores: 4, MemoryMib: 4096, WorkerUrl: wp.url,
		DriverIds: []string{driver},
	})); err != nil {
		t.Fatal(err)
	}
	r.driverEnds(t, driver, worker, masterv1.DriverState_DRIVER_STATE_FAILED, "exited with code 2")
	if a := r.app(t, app); lifecycle.Name(a.GetState()) != "FAILED" || !strings.Contains(a.GetStatusMessage(), "exited with code 2") {
		t.Errorf("recovered application %s %q after its driver failed, want FAILED with the driver's exit", lifecycle.Name(a.GetState()), a.GetStatusMessage())
	}
	wantSamples(t, r.scrape(t), map[string]float64{
		`glint_master_apps_ended_total{state="finished"}`: 0,
		`glint_master_apps_ended_total{state="failed"}`:   1,
	})
}

// TestAnApplicationThatLosesItsExecutorsWaitsAgainWithTheReason: a running
// application whose worker is lost, with no other worker to go to, is
// WAITING again and says why on every view; a new worker runs it again.
func TestAnApplicationThatLosesItsExecutorsWaitsAgainWithTheReason(t *testing.T) {
	c := newCluster(t, Config{WorkerTimeout: 60 * time.Second})
	wp, dp := newPeer(t), newPeer(t)
	worker := c.registerWorker(t, wp, 7078, 2, 4096)
	app := c.registerApp(t, dp, appDesc(512, 1))
	wp.expectAll(t, "LaunchExecutor "+app+"/0", "LaunchExecutor "+app+"/1")
	if got := lifecycle.Name(c.app(t, app).GetState()); got != "RUNNING" {
		t.Fatalf("application %s with executors, want RUNNING", got)
	}
	c.clock.Advance(61 * time.Second)
	c.srv.checkWorkerTimeouts(context.Background())
	a := c.app(t, app)
	if lifecycle.Name(a.GetState()) != "WAITING" || a.GetStatusMessage() != "no alive workers" {
		t.Fatalf("application %s %q after its only worker was lost, want WAITING for alive workers", lifecycle.Name(a.GetState()), a.GetStatusMessage())
	}
	for _, page := range []string{"/", "/json"} {
		resp, err := http.Get(c.url + page)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), "no alive workers") || !strings.Contains(string(b), "WAITING") {
			t.Errorf("%s does not show the application WAITING for alive workers", page)
		}
	}
	samples := c.scrape(t)
	wantSamples(t, samples, map[string]float64{
		`glint_master_executor_ends_total{reason="lost_worker",state="lost"}`:      2,
		`glint_master_apps{state="waiting"}`:                                       1,
		`glint_master_worker_timeout_seconds`:                                      60,
		`glint_master_worker_timed_out_timestamp_seconds{worker="` + worker + `"}`: float64(c.clock.Now().Unix()),
	})
	c.registerWorker(t, wp, 7079, 2, 4096)
	wp.expect(t, "LaunchExecutor "+app+"/")
	if a := c.app(t, app); lifecycle.Name(a.GetState()) != "RUNNING" || a.GetStatusMessage() != "" {
		t.Errorf("application %s %q with a new executor, want RUNNING", lifecycle.Name(a.GetState()), a.GetStatusMessage())
	}
}

// TestExecutorsThatKeepFailingLeaveTheirApplicationWaitingWithTheLastMessage:
// executors that fail before they run hold their application WAITING with
// the backoff and the last failure's message, and are counted by the launch
// step that failed.
func TestExecutorsThatKeepFailingLeaveTheirApplicationWaitingWithTheLastMessage(t *testing.T) {
	f := newFailingApp(t, 10)
	e := f.current(t)
	f.report(t, e, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)
	f.report(t, e, masterv1.ExecutorState_EXECUTOR_STATE_EXITED)
	f.relaunch()
	e = f.current(t)
	f.reportWith(t, e, masterv1.ExecutorState_EXECUTOR_STATE_FAILED, `process.start: fork/exec /nope: no such file or directory`)
	a := f.c.app(t, f.app)
	if lifecycle.Name(a.GetState()) != "WAITING" || !strings.Contains(a.GetStatusMessage(), "failed in a row") ||
		!strings.HasSuffix(a.GetStatusMessage(), "; last: process.start: fork/exec /nope: no such file or directory") {
		t.Errorf("application %s %q, want WAITING with the backoff and the last message", lifecycle.Name(a.GetState()), a.GetStatusMessage())
	}
	wantSamples(t, f.c.scrape(t), map[string]float64{
		`glint_master_executor_ends_total{reason="exited",state="exited"}`:        1,
		`glint_master_executor_ends_total{reason="launch_failed",state="failed"}`: 1,
		`glint_master_executor_launch_failures_total{step="process.start"}`:       1,
		`glint_master_executor_launch_failures_total{step="unknown"}`:             0,
	})
}

// TestExecutorEndsAreCountedByReason: each end is counted once, by its
// state and why — out of memory by its message, killed with its
// application, failed to launch by the step the worker names or, when the
// worker did not take the launch, the master's request.
func TestExecutorEndsAreCountedByReason(t *testing.T) {
	f := newFailingApp(t, 10)
	e := f.current(t)
	f.report(t, e, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)
	f.reportWith(t, e, masterv1.ExecutorState_EXECUTOR_STATE_FAILED, "killed: over its memory limit of 512 MiB")
	f.relaunch()
	f.reportWith(t, f.current(t), masterv1.ExecutorState_EXECUTOR_STATE_FAILED, "exec format error")
	f.relaunch()
	f.current(t)
	if _, err := f.c.client.KillApplication(context.Background(), connect.NewRequest(&masterv1.KillApplicationRequest{AppId: f.app})); err != nil {
		t.Fatal(err)
	}
	// A worker that refuses the launch outright.
	c := newCluster(t, Config{})
	refusing := &refusingWorker{workerPeer: workerPeer{&peer{messages: make(chan string, 100)}}}
	refusing.url = serveWorker(t, refusing)
	c.registerWorker(t, refusing.peer, 7078, 1, 4096)
	c.registerApp(t, newPeer(t), appDesc(512, 1))
	refusing.expect(t, "refused LaunchExecutor")
	tooltest.Eventually(t, "the refused launch counted", func() bool {
		return c.scrape(t)[`glint_master_executor_launch_failures_total{step="request"}`] == 1
	})

	wantSamples(t, f.c.scrape(t), map[string]float64{
		`glint_master_executor_ends_total{reason="oom",state="failed"}`:           1,
		`glint_master_executor_ends_total{reason="launch_failed",state="failed"}`: 1,
		`glint_master_executor_ends_total{reason="killed",state="killed"}`:        1,
		`glint_master_executor_launch_failures_total{step="unknown"}`:             1,
		`glint_master_apps_ended_total{state="killed"}`:                           1,
	})
}

func (f *failingApp) reportWith(t *testing.T, exec int32, state masterv1.ExecutorState, message string) {
	t.Helper()
	if _, err := f.c.client.ExecutorStateChanged(context.Background(), connect.NewRequest(&masterv1.ExecutorStateChangedRequest{
		AppId: f.app, ExecutorId: exec, State: state, WorkerId: f.worker, ExitStatus: ptr[int32](1), Message: message,
	})); err != nil {
		t.Fatalf("report executor %d %s: %v", exec, lifecycle.Name(state), err)
	}
}

// refusingWorker refuses every LaunchExecutor for good.
type refusingWorker struct {
	workerPeer
}

func (w *refusingWorker) LaunchExecutor(_ context.Context, r *connect.Request[workerv1.LaunchExecutorRequest]) (*connect.Response[workerv1.LaunchExecutorResponse], error) {
	w.record("refused LaunchExecutor %s/%d", r.Msg.GetAppId(), r.Msg.GetExecutorId())
	return nil, connect.NewError(connect.CodeFailedPrecondition, nil)
}

// TestAFinishedApplicationKeepsTheCoresItHeld: a completed application
// shows the most cores it held, though it holds none.
func TestAFinishedApplicationKeepsTheCoresItHeld(t *testing.T) {
	c := newCluster(t, Config{})
	wp, dp := newPeer(t), newPeer(t)
	c.registerWorker(t, wp, 7078, 3, 4096)
	app := c.registerApp(t, dp, appDesc(512, 1))
	wp.expectAll(t, "LaunchExecutor "+app+"/0", "LaunchExecutor "+app+"/1", "LaunchExecutor "+app+"/2")
	if _, err := c.client.UnregisterApplication(context.Background(), connect.NewRequest(&masterv1.UnregisterApplicationRequest{AppId: app})); err != nil {
		t.Fatal(err)
	}
	if a := c.app(t, app); a.GetCoresGranted() != 0 || a.GetCoresPeak() != 3 {
		t.Errorf("finished application: %d cores granted, %d at most; want 0 and 3", a.GetCoresGranted(), a.GetCoresPeak())
	}
	resp, err := http.Get(c.url + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	page := string(b)
	row := page[strings.Index(page, `data-app="`+app+`"`):]
	row = row[:strings.Index(row, "</tr>")]
	if !strings.Contains(row, "<td>3</td>") {
		t.Errorf("the overview's row of the finished application shows no 3 cores:\n%s", row)
	}
	resp, err = http.Get(c.url + "/app/" + app)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b, _ := io.ReadAll(resp.Body); !strings.Contains(string(b), "<dd>3 at most, while it ran</dd>") {
		t.Errorf("the finished application's page shows no 3 cores held at most:\n%s", b)
	}
}

// TestARecoveredApplicationKeepsTheCoresItHeld: the most cores an
// application held is kept with it, so a master that recovers it, before
// its executors are reported again, still knows.
func TestARecoveredApplicationKeepsTheCoresItHeld(t *testing.T) {
	dir := t.TempDir()
	_, app := keptCluster(t, dir, newPeer(t), newPeer(t), false)
	c := recoveringCluster(t, dir, Config{})
	if a := c.app(t, app); a.GetCoresGranted() != 0 || a.GetCoresPeak() != 4 {
		t.Errorf("recovered application: %d cores granted, %d at most; want 0 until its executors are reported, and the 4 it held", a.GetCoresGranted(), a.GetCoresPeak())
	}
}

// TestAnApplicationThatWantsNoExecutorsRunsOnWithoutThem: dynamic
// allocation's target of 0 leaves an application without executors that
// is not stuck: it stays RUNNING.
func TestAnApplicationThatWantsNoExecutorsRunsOnWithoutThem(t *testing.T) {
	f := newFailingApp(t, 10)
	e := f.current(t)
	f.report(t, e, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)
	if _, err := f.c.client.RequestExecutors(context.Background(), connect.NewRequest(&masterv1.RequestExecutorsRequest{AppId: f.app})); err != nil {
		t.Fatal(err)
	}
	f.c.clock.Advance(time.Minute)
	f.report(t, e, masterv1.ExecutorState_EXECUTOR_STATE_EXITED)
	f.relaunch()
	if a := f.c.app(t, f.app); lifecycle.Name(a.GetState()) != "RUNNING" || len(a.GetExecutors()) != 1 {
		t.Errorf("application %s %q with %d executors under a target of 0, want RUNNING with none added", lifecycle.Name(a.GetState()), a.GetStatusMessage(), len(a.GetExecutors()))
	}
}
