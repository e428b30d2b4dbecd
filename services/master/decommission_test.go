package master

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/lifecycle"
)

func TestDecommissioningAWorkerReleasesItsExecutorsCoresSoReplacementsLandElsewhere(t *testing.T) {
	c := newCluster(t, Config{MaxExecutorRetries: 1})
	first, second, dp := newPeer(t), newPeer(t), newPeer(t)
	w1 := c.registerWorker(t, first, 7078, 2, 4096)
	desc := appDesc(512, 1)
	desc.MaxCores = ptr[int32](2)
	desc.InitialExecutorLimit = ptr[int32](2)
	app := c.registerApp(t, dp, desc)
	first.expectAll(t, "LaunchExecutor "+app+"/0", "LaunchExecutor "+app+"/1")
	c.registerWorker(t, second, 7079, 2, 4096)

	resp, err := c.client.DecommissionWorker(context.Background(), connect.NewRequest(&masterv1.DecommissionWorkerRequest{WorkerId: w1}))
	if err != nil || resp.Msg.GetAlready() {
		t.Fatalf("decommission %s: %v, already=%v", w1, err, resp.Msg.GetAlready())
	}
	first.expect(t, "DecommissionWorker")
	dp.expect(t, "ExecutorUpdated "+app+"/1 DECOMMISSIONED")
	// The cores of executors 0 and 1 are the app's again at once, and they
	// no longer count against its executor limit: their replacements start
	// on the other worker while they finish.
	second.expectAll(t, "LaunchExecutor "+app+"/2", "LaunchExecutor "+app+"/3")
	if a := c.app(t, app); a.GetCoresGranted() != 2 {
		t.Errorf("app holds %d cores, want 2 (the replacements')", a.GetCoresGranted())
	}
	// The decommissioned executors exit; their ends are not failures and
	// their driver hears of them.
	for _, id := range []int32{0, 1} {
		if _, err := c.client.ExecutorStateChanged(context.Background(), connect.NewRequest(&masterv1.ExecutorStateChangedRequest{
			AppId: app, ExecutorId: id, State: masterv1.ExecutorState_EXECUTOR_STATE_EXITED, WorkerId: w1, ExitStatus: ptr[int32](0),
		})); err != nil {
			t.Fatal(err)
		}
	}
	dp.expect(t, "ExecutorUpdated "+app+"/1 EXITED")
	a := c.app(t, app)
	if lifecycle.Name(a.GetState()) != "RUNNING" || len(a.GetExecutors()) != 4 || a.GetCoresGranted() != 2 {
		t.Errorf("app %s with %d executors and %d cores; want RUNNING with 4 and 2", lifecycle.Name(a.GetState()), len(a.GetExecutors()), a.GetCoresGranted())
	}
	for _, w := range c.srv.clusterState().GetWorkers() {
		if w.GetId() == w1 && (lifecycle.Name(w.GetState()) != "DECOMMISSIONED" || w.GetCoresUsed() != 0) {
			t.Errorf("worker %s: %s with %d cores used, want DECOMMISSIONED with none", w1, lifecycle.Name(w.GetState()), w.GetCoresUsed())
		}
	}
	resp, err = c.client.DecommissionWorker(context.Background(), connect.NewRequest(&masterv1.DecommissionWorkerRequest{WorkerId: w1}))
	if err != nil || !resp.Msg.GetAlready() {
		t.Errorf("decommission again: %v, already=%v; want already", err, resp.Msg.GetAlready())
	}
	_, err = c.client.DecommissionWorker(context.Background(), connect.NewRequest(&masterv1.DecommissionWorkerRequest{WorkerId: "worker-20261129140000-127.0.0.1-9"}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("decommission an unknown worker: %v, want NotFound", err)
	}
}

func TestDefaultCoresCapOnlyAppsThatSetNoMaxCores(t *testing.T) {
	c := newCluster(t, Config{DefaultCores: 2})
	wp := newPeer(t)
	c.registerWorker(t, wp, 7078, 8, 8192)
	capped := c.registerApp(t, newPeer(t), appDesc(256, 1))
	desc := appDesc(256, 1)
	desc.MaxCores = ptr[int32](3)
	chosen := c.registerApp(t, newPeer(t), desc)
	for id, want := range map[string][2]int32{capped: {2, 2}, chosen: {3, 0}} {
		a := c.app(t, id)
		if a.GetCoresGranted() != want[0] || a.GetDefaultCores() != want[1] {
			t.Errorf("app %s: %d cores, default cores %d; want %d and %d", id, a.GetCoresGranted(), a.GetDefaultCores(), want[0], want[1])
		}
	}
}
