package worker

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	workerv1 "github.com/glint-cluster/glint/pkg/api/glint/worker/v1"
	"github.com/glint-cluster/glint/services/master"
)

func TestAnExecutorIDLaunchedHereIsNeverLaunchedAgainUntilItsApplicationFinishes(t *testing.T) {
	c := startCluster(t, clusterConfig{})
	ctx := context.Background()
	launch := &workerv1.LaunchExecutorRequest{
		MasterUrl: c.masterURL, AppId: testAppID, ExecutorId: 0, Cores: 1, MemoryMib: 64,
		Description: &masterv1.ApplicationDescription{Name: "t", Command: executorCommand(t, "exit", 0)},
	}
	if _, err := c.worker.client.LaunchExecutor(ctx, connect.NewRequest(launch)); err != nil {
		t.Fatalf("LaunchExecutor: %v", err)
	}
	first := c.worker.waitFinishedExecutor(t, testAppID, 0)
	// The same launch again — the master resending one whose answer it lost.
	_, err := c.worker.client.LaunchExecutor(ctx, connect.NewRequest(launch))
	if connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Fatalf("launching an executor that ran here already: %v, want already_exists", err)
	}
	if again := c.worker.waitFinishedExecutor(t, testAppID, 0); again.PID != first.PID {
		t.Fatalf("the executor ran a second time (pid %d after %d)", again.PID, first.PID)
	}
	if _, err := c.worker.client.ApplicationFinished(ctx, connect.NewRequest(&workerv1.ApplicationFinishedRequest{
		MasterUrl: c.masterURL, AppId: testAppID,
	})); err != nil {
		t.Fatal(err)
	}
	c.worker.mu.Lock()
	kept := len(c.worker.launched)
	c.worker.mu.Unlock()
	if kept != 0 {
		t.Fatalf("the ids of %d finished applications are kept", kept)
	}
}

// TestADriverIDThatRanHereIsNotLaunchedAgain: a LaunchDriver the master
// sent again (it lost the first answer) after the driver had already ended
// here is refused as AlreadyExists, which the master takes as launched.
func TestADriverIDThatRanHereIsNotLaunchedAgain(t *testing.T) {
	c := startCluster(t, clusterConfig{})
	ctx := context.Background()
	id := "driver-20261129140000-0000"
	launch := &workerv1.LaunchDriverRequest{
		MasterUrl: c.masterURL, DriverId: id,
		Description: &masterv1.DriverDescription{Name: "d", Cores: 1, MemoryMib: 64, Command: driverCommand(t, "exit")},
	}
	if _, err := c.worker.client.LaunchDriver(ctx, connect.NewRequest(launch)); err != nil {
		t.Fatalf("LaunchDriver: %v", err)
	}
	tooltest.Eventually(t, "the driver ended", func() bool { return len(c.worker.fetchJSON(t).FinishedDrivers) == 1 })
	if _, err := c.worker.client.LaunchDriver(ctx, connect.NewRequest(launch)); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Fatalf("launching a driver that ran here already: %v, want already_exists", err)
	}
	if st := c.worker.fetchJSON(t); len(st.Drivers) != 0 || len(st.FinishedDrivers) != 1 {
		t.Fatalf("the driver ran a second time: %+v", st)
	}
}

func TestAnExecutorTheMasterDoesNotKnowIsKilledAtTheNextHeartbeat(t *testing.T) {
	c := startCluster(t, clusterConfig{master: master.Config{WorkerTimeout: 2 * time.Second}, runMaster: true})
	// The master never placed this executor: a launch that arrived after the
	// master had given it up.
	launch := &workerv1.LaunchExecutorRequest{
		MasterUrl: c.masterURL, AppId: testAppID, ExecutorId: 0, Cores: 1, MemoryMib: 64,
		Description: &masterv1.ApplicationDescription{Name: "t", Command: executorCommand(t, "hold", 0)},
	}
	if _, err := c.worker.client.LaunchExecutor(context.Background(), connect.NewRequest(launch)); err != nil {
		t.Fatalf("LaunchExecutor: %v", err)
	}
	e := c.worker.waitFinishedExecutor(t, testAppID, 0)
	if e.State != "KILLED" || !strings.HasPrefix(e.Message, errUnknownToMaster.Error()) {
		t.Fatalf("executor unknown to the master ended %+v, want KILLED: %s", e, errUnknownToMaster)
	}
	assertGone(t, e.PID)
}

func TestAStoppingWorkerDecommissionsItselfSoItsKilledExecutorsDoNotFailTheApp(t *testing.T) {
	c := startCluster(t, clusterConfig{master: master.Config{MaxExecutorRetries: 1}})
	app := c.registerApp(t, executorCommand(t, "hold", 0), 1)
	c.waitMasterExecutor(t, app, 0, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)
	if err := c.worker.stop(); err != nil {
		t.Fatal(err)
	}
	if w := c.masterWorker(t, c.worker.ID()); w.GetState() != masterv1.WorkerState_WORKER_STATE_DECOMMISSIONED {
		t.Errorf("worker %s after it stopped, want DECOMMISSIONED", w.GetState())
	}
	if a := c.masterApp(t, app); a.GetState() == masterv1.ApplicationState_APPLICATION_STATE_FAILED {
		t.Errorf("the stopping worker's killed executor failed the app: %q", a.GetStatusMessage())
	}
}

// A worker follows only the masters it was given: a MasterChanged naming
// another URL, though it carries the cluster token, is refused and changes
// nothing — the worker's calls, and the cluster token in them, never reach
// that URL — while one naming another of its masters moves it there.
func TestAWorkerFollowsOnlyTheMastersItWasGiven(t *testing.T) {
	other := startMaster(t, master.Config{}, false)
	c := startCluster(t, clusterConfig{otherMasters: []string{other}})
	evil, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { evil.Close() })
	var reached atomic.Int32
	go func() {
		for {
			conn, err := evil.Accept()
			if err != nil {
				return
			}
			reached.Add(1)
			conn.Close()
		}
	}()
	evilURL := "http://" + evil.Addr().String()
	ctx := context.Background()
	c.worker.mu.Lock()
	before := fmt.Sprintf("active %q route %q preferred %q changes %d epoch %d", c.worker.active, c.worker.route, c.worker.preferred, c.worker.masterChanges, c.worker.epoch)
	c.worker.mu.Unlock()
	for _, url := range []string{evilURL, "http://localhost:" + strings.TrimPrefix(evilURL, "http://127.0.0.1:"), "http://attacker.example:7077"} {
		_, err := c.worker.client.MasterChanged(ctx, connect.NewRequest(&workerv1.MasterChangedRequest{MasterUrl: url, Epoch: 9e18}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "master_url") ||
			!strings.Contains(err.Error(), "not one of this worker's masters") {
			t.Errorf("MasterChanged to %s: %v, want invalid_argument naming master_url, not one of the worker's masters", url, err)
		}
	}
	c.worker.mu.Lock()
	after := fmt.Sprintf("active %q route %q preferred %q changes %d epoch %d", c.worker.active, c.worker.route, c.worker.preferred, c.worker.masterChanges, c.worker.epoch)
	c.worker.mu.Unlock()
	if after != before {
		t.Errorf("the worker's master and epoch are %s after the refused announcements, were %s", after, before)
	}
	if _, err := c.worker.client.MasterChanged(ctx, connect.NewRequest(&workerv1.MasterChangedRequest{MasterUrl: other})); err != nil {
		t.Fatal(err)
	}
	oc := &cluster{masterURL: other, master: newMasterClient(t, other)}
	tooltest.Eventually(t, "the worker registered with its other master", func() bool {
		w := oc.masterWorker(t, c.worker.ID())
		return w != nil && w.GetState() == masterv1.WorkerState_WORKER_STATE_ALIVE
	})
	if n := reached.Load(); n != 0 {
		t.Errorf("the URL named got %d connections, want none", n)
	}
}

func TestCommandsFromADeposedMasterAreRefused(t *testing.T) {
	c := startCluster(t, clusterConfig{})
	ctx := context.Background()
	// A newer leader announced itself (epoch 7) and moved the worker back to
	// this master's URL; then a command of epoch 6 arrives.
	if _, err := c.worker.client.MasterChanged(ctx, connect.NewRequest(&workerv1.MasterChangedRequest{MasterUrl: c.masterURL, Epoch: 7})); err != nil {
		t.Fatal(err)
	}
	launch := &workerv1.LaunchExecutorRequest{
		MasterUrl: c.masterURL, AppId: testAppID, ExecutorId: 0, Cores: 1, MemoryMib: 64, Epoch: 6,
		Description: &masterv1.ApplicationDescription{Name: "t", Command: executorCommand(t, "exit", 0)},
	}
	for name, call := range map[string]func() error{
		"launch an executor": func() error {
			_, err := c.worker.client.LaunchExecutor(ctx, connect.NewRequest(launch))
			return err
		},
		"kill an executor": func() error {
			_, err := c.worker.client.KillExecutor(ctx, connect.NewRequest(&workerv1.KillExecutorRequest{MasterUrl: c.masterURL, AppId: testAppID, Epoch: 6}))
			return err
		},
		"finish an application": func() error {
			_, err := c.worker.client.ApplicationFinished(ctx, connect.NewRequest(&workerv1.ApplicationFinishedRequest{MasterUrl: c.masterURL, AppId: testAppID, Epoch: 6}))
			return err
		},
		"take the worker back": func() error {
			_, err := c.worker.client.MasterChanged(ctx, connect.NewRequest(&workerv1.MasterChangedRequest{MasterUrl: c.masterURL, Epoch: 6}))
			return err
		},
	} {
		if err := call(); connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "deposed") {
			t.Errorf("%s with epoch 6 after epoch 7: %v, want failed_precondition naming a deposed master", name, err)
		}
	}
	if _, ok := c.worker.executor(t, testAppID, 0); ok {
		t.Error("the deposed master's launch ran")
	}
}
