package master

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// failingApp is an application on a one-core worker whose executors the test
// reports on as their worker would.
type failingApp struct {
	c      *cluster
	worker string
	app    string
}

func newFailingApp(t *testing.T, maxRetries int) *failingApp {
	c := newCluster(t, Config{MaxExecutorRetries: maxRetries})
	f := &failingApp{c: c, worker: c.registerWorker(t, newPeer(t), 7078, 1, 4096)}
	f.app = c.registerApp(t, newPeer(t), appDesc(512, 1))
	return f
}

// current is the application's newest executor.
func (f *failingApp) current(t *testing.T) int32 {
	t.Helper()
	execs := f.c.app(t, f.app).GetExecutors()
	if len(execs) == 0 {
		t.Fatal("the application has no executor")
	}
	return execs[len(execs)-1].GetId()
}

func (f *failingApp) report(t *testing.T, exec int32, state masterv1.ExecutorState) {
	t.Helper()
	if _, err := f.c.client.ExecutorStateChanged(context.Background(), connect.NewRequest(&masterv1.ExecutorStateChangedRequest{
		AppId: f.app, ExecutorId: exec, State: state, WorkerId: f.worker, ExitStatus: ptr[int32](1), Message: "boom",
	})); err != nil {
		t.Fatalf("report executor %d %s: %v", exec, lifecycle.Name(state), err)
	}
}

// relaunch lets the relaunch backoff end and the next executor be placed.
func (f *failingApp) relaunch() {
	f.c.clock.Advance(time.Minute)
	f.c.srv.wake()
}

func (f *failingApp) state(t *testing.T) string { return lifecycle.Name(f.c.app(t, f.app).GetState()) }

func TestAnExecutorReachingRunningStartsTheRetryCountOver(t *testing.T) {
	f := newFailingApp(t, 2)
	f.report(t, f.current(t), masterv1.ExecutorState_EXECUTOR_STATE_FAILED)
	f.relaunch()
	// The next one runs a healthy while, then fails: one failure in a row.
	e := f.current(t)
	f.report(t, e, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)
	f.c.clock.Advance(10 * time.Second)
	f.report(t, e, masterv1.ExecutorState_EXECUTOR_STATE_FAILED)
	if got := f.state(t); got == "FAILED" {
		t.Fatalf("app FAILED after failure, success, failure with max retries 2: %q", f.c.app(t, f.app).GetStatusMessage())
	}
}

func TestANegativeMaxExecutorRetriesNeverFailsTheApp(t *testing.T) {
	f := newFailingApp(t, -1)
	for range 12 {
		f.report(t, f.current(t), masterv1.ExecutorState_EXECUTOR_STATE_FAILED)
		f.relaunch()
	}
	if got := f.state(t); got == "FAILED" {
		t.Fatalf("app FAILED with max retries -1: %q", f.c.app(t, f.app).GetStatusMessage())
	}
}

func TestAFullCompletedListDropsItsOldestTenth(t *testing.T) {
	var r retained[int]
	for i := range 21 {
		r.add(i, 1, 20, 1<<20)
	}
	// The 21st found 20 kept: the oldest 2 (a tenth) went.
	if len(r.items) != 19 || r.items[0] != 2 || r.items[18] != 20 {
		t.Fatalf("kept %v, want 2…20", r.items)
	}
}

func TestARepeatedRegistrationGetsTheApplicationItMade(t *testing.T) {
	c := newCluster(t, Config{})
	dp := newPeer(t)
	token := rpc.NewToken()
	register := func(driverURL string) string {
		t.Helper()
		resp, err := c.client.RegisterApplication(context.Background(), connect.NewRequest(&masterv1.RegisterApplicationRequest{
			AppToken: token, MasterToken: rpc.NewToken(), Description: appDesc(512, 1), DriverUrl: driverURL}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.GetAppId()
	}
	first := register(dp.url)
	if again := register(dp.url); again != first {
		t.Fatalf("the same driver registering again got %s, want its application %s", again, first)
	}
	if other := register(newPeer(t).url); other == first {
		t.Fatalf("a driver elsewhere got the first driver's application %s", first)
	}
	if n := len(c.srv.clusterState().GetActiveApps()); n != 2 {
		t.Fatalf("%d active applications, want 2", n)
	}
}

func TestATargetOfZeroFromDynamicAllocationDoesNotMakeExitsAskedFor(t *testing.T) {
	f := newFailingApp(t, 10)
	e := f.current(t)
	f.report(t, e, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)
	// Dynamic allocation lowers the target to 0 while the application runs.
	if _, err := f.c.client.RequestExecutors(context.Background(), connect.NewRequest(&masterv1.RequestExecutorsRequest{AppId: f.app})); err != nil {
		t.Fatal(err)
	}
	f.report(t, e, masterv1.ExecutorState_EXECUTOR_STATE_FAILED)
	if msg := f.c.app(t, f.app).GetStatusMessage(); !strings.Contains(msg, "failed in a row") {
		t.Fatalf("an executor that crashed under a target of 0: status %q, want it counted as a failure", msg)
	}
}
