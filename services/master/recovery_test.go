package master

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/services/master/store"
)

// keptCluster runs a master on a file store in dir with one worker and one
// application with an executor, then closes the store, as a killed master
// leaves it. It returns the worker's and application's ids. The worker has 4
// cores; the application's executors take one each.
func keptCluster(t *testing.T, dir string, wp, dp *peer, supervisedDriver bool) (worker, app string) {
	t.Helper()
	st, err := store.OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, Config{Store: st})
	worker = c.registerWorker(t, wp, 7078, 4, 4096)
	if supervisedDriver {
		if _, err := c.client.SubmitDriver(context.Background(), connect.NewRequest(&masterv1.SubmitDriverRequest{
			Description: &masterv1.DriverDescription{Name: "d", Cores: 1, MemoryMib: 256, Supervise: true,
				Command: &masterv1.Command{Args: []string{"/bin/true"}}},
		})); err != nil {
			t.Fatal(err)
		}
		wp.expect(t, "LaunchDriver ")
	}
	app = c.registerApp(t, dp, appDesc(512, 1))
	// Every executor the cores allow is launched and told to the driver
	// before the master stops, so nothing this master sends reaches the
	// peers after the next one starts.
	executors := 4
	if supervisedDriver {
		executors = 3
	}
	var launches, added []string
	for id := range executors {
		launches = append(launches, fmt.Sprintf("LaunchExecutor %s/%d ", app, id))
		added = append(added, fmt.Sprintf("ExecutorAdded %s/%d", app, id))
	}
	wp.expectAll(t, launches...)
	dp.expectAll(t, added...)
	c.srv.mu.Lock()
	defer c.srv.mu.Unlock()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return worker, app
}

// recoveringCluster starts a master with cfg on the file store in dir, which
// holds state: it is RECOVERING.
func recoveringCluster(t *testing.T, dir string, cfg Config) *cluster {
	t.Helper()
	cfg.Store = mustOpen(t, dir)
	c := newCluster(t, cfg)
	if got := c.srv.clusterState().GetStatus(); got != statusRecovering {
		t.Fatalf("a master with kept state starts %s, want RECOVERING", got)
	}
	return c
}

func TestARecoveringMasterAdoptsWhatItsWorkersAndDriversReport(t *testing.T) {
	dir := t.TempDir()
	wp, dp := newPeer(t), newPeer(t)
	worker, app := keptCluster(t, dir, wp, dp, false)
	c := recoveringCluster(t, dir, Config{})

	_, err := c.client.RegisterApplication(context.Background(), connect.NewRequest(&masterv1.RegisterApplicationRequest{
		AppToken: rpc.NewToken(), MasterToken: rpc.NewToken(), Description: appDesc(512, 1), DriverUrl: dp.url}))
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "recovering") {
		t.Fatalf("a submission while recovering: %v, want unavailable saying the master recovers", err)
	}
	resp, err := c.client.Heartbeat(context.Background(), connect.NewRequest(&masterv1.HeartbeatRequest{
		WorkerId: worker, Executors: []*masterv1.RunningExecutor{{AppId: app, ExecutorId: 0}}}))
	if err != nil || !resp.Msg.GetReregister() || len(resp.Msg.GetUnknownExecutors()) != 0 {
		t.Fatalf("heartbeat of a kept worker while recovering: %v %v; want 'register again' and nothing to kill", resp, err)
	}

	c.srv.beginRecovery(context.Background())
	dp.expect(t, "MasterChanged "+app+" "+c.srv.cfg.URL)
	reg, err := c.client.RegisterWorker(context.Background(), connect.NewRequest(&masterv1.RegisterWorkerRequest{
		WorkerId: worker, Host: "127.0.0.1", Port: 7078, Cores: 4, MemoryMib: 4096, WorkerUrl: wp.url,
		Executors: []*masterv1.RunningExecutor{
			{AppId: app, ExecutorId: 0, Cores: 1, MemoryMib: 512},
			// More cores than the worker has: not adopted.
			{AppId: app, ExecutorId: 2, Cores: 100, MemoryMib: 512},
			{AppId: "app-20261129140000-9999", ExecutorId: 0, Cores: 1, MemoryMib: 512},
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	var unknown []string
	for _, e := range reg.Msg.GetUnknownExecutors() {
		unknown = append(unknown, fmt.Sprintf("%s/%d", e.GetAppId(), e.GetExecutorId()))
	}
	if want := app + "/2 app-20261129140000-9999/0"; strings.Join(unknown, " ") != want {
		t.Fatalf("executors to kill %v, want %s: the oversized one and the one of an application never kept", unknown, want)
	}
	tooltest.Eventually(t, "the master ALIVE", func() bool { return c.srv.clusterState().GetStatus() == statusAlive })
	// The driver hears which of its executors were found before it hears
	// of a new one: the others ended while no master could say so.
	dp.expect(t, "ExecutorsRecovered "+app+" [0] next=4")
	if m := dp.expect(t, "ExecutorAdded "); m != "ExecutorAdded "+app+"/4" {
		t.Errorf("after the recovered executors the driver heard %q, want executor 4 added", m)
	}
	// Executor 0 was adopted; 1 to 3 ended while the master was down, so
	// three new executors take their cores, under ids never given before.
	wp.expectAll(t, "LaunchExecutor "+app+"/4", "LaunchExecutor "+app+"/5", "LaunchExecutor "+app+"/6")
	a := c.app(t, app)
	var got []string
	for _, e := range a.GetExecutors() {
		got = append(got, fmt.Sprintf("%d %s", e.GetId(), lifecycle.Name(e.GetState())))
	}
	if lifecycle.Name(a.GetState()) != "RUNNING" || strings.Join(got, ",") != "0 RUNNING,4 LAUNCHING,5 LAUNCHING,6 LAUNCHING" {
		t.Fatalf("recovered app %s with executors %v, want RUNNING with 0 adopted and 4-6 new", lifecycle.Name(a.GetState()), got)
	}
	// The adopted executor counts against the executor limit as the new ones do.
	c.srv.mu.Lock()
	live := c.srv.apps[app].liveExecutors
	c.srv.mu.Unlock()
	if live != 4 {
		t.Errorf("%d executors count against the limit, want 4", live)
	}
}

// TestARecoveringMasterTellsADriverAgainUntilItsRegistrationIsAnswered: a
// driver whose registration the store kept but whose answer has not come
// (the master that kept it was paused before answering) refuses
// MasterChanged Unavailable; the recovering master tells it again until it
// answers, and its application is recovered, not failed as silent.
func TestARecoveringMasterTellsADriverAgainUntilItsRegistrationIsAnswered(t *testing.T) {
	dir := t.TempDir()
	dp := newPeer(t)
	_, app := keptCluster(t, dir, newPeer(t), dp, false)
	c := recoveringCluster(t, dir, Config{})
	dp.unanswered.Store(2)
	c.srv.beginRecovery(context.Background())
	dp.expect(t, "MasterChanged "+app+" refused")
	dp.expect(t, "MasterChanged "+app+" refused")
	dp.expect(t, "MasterChanged "+app+" "+c.srv.cfg.URL)
	tooltest.Eventually(t, "the application acknowledged", func() bool {
		c.srv.mu.Lock()
		defer c.srv.mu.Unlock()
		return c.srv.apps[app].state != masterv1.ApplicationState_APPLICATION_STATE_UNKNOWN
	})
}

func TestRecoveryEndsAfterATimeoutWithoutWhatDidNotAnswer(t *testing.T) {
	dir := t.TempDir()
	worker, app := keptCluster(t, dir, newPeer(t), newPeer(t), true)
	c := recoveringCluster(t, dir, Config{})
	c.srv.mu.Lock()
	c.srv.completeRecoveryLocked(context.Background())
	c.srv.mu.Unlock()
	// The supervised driver is relaunched once its relaunch is kept.
	tooltest.Eventually(t, "the driver relaunched", func() bool {
		ds := c.srv.clusterState().GetActiveDrivers()
		return len(ds) == 1 && lifecycle.Name(ds[0].GetState()) == "SUBMITTED"
	})
	st := c.srv.clusterState()
	if st.GetStatus() != statusAlive {
		t.Fatalf("status %s after recovery ended, want ALIVE", st.GetStatus())
	}
	if w := st.GetWorkers()[0]; w.GetId() != worker || lifecycle.Name(w.GetState()) != "DEAD" {
		t.Errorf("silent worker %s %s, want DEAD", w.GetId(), lifecycle.Name(w.GetState()))
	}
	if a := c.app(t, app); lifecycle.Name(a.GetState()) != "FAILED" || !strings.Contains(a.GetStatusMessage(), "did not answer") {
		t.Errorf("app whose driver was silent: %s %q, want FAILED", lifecycle.Name(a.GetState()), a.GetStatusMessage())
	}
	if ds := st.GetActiveDrivers(); len(ds) != 1 || lifecycle.Name(ds[0].GetState()) != "SUBMITTED" {
		t.Errorf("active drivers %v, want the supervised driver relaunched (SUBMITTED) under a new id", ds)
	}
	if ds, old := st.GetActiveDrivers(), st.GetCompletedDrivers(); len(ds) == 1 && (len(old) != 1 || old[0].GetRelaunchedAs() != ds[0].GetId()) {
		t.Errorf("completed drivers %v, want the old one RELAUNCHING, naming %s", old, ds[0].GetId())
	}
}

func TestTheFileStoreRefusesAnOversizedRecord(t *testing.T) {
	dir := t.TempDir()
	st, err := store.OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	big := &masterv1.PersistedApplication{Id: "app-20261129140000-0000", DriverUrl: strings.Repeat("x", store.MaxRecordBytes)}
	if err := st.PutApplication(big); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Load(); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("loading a record over the limit: %v, want an error", err)
	}
	st.Close()
	if _, err := New(Config{URL: "http://m:1", Store: mustOpen(t, dir), WorkerTimeout: time.Second}); err == nil {
		t.Fatal("a master started on a store it cannot load")
	}
}

func mustOpen(t *testing.T, dir string) *store.FileStore {
	t.Helper()
	st, err := store.OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
