package master

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/lifecycle"
)

// TestARecoveringMasterTakesTheEndAWorkerKeptAndRelaunchesNothing: a
// supervised driver ended while its master was down; its worker's
// registration with the recovering master carries the end. The driver is
// FINISHED, and the recovery relaunches nothing, though the worker no longer
// runs the driver.
func TestARecoveringMasterTakesTheEndAWorkerKeptAndRelaunchesNothing(t *testing.T) {
	dir := t.TempDir()
	wp := newPeer(t)
	worker, app := keptCluster(t, dir, wp, newPeer(t), true)
	c := recoveringCluster(t, dir, Config{})
	driver := c.srv.clusterState().GetActiveDrivers()[0].GetId()

	_, err := c.client.RegisterWorker(context.Background(), connect.NewRequest(&masterv1.RegisterWorkerRequest{
		WorkerId: worker, Host: "127.0.0.1", Port: 7078, Cores: 4, MemoryMib: 4096, WorkerUrl: wp.url,
		Executors: []*masterv1.RunningExecutor{{AppId: app, ExecutorId: 0, Cores: 1, MemoryMib: 512}},
		FinishedDrivers: []*masterv1.DriverStateChangedRequest{
			{DriverId: driver, State: masterv1.DriverState_DRIVER_STATE_FINISHED, WorkerId: worker, Message: "exit code 0"},
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	c.srv.mu.Lock()
	c.srv.completeRecoveryLocked(context.Background())
	c.srv.mu.Unlock()
	st := c.srv.clusterState()
	if len(st.GetActiveDrivers()) != 0 {
		t.Fatalf("active drivers %v after the recovery: want none, the driver finished", st.GetActiveDrivers())
	}
	if ds := st.GetCompletedDrivers(); len(ds) != 1 || ds[0].GetId() != driver || lifecycle.Name(ds[0].GetState()) != "FINISHED" {
		t.Fatalf("completed drivers %v, want %s FINISHED", ds, driver)
	}
}

// TestAHeartbeatCarriesAnEndOnceApplied: an executor's end that a worker
// kept (its report went unanswered) comes with each heartbeat until one is
// answered; the master applies it once, so one end is one failure in a row.
func TestAHeartbeatCarriesAnEndOnceApplied(t *testing.T) {
	c := newCluster(t, Config{MaxExecutorRetries: 10})
	wp, dp := newPeer(t), newPeer(t)
	worker := c.registerWorker(t, wp, 7078, 1, 4096)
	app := c.registerApp(t, dp, appDesc(512, 1))
	wp.expect(t, "LaunchExecutor "+app+"/0")
	end := &masterv1.ExecutorStateChangedRequest{
		AppId: app, ExecutorId: 0, State: masterv1.ExecutorState_EXECUTOR_STATE_FAILED, WorkerId: worker, Message: "exit code 1",
	}
	for range 2 {
		resp, err := c.client.Heartbeat(context.Background(), connect.NewRequest(&masterv1.HeartbeatRequest{
			WorkerId: worker, FinishedExecutors: []*masterv1.ExecutorStateChangedRequest{end},
		}))
		if err != nil || resp.Msg.GetReregister() {
			t.Fatalf("heartbeat: %v %v", resp, err)
		}
	}
	c.srv.mu.Lock()
	a := c.srv.apps[app]
	_, running := a.executors[0]
	retries := a.retryCount
	c.srv.mu.Unlock()
	if running || retries != 1 {
		t.Fatalf("executor 0 still listed %v, failures in a row %d: want it ended, counted once", running, retries)
	}
	dp.expect(t, "ExecutorUpdated "+app+"/0 FAILED")
}

// TestFinalStatesAWorkerCarriesAreBounded: a registration or heartbeat with
// more final states than a worker keeps is refused before anything is applied.
func TestFinalStatesAWorkerCarriesAreBounded(t *testing.T) {
	c := newCluster(t, Config{})
	worker := c.registerWorker(t, newPeer(t), 7078, 1, 4096)
	many := make([]*masterv1.DriverStateChangedRequest, 1025)
	for i := range many {
		many[i] = &masterv1.DriverStateChangedRequest{DriverId: "driver-20261129140000-0000", State: masterv1.DriverState_DRIVER_STATE_FINISHED, WorkerId: worker}
	}
	_, err := c.client.Heartbeat(context.Background(), connect.NewRequest(&masterv1.HeartbeatRequest{WorkerId: worker, FinishedDrivers: many}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("a heartbeat with 1025 final states: %v, want invalid_argument", err)
	}
	_, err = c.client.Heartbeat(context.Background(), connect.NewRequest(&masterv1.HeartbeatRequest{WorkerId: worker,
		FinishedDrivers: []*masterv1.DriverStateChangedRequest{{DriverId: "driver-20261129140000-0000", State: masterv1.DriverState_DRIVER_STATE_RUNNING, WorkerId: worker}}}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("a heartbeat carrying a driver RUNNING as final: %v, want invalid_argument", err)
	}
}

// TestADriverWhoseLaunchWasLostWithItsMasterIsLaunchedAgain: the master
// kept a driver as launched on a worker and was killed before the launch
// reached it; the worker re-registers with the recovering master neither
// running the driver nor carrying its end. The driver never ran: it waits
// again under its own id and is launched once the master is ALIVE, not
// ended in error nor relaunched as another driver.
func TestADriverWhoseLaunchWasLostWithItsMasterIsLaunchedAgain(t *testing.T) {
	dir := t.TempDir()
	wp := newPeer(t)
	worker, app := keptCluster(t, dir, wp, newPeer(t), true)
	c := recoveringCluster(t, dir, Config{})
	driver := c.srv.clusterState().GetActiveDrivers()[0].GetId()

	_, err := c.client.RegisterWorker(context.Background(), connect.NewRequest(&masterv1.RegisterWorkerRequest{
		WorkerId: worker, Host: "127.0.0.1", Port: 7078, Cores: 4, MemoryMib: 4096, WorkerUrl: wp.url,
		Executors: []*masterv1.RunningExecutor{{AppId: app, ExecutorId: 0, Cores: 1, MemoryMib: 512}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if d := c.driver(t, driver); lifecycle.Name(d.GetState()) != "SUBMITTED" {
		t.Fatalf("the driver whose launch was lost, once its worker re-registered without it: %s %q, want SUBMITTED", lifecycle.Name(d.GetState()), d.GetMessage())
	}
	c.srv.mu.Lock()
	c.srv.completeRecoveryLocked(context.Background())
	c.srv.mu.Unlock()
	c.srv.wake()
	wp.expect(t, "LaunchDriver "+driver)
	st := c.srv.clusterState()
	if len(st.GetActiveDrivers()) != 1 || len(st.GetCompletedDrivers()) != 0 {
		t.Fatalf("active drivers %v, completed %v: want %s alone, launched again", st.GetActiveDrivers(), st.GetCompletedDrivers(), driver)
	}
}
