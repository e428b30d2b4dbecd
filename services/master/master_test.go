package master

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/glint-cluster/glint/internal/fakeclock"
	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/driver/v1/driverv1connect"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	workerv1 "github.com/glint-cluster/glint/pkg/api/glint/worker/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/worker/v1/workerv1connect"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/rpc/rpctest"
)

// peer is a worker and driver endpoint on a real loopback socket that records
// the messages the master sends it.
type peer struct {
	url      string
	messages chan string
	// unanswered is how many MasterChanged calls the peer, as a driver
	// whose registration is not answered yet, refuses Unavailable.
	unanswered atomic.Int32
}

func newPeer(t *testing.T) *peer {
	t.Helper()
	p := &peer{messages: make(chan string, 1000)}
	mux := http.NewServeMux()
	mux.Handle(workerv1connect.NewWorkerServiceHandler(&workerPeer{p}))
	mux.Handle(driverv1connect.NewDriverServiceHandler(&driverPeer{p}))
	p.url = rpctest.Serve(t, mux)
	return p
}

// serveWorker serves w on a real loopback socket and returns its URL.
func serveWorker(t *testing.T, w workerv1connect.WorkerServiceHandler) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(workerv1connect.NewWorkerServiceHandler(w))
	return rpctest.Serve(t, mux)
}

func (p *peer) record(format string, args ...any) { p.messages <- fmt.Sprintf(format, args...) }

// expect waits for a message starting with prefix, skipping others.
func (p *peer) expect(t *testing.T, prefix string) string {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case m := <-p.messages:
			if strings.HasPrefix(m, prefix) {
				return m
			}
		case <-deadline:
			t.Fatalf("no message %q within 30s", prefix)
		}
	}
}

// expectAll waits for a message starting with each of prefixes, in any
// order (launches go to a worker together), skipping others.
func (p *peer) expectAll(t *testing.T, prefixes ...string) {
	t.Helper()
	missing := map[string]bool{}
	for _, prefix := range prefixes {
		missing[prefix] = true
	}
	deadline := time.After(30 * time.Second)
	for len(missing) > 0 {
		select {
		case m := <-p.messages:
			for prefix := range missing {
				if strings.HasPrefix(m, prefix) {
					delete(missing, prefix)
					break
				}
			}
		case <-deadline:
			t.Fatalf("no messages %v within 30s", slices.Collect(maps.Keys(missing)))
		}
	}
}

type workerPeer struct{ *peer }

func (w *workerPeer) LaunchExecutor(_ context.Context, r *connect.Request[workerv1.LaunchExecutorRequest]) (*connect.Response[workerv1.LaunchExecutorResponse], error) {
	w.record("LaunchExecutor %s/%d cores=%d", r.Msg.GetAppId(), r.Msg.GetExecutorId(), r.Msg.GetCores())
	return connect.NewResponse(&workerv1.LaunchExecutorResponse{}), nil
}

func (w *workerPeer) KillExecutor(_ context.Context, r *connect.Request[workerv1.KillExecutorRequest]) (*connect.Response[workerv1.KillExecutorResponse], error) {
	w.record("KillExecutor %s/%d", r.Msg.GetAppId(), r.Msg.GetExecutorId())
	return connect.NewResponse(&workerv1.KillExecutorResponse{}), nil
}

func (w *workerPeer) LaunchDriver(_ context.Context, r *connect.Request[workerv1.LaunchDriverRequest]) (*connect.Response[workerv1.LaunchDriverResponse], error) {
	w.record("LaunchDriver %s", r.Msg.GetDriverId())
	return connect.NewResponse(&workerv1.LaunchDriverResponse{}), nil
}

func (w *workerPeer) KillDriver(_ context.Context, r *connect.Request[workerv1.KillDriverRequest]) (*connect.Response[workerv1.KillDriverResponse], error) {
	w.record("KillDriver %s", r.Msg.GetDriverId())
	return connect.NewResponse(&workerv1.KillDriverResponse{}), nil
}

func (w *workerPeer) ApplicationFinished(_ context.Context, r *connect.Request[workerv1.ApplicationFinishedRequest]) (*connect.Response[workerv1.ApplicationFinishedResponse], error) {
	w.record("ApplicationFinished %s", r.Msg.GetAppId())
	return connect.NewResponse(&workerv1.ApplicationFinishedResponse{}), nil
}

func (w *workerPeer) MasterChanged(context.Context, *connect.Request[workerv1.MasterChangedRequest]) (*connect.Response[workerv1.MasterChangedResponse], error) {
	return connect.NewResponse(&workerv1.MasterChangedResponse{}), nil
}

func (w *workerPeer) DecommissionWorker(context.Context, *connect.Request[workerv1.DecommissionWorkerRequest]) (*connect.Response[workerv1.DecommissionWorkerResponse], error) {
	w.record("DecommissionWorker")
	return connect.NewResponse(&workerv1.DecommissionWorkerResponse{}), nil
}

type driverPeer struct{ *peer }

func (d *driverPeer) RetrieveSparkProps(context.Context, *connect.Request[driverv1.RetrieveSparkPropsRequest]) (*connect.Response[driverv1.RetrieveSparkPropsResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, nil)
}

func (d *driverPeer) RegisterExecutor(context.Context, *connect.Request[driverv1.RegisterExecutorRequest]) (*connect.Response[driverv1.RegisterExecutorResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, nil)
}

func (d *driverPeer) LaunchedExecutor(context.Context, *connect.Request[driverv1.LaunchedExecutorRequest]) (*connect.Response[driverv1.LaunchedExecutorResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, nil)
}

func (d *driverPeer) StatusUpdate(context.Context, *connect.Request[driverv1.StatusUpdateRequest]) (*connect.Response[driverv1.StatusUpdateResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, nil)
}

func (d *driverPeer) ExecutorAdded(_ context.Context, r *connect.Request[driverv1.ExecutorAddedRequest]) (*connect.Response[driverv1.ExecutorAddedResponse], error) {
	d.record("ExecutorAdded %s/%d", r.Msg.GetAppId(), r.Msg.GetExecutorId())
	return connect.NewResponse(&driverv1.ExecutorAddedResponse{}), nil
}

func (d *driverPeer) ExecutorUpdated(_ context.Context, r *connect.Request[driverv1.ExecutorUpdatedRequest]) (*connect.Response[driverv1.ExecutorUpdatedResponse], error) {
	d.record("ExecutorUpdated %s/%d %s lost=%v", r.Msg.GetAppId(), r.Msg.GetExecutorId(), lifecycle.Name(r.Msg.GetState()), r.Msg.GetWorkerLost())
	return connect.NewResponse(&driverv1.ExecutorUpdatedResponse{}), nil
}

func (d *driverPeer) Ping(context.Context, *connect.Request[driverv1.PingRequest]) (*connect.Response[driverv1.PingResponse], error) {
	return connect.NewResponse(&driverv1.PingResponse{}), nil
}

func (d *driverPeer) GetProgress(context.Context, *connect.Request[driverv1.GetProgressRequest]) (*connect.Response[driverv1.GetProgressResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, nil)
}

func (d *driverPeer) MasterChanged(_ context.Context, r *connect.Request[driverv1.MasterChangedRequest]) (*connect.Response[driverv1.MasterChangedResponse], error) {
	if d.unanswered.Add(-1) >= 0 {
		d.record("MasterChanged %s refused", r.Msg.GetAppId())
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("this driver's registration is not answered yet"))
	}
	d.record("MasterChanged %s %s", r.Msg.GetAppId(), r.Msg.GetMasterUrl())
	return connect.NewResponse(&driverv1.MasterChangedResponse{}), nil
}

func (d *driverPeer) ExecutorsRecovered(_ context.Context, r *connect.Request[driverv1.ExecutorsRecoveredRequest]) (*connect.Response[driverv1.ExecutorsRecoveredResponse], error) {
	d.record("ExecutorsRecovered %s %v next=%d", r.Msg.GetAppId(), r.Msg.GetExecutorIds(), r.Msg.GetNextExecutorId())
	return connect.NewResponse(&driverv1.ExecutorsRecoveredResponse{}), nil
}

func (d *driverPeer) ApplicationRemoved(_ context.Context, r *connect.Request[driverv1.ApplicationRemovedRequest]) (*connect.Response[driverv1.ApplicationRemovedResponse], error) {
	d.record("ApplicationRemoved %s %s", r.Msg.GetAppId(), r.Msg.GetMessage())
	return connect.NewResponse(&driverv1.ApplicationRemovedResponse{}), nil
}

// cluster is a master on a loopback socket with a test clock.
type cluster struct {
	srv    *Server
	client masterv1connect.MasterServiceClient
	clock  *fakeclock.Clock
	url    string
}

func newCluster(t *testing.T, cfg Config) *cluster {
	t.Helper()
	c := fakeclock.New(time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC))
	cfg.URL, cfg.Now, cfg.Rand = "http://master.test:7077", c.Now, rand.New(rand.NewPCG(1, 2))
	if cfg.WorkerTimeout == 0 {
		cfg.WorkerTimeout = 60 * time.Second
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.cancel)
	url := rpctest.Serve(t, s.Handler())
	return &cluster{srv: s, clock: c, url: url,
		client: masterv1connect.NewMasterServiceClient(rpc.NewHTTPClient(), url)}
}

func (c *cluster) registerWorker(t *testing.T, p *peer, port int32, cores int32, memoryMiB int64) string {
	t.Helper()
	id := fmt.Sprintf("worker-20261129140000-127.0.0.1-%d", port)
	_, err := c.client.RegisterWorker(context.Background(), connect.NewRequest(&masterv1.RegisterWorkerRequest{
		WorkerId: id, Host: "127.0.0.1", Port: port, Cores: cores, MemoryMib: memoryMiB, WorkerUrl: p.url,
	}))
	if err != nil {
		t.Fatalf("register worker: %v", err)
	}
	return id
}

func (c *cluster) registerApp(t *testing.T, p *peer, desc *masterv1.ApplicationDescription) string {
	t.Helper()
	resp, err := c.client.RegisterApplication(context.Background(), connect.NewRequest(&masterv1.RegisterApplicationRequest{AppToken: rpc.NewToken(), MasterToken: rpc.NewToken(),
		Description: desc, DriverUrl: p.url,
	}))
	if err != nil {
		t.Fatalf("register app: %v", err)
	}
	return resp.Msg.GetAppId()
}

func (c *cluster) app(t *testing.T, id string) *masterv1.ApplicationInfo {
	t.Helper()
	st := c.srv.clusterState()
	for _, a := range append(st.GetActiveApps(), st.GetCompletedApps()...) {
		if a.GetId() == id {
			return a
		}
	}
	t.Fatalf("app %s not in cluster state", id)
	return nil
}

func appDesc(memoryMiB int64, coresPerExecutor int32) *masterv1.ApplicationDescription {
	d := &masterv1.ApplicationDescription{Name: "test", MemoryPerExecutorMib: memoryMiB, Command: &masterv1.Command{Args: []string{"/bin/true"}}}
	if coresPerExecutor > 0 {
		d.CoresPerExecutor = &coresPerExecutor
	}
	return d
}

func ptr[T any](v T) *T { return &v }

func TestRegisterWorkerRejectsBadInput(t *testing.T) {
	c := newCluster(t, Config{})
	p := newPeer(t)
	for name, req := range map[string]*masterv1.RegisterWorkerRequest{
		"zero cores":      {WorkerId: "worker-20261129140000-h-1", Host: "h", Port: 1, Cores: 0, MemoryMib: 1024, WorkerUrl: p.url},
		"negative memory": {WorkerId: "worker-20261129140000-h-1", Host: "h", Port: 1, Cores: 1, MemoryMib: -5, WorkerUrl: p.url},
		"id with slash":   {WorkerId: "worker-20261129140000-h/../x-1", Host: "h", Port: 1, Cores: 1, MemoryMib: 1024, WorkerUrl: p.url},
		"id with dotdot":  {WorkerId: "worker-20261129140000-..-1", Host: "h", Port: 1, Cores: 1, MemoryMib: 1024, WorkerUrl: p.url},
		"bad url":         {WorkerId: "worker-20261129140000-h-1", Host: "h", Port: 1, Cores: 1, MemoryMib: 1024, WorkerUrl: "ftp://x"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := c.client.RegisterWorker(context.Background(), connect.NewRequest(req))
			if connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Fatalf("got %v, want InvalidArgument", err)
			}
		})
	}
	if n := len(c.srv.clusterState().GetWorkers()); n != 0 {
		t.Errorf("%d workers registered after bad input, want 0", n)
	}
}

func TestRegisterWorkerDuplicateIDAndAddress(t *testing.T) {
	c := newCluster(t, Config{})
	p := newPeer(t)
	id := c.registerWorker(t, p, 7078, 4, 4096)
	resp, err := c.client.RegisterWorker(context.Background(), connect.NewRequest(&masterv1.RegisterWorkerRequest{
		WorkerId: id, Host: "127.0.0.1", Port: 7078, Cores: 4, MemoryMib: 4096, WorkerUrl: p.url,
	}))
	if err != nil || !resp.Msg.GetDuplicate() {
		t.Fatalf("same id again: %v, duplicate=%v; want duplicate", err, resp.Msg.GetDuplicate())
	}
	_, err = c.client.RegisterWorker(context.Background(), connect.NewRequest(&masterv1.RegisterWorkerRequest{
		WorkerId: "worker-20261129140100-127.0.0.1-7078", Host: "127.0.0.1", Port: 7078, Cores: 4, MemoryMib: 4096, WorkerUrl: p.url,
	}))
	if connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Fatalf("new id at an alive worker's address: %v, want AlreadyExists", err)
	}
	if n := len(c.srv.clusterState().GetWorkers()); n != 1 {
		t.Errorf("%d workers, want 1", n)
	}
}

func TestHeartbeatFromUnknownWorkerIsNotFound(t *testing.T) {
	c := newCluster(t, Config{})
	_, err := c.client.Heartbeat(context.Background(), connect.NewRequest(&masterv1.HeartbeatRequest{WorkerId: "worker-20261129140000-h-1"}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("got %v, want NotFound", err)
	}
}

func TestTimedOutWorkerIsDeadItsExecutorsLostAndItIsToldToReregister(t *testing.T) {
	c := newCluster(t, Config{WorkerTimeout: 60 * time.Second})
	wp, dp := newPeer(t), newPeer(t)
	worker := c.registerWorker(t, wp, 7078, 2, 4096)
	app := c.registerApp(t, dp, appDesc(512, 1))
	wp.expect(t, "LaunchExecutor "+app+"/0")
	dp.expect(t, "ExecutorAdded "+app+"/0")

	c.clock.Advance(61 * time.Second)
	c.srv.checkWorkerTimeouts(context.Background())

	dp.expect(t, "ExecutorUpdated "+app+"/0 LOST lost=true")
	st := c.srv.clusterState()
	if got := lifecycle.Name(st.GetWorkers()[0].GetState()); got != "DEAD" {
		t.Errorf("worker state %s, want DEAD", got)
	}
	if a := c.app(t, app); a.GetCoresGranted() != 0 {
		t.Errorf("app still holds %d cores after its worker died", a.GetCoresGranted())
	}
	resp, err := c.client.Heartbeat(context.Background(), connect.NewRequest(&masterv1.HeartbeatRequest{WorkerId: worker}))
	if err != nil || !resp.Msg.GetReregister() {
		t.Fatalf("heartbeat from removed worker: %v reregister=%v, want reregister", err, resp.Msg.GetReregister())
	}
	// The worker registers again and the app gets executors again.
	c.registerWorker(t, wp, 7078, 2, 4096)
	wp.expect(t, "LaunchExecutor "+app+"/")
}

func TestReregisteringWorkerIsToldToKillWhatTheMasterDoesNotKnow(t *testing.T) {
	c := newCluster(t, Config{})
	p := newPeer(t)
	resp, err := c.client.RegisterWorker(context.Background(), connect.NewRequest(&masterv1.RegisterWorkerRequest{
		WorkerId: "worker-20261129140000-127.0.0.1-7078", Host: "127.0.0.1", Port: 7078, Cores: 1, MemoryMib: 1024, WorkerUrl: p.url,
		Executors: []*masterv1.RunningExecutor{{AppId: "app-20261129130000-0003", ExecutorId: 2}},
		DriverIds: []string{"driver-20261129130000-0001"},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Msg.GetUnknownExecutors()) != 1 || len(resp.Msg.GetUnknownDriverIds()) != 1 {
		t.Errorf("unknown executors %v drivers %v, want one each", resp.Msg.GetUnknownExecutors(), resp.Msg.GetUnknownDriverIds())
	}
}

func TestRegisterApplicationRejectsBadInput(t *testing.T) {
	c := newCluster(t, Config{})
	p := newPeer(t)
	for name, desc := range map[string]*masterv1.ApplicationDescription{
		"no name":        {MemoryPerExecutorMib: 512, Command: &masterv1.Command{Args: []string{"x"}}},
		"zero memory":    {Name: "a", Command: &masterv1.Command{Args: []string{"x"}}},
		"zero cores":     {Name: "a", MemoryPerExecutorMib: 512, CoresPerExecutor: ptr[int32](0), Command: &masterv1.Command{Args: []string{"x"}}},
		"negative max":   {Name: "a", MemoryPerExecutorMib: 512, MaxCores: ptr[int32](-1), Command: &masterv1.Command{Args: []string{"x"}}},
		"no command":     {Name: "a", MemoryPerExecutorMib: 512},
		"negative limit": {Name: "a", MemoryPerExecutorMib: 512, InitialExecutorLimit: ptr[int32](-1), Command: &masterv1.Command{Args: []string{"x"}}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := c.client.RegisterApplication(context.Background(), connect.NewRequest(&masterv1.RegisterApplicationRequest{AppToken: rpc.NewToken(), MasterToken: rpc.NewToken(), Description: desc, DriverUrl: p.url}))
			if connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Fatalf("got %v, want InvalidArgument", err)
			}
		})
	}
	for _, token := range []string{"", "short"} {
		_, err := c.client.RegisterApplication(context.Background(), connect.NewRequest(&masterv1.RegisterApplicationRequest{
			AppToken: token, MasterToken: rpc.NewToken(), Description: appDesc(512, 1), DriverUrl: p.url}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "app_token") {
			t.Errorf("app token %q: got %v, want InvalidArgument naming app_token", token, err)
		}
	}
	// The master's token: the driver's own, never the one its executors hold.
	appToken := rpc.NewToken()
	for _, token := range []string{"", "short", appToken} {
		_, err := c.client.RegisterApplication(context.Background(), connect.NewRequest(&masterv1.RegisterApplicationRequest{
			AppToken: appToken, MasterToken: token, Description: appDesc(512, 1), DriverUrl: p.url}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "master_token") {
			t.Errorf("master token %q: got %v, want InvalidArgument naming master_token", token, err)
		}
	}
	if n := len(c.srv.clusterState().GetActiveApps()); n != 0 {
		t.Errorf("%d apps registered after bad input", n)
	}
}

func TestAppLargerThanAnyWorkerWaitsAndSaysWhy(t *testing.T) {
	c := newCluster(t, Config{})
	wp, dp := newPeer(t), newPeer(t)
	c.registerWorker(t, wp, 7078, 4, 4096)
	app := c.registerApp(t, dp, appDesc(512, 8))
	a := c.app(t, app)
	if lifecycle.Name(a.GetState()) != "WAITING" || !strings.Contains(a.GetStatusMessage(), "requires more resources than any worker has") {
		t.Errorf("state %s message %q; want WAITING with the reason", lifecycle.Name(a.GetState()), a.GetStatusMessage())
	}
}

func TestExecutorFailuresFailTheAppOnlyWhenNoneRuns(t *testing.T) {
	for _, tc := range []struct {
		name       string
		oneRunning bool
		wantState  string
	}{
		{"all failing", false, "FAILED"},
		{"one running", true, "RUNNING"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, Config{MaxExecutorRetries: 3})
			wp, dp := newPeer(t), newPeer(t)
			worker := c.registerWorker(t, wp, 7078, 2, 4096)
			app := c.registerApp(t, dp, appDesc(512, 1))
			report := func(exec int32, state masterv1.ExecutorState, exit *int32) error {
				_, err := c.client.ExecutorStateChanged(context.Background(), connect.NewRequest(&masterv1.ExecutorStateChangedRequest{
					AppId: app, ExecutorId: exec, State: state, WorkerId: worker, ExitStatus: exit, Message: "boom",
				}))
				return err
			}
			next := int32(0)
			if tc.oneRunning {
				if err := report(0, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING, nil); err != nil {
					t.Fatal(err)
				}
				next = 1
			}
			for range 3 {
				if err := report(next, masterv1.ExecutorState_EXECUTOR_STATE_FAILED, ptr[int32](1)); err != nil {
					t.Fatalf("report executor %d failed: %v", next, err)
				}
				// The relaunch backoff ends.
				c.clock.Advance(time.Minute)
				c.srv.wake()
				next = c.app(t, app).GetExecutors()[len(c.app(t, app).GetExecutors())-1].GetId()
			}
			if got := lifecycle.Name(c.app(t, app).GetState()); got != tc.wantState {
				t.Errorf("app state %s, want %s", got, tc.wantState)
			}
		})
	}
}

func TestExecutorStateChangedChecksItsSource(t *testing.T) {
	c := newCluster(t, Config{})
	wp, dp := newPeer(t), newPeer(t)
	worker := c.registerWorker(t, wp, 7078, 2, 4096)
	app := c.registerApp(t, dp, appDesc(512, 1))
	for name, tc := range map[string]struct {
		req  *masterv1.ExecutorStateChangedRequest
		code connect.Code
	}{
		"unknown app":       {&masterv1.ExecutorStateChangedRequest{AppId: "app-20261129140000-0099", ExecutorId: 0, State: masterv1.ExecutorState_EXECUTOR_STATE_RUNNING, WorkerId: worker}, connect.CodeNotFound},
		"unknown executor":  {&masterv1.ExecutorStateChangedRequest{AppId: app, ExecutorId: 42, State: masterv1.ExecutorState_EXECUTOR_STATE_RUNNING, WorkerId: worker}, connect.CodeNotFound},
		"other worker":      {&masterv1.ExecutorStateChangedRequest{AppId: app, ExecutorId: 0, State: masterv1.ExecutorState_EXECUTOR_STATE_RUNNING, WorkerId: "worker-20261129140000-h-9"}, connect.CodeFailedPrecondition},
		"path in app id":    {&masterv1.ExecutorStateChangedRequest{AppId: "../../etc", ExecutorId: 0, State: masterv1.ExecutorState_EXECUTOR_STATE_RUNNING, WorkerId: worker}, connect.CodeInvalidArgument},
		"negative executor": {&masterv1.ExecutorStateChangedRequest{AppId: app, ExecutorId: -1, State: masterv1.ExecutorState_EXECUTOR_STATE_RUNNING, WorkerId: worker}, connect.CodeInvalidArgument},
		"no state":          {&masterv1.ExecutorStateChangedRequest{AppId: app, ExecutorId: 0, WorkerId: worker}, connect.CodeInvalidArgument},
		"back to launching": {&masterv1.ExecutorStateChangedRequest{AppId: app, ExecutorId: 0, State: masterv1.ExecutorState_EXECUTOR_STATE_LAUNCHING, WorkerId: worker}, connect.CodeFailedPrecondition},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := c.client.ExecutorStateChanged(context.Background(), connect.NewRequest(tc.req))
			if connect.CodeOf(err) != tc.code {
				t.Fatalf("got %v, want %v", err, tc.code)
			}
		})
	}
	if got := c.app(t, app).GetExecutors()[0].GetState(); got != masterv1.ExecutorState_EXECUTOR_STATE_LAUNCHING {
		t.Errorf("executor state %v after rejected reports, want LAUNCHING", got)
	}
}

func TestUnregisteredAppKillsExecutorsAndIsRetained(t *testing.T) {
	c := newCluster(t, Config{RetainedApplications: 10})
	wp, dp := newPeer(t), newPeer(t)
	c.registerWorker(t, wp, 7078, 2, 4096)
	first := c.registerApp(t, dp, appDesc(512, 1))
	if _, err := c.client.UnregisterApplication(context.Background(), connect.NewRequest(&masterv1.UnregisterApplicationRequest{AppId: first})); err != nil {
		t.Fatal(err)
	}
	wp.expect(t, "KillExecutor "+first)
	wp.expect(t, "ApplicationFinished "+first)
	if st := c.srv.clusterState(); st.GetWorkers()[0].GetCoresUsed() != 0 {
		t.Errorf("cores used %d after the app ended", st.GetWorkers()[0].GetCoresUsed())
	}
	// Its executor's reports after the app ended — that it started late, that
	// it exited — are normal life, accepted and changing nothing.
	report := &masterv1.ExecutorStateChangedRequest{AppId: first, ExecutorId: 0, WorkerId: c.srv.clusterState().GetWorkers()[0].GetId()}
	for _, state := range []masterv1.ExecutorState{masterv1.ExecutorState_EXECUTOR_STATE_RUNNING, masterv1.ExecutorState_EXECUTOR_STATE_KILLED} {
		report.State = state
		if _, err := c.client.ExecutorStateChanged(context.Background(), connect.NewRequest(report)); err != nil {
			t.Errorf("an ended app's executor reported %s: %v, want it accepted", lifecycle.Name(state), err)
		}
	}
	for i := range 12 {
		id := c.registerApp(t, dp, appDesc(512, 1))
		if _, err := c.client.KillApplication(context.Background(), connect.NewRequest(&masterv1.KillApplicationRequest{AppId: id})); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			// As in Spark, a driver is told of its application's removal
			// unless it ended the application itself (FINISHED): the
			// first such message is for the killed one.
			if m := dp.expect(t, "ApplicationRemoved "); !strings.HasPrefix(m, "ApplicationRemoved "+id) {
				t.Errorf("driver got %q, want it for the killed %s only", m, id)
			}
		}
	}
	completed := c.srv.clusterState().GetCompletedApps()
	if len(completed) > 10 || completed[0].GetId() == first {
		t.Errorf("%d completed apps, first %s; want at most 10 with the oldest dropped", len(completed), completed[0].GetId())
	}
	_, err := c.client.KillApplication(context.Background(), connect.NewRequest(&masterv1.KillApplicationRequest{AppId: completed[0].GetId()}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("killing an ended app: %v, want FailedPrecondition", err)
	}
}

func TestDriversAreLaunchedKilledAndRelaunchedUnderANewID(t *testing.T) {
	c := newCluster(t, Config{})
	wp := newPeer(t)
	submit := func(supervise bool) string {
		resp, err := c.client.SubmitDriver(context.Background(), connect.NewRequest(&masterv1.SubmitDriverRequest{Description: &masterv1.DriverDescription{
			Name: "d", Cores: 1, MemoryMib: 512, Supervise: supervise, Command: &masterv1.Command{Args: []string{"/bin/true"}},
		}}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.GetDriverId()
	}
	waiting := submit(false)
	if _, err := c.client.KillDriver(context.Background(), connect.NewRequest(&masterv1.KillDriverRequest{DriverId: waiting})); err != nil {
		t.Fatal(err)
	}
	status := func(id string) *masterv1.DriverInfo {
		resp, err := c.client.DriverStatus(context.Background(), connect.NewRequest(&masterv1.DriverStatusRequest{DriverId: id}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.GetDriver()
	}
	if got := lifecycle.Name(status(waiting).GetState()); got != "KILLED" {
		t.Errorf("killed waiting driver is %s", got)
	}

	supervised := submit(true)
	c.registerWorker(t, wp, 7078, 2, 4096)
	wp.expect(t, "LaunchDriver "+supervised)
	c.waitLaunched(t, supervised)
	c.clock.Advance(61 * time.Second)
	c.srv.checkWorkerTimeouts(context.Background())
	old := status(supervised)
	if lifecycle.Name(old.GetState()) != "RELAUNCHING" || !strings.Contains(old.GetMessage(), "relaunched as driver-") {
		t.Errorf("supervised driver on a lost worker: %s %q", lifecycle.Name(old.GetState()), old.GetMessage())
	}
	// The lost worker, back, reports the old driver's end: accepted, and the
	// driver stays RELAUNCHING.
	if _, err := c.client.DriverStateChanged(context.Background(), connect.NewRequest(&masterv1.DriverStateChangedRequest{
		DriverId: supervised, State: masterv1.DriverState_DRIVER_STATE_KILLED, WorkerId: old.GetWorkerId(),
	})); err != nil || lifecycle.Name(status(supervised).GetState()) != "RELAUNCHING" {
		t.Errorf("the end of a relaunched driver reported: %v, state %s", err, lifecycle.Name(status(supervised).GetState()))
	}
	_, err := c.client.DriverStatus(context.Background(), connect.NewRequest(&masterv1.DriverStatusRequest{DriverId: "driver-x/../1"}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("bad driver id: %v, want InvalidArgument", err)
	}
}

func TestJSONHasSparksShape(t *testing.T) {
	c := newCluster(t, Config{})
	wp, dp := newPeer(t), newPeer(t)
	c.registerWorker(t, wp, 7078, 4, 4096)
	c.registerApp(t, dp, appDesc(1024, 2))
	resp, err := http.Get(c.url + "/json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		Workers []struct {
			ID            string `json:"id"`
			Host          string `json:"host"`
			Port          int    `json:"port"`
			Cores         int    `json:"cores"`
			CoresUsed     int    `json:"coresused"`
			Memory        int    `json:"memory"`
			MemoryUsed    int    `json:"memoryused"`
			State         string `json:"state"`
			LastHeartbeat int64  `json:"lastheartbeat"`
		} `json:"workers"`
		ActiveApps       []map[string]any `json:"activeapps"`
		CompletedApps    []map[string]any `json:"completedapps"`
		ActiveDrivers    []map[string]any `json:"activedrivers"`
		CompletedDrivers []map[string]any `json:"completeddrivers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	w := got.Workers[0]
	if w.Cores != 4 || w.CoresUsed != 4 || w.Memory != 4096 || w.MemoryUsed != 2048 || w.State != "ALIVE" || w.LastHeartbeat == 0 {
		t.Errorf("worker %+v", w)
	}
	if len(got.ActiveApps) != 1 || got.ActiveApps[0]["state"] != "RUNNING" || got.CompletedApps == nil || got.ActiveDrivers == nil || got.CompletedDrivers == nil {
		t.Errorf("apps/drivers %+v", got)
	}
}

func TestDecommissionedWorkerGetsNoExecutorsAndItsKilledExecutorsDoNotFailTheApp(t *testing.T) {
	c := newCluster(t, Config{MaxExecutorRetries: 1})
	wp, dp := newPeer(t), newPeer(t)
	worker := c.registerWorker(t, wp, 7078, 2, 4096)
	app := c.registerApp(t, dp, appDesc(512, 1))
	wp.expectAll(t, "LaunchExecutor "+app+"/0", "LaunchExecutor "+app+"/1")
	if _, err := c.client.WorkerDecommissioning(context.Background(), connect.NewRequest(&masterv1.WorkerDecommissioningRequest{WorkerId: worker})); err != nil {
		t.Fatal(err)
	}
	dp.expect(t, "ExecutorUpdated "+app+"/0 DECOMMISSIONED")
	// Its executors finish, but the app has none that count: it says why.
	if got := c.app(t, app).GetStatusMessage(); got != "no alive workers" {
		t.Errorf("status %q, want no alive workers", got)
	}
	for _, id := range []int32{0, 1} {
		_, err := c.client.ExecutorStateChanged(context.Background(), connect.NewRequest(&masterv1.ExecutorStateChangedRequest{
			AppId: app, ExecutorId: id, State: masterv1.ExecutorState_EXECUTOR_STATE_KILLED, WorkerId: worker, ExitStatus: ptr[int32](143),
		}))
		if err != nil {
			t.Fatal(err)
		}
	}
	// Not failed: it lost its executors and gets none, so it waits again.
	a := c.app(t, app)
	if lifecycle.Name(a.GetState()) != "WAITING" || a.GetStatusMessage() != "no alive workers" || len(a.GetExecutors()) != 2 {
		t.Errorf("app %s (%q) with %d executors; want WAITING for alive workers with no executor added on the stopping worker",
			lifecycle.Name(a.GetState()), a.GetStatusMessage(), len(a.GetExecutors()))
	}
	if got := lifecycle.Name(c.srv.clusterState().GetWorkers()[0].GetState()); got != "DECOMMISSIONED" {
		t.Errorf("worker %s, want DECOMMISSIONED", got)
	}
	c.clock.Advance(61 * time.Second)
	c.srv.checkWorkerTimeouts(context.Background())
	if got := lifecycle.Name(c.srv.clusterState().GetWorkers()[0].GetState()); got != "DEAD" {
		t.Errorf("silent decommissioned worker %s, want DEAD", got)
	}
}

func TestAppWhoseDriverStopsAnsweringIsRemoved(t *testing.T) {
	c := newCluster(t, Config{WorkerTimeout: 60 * time.Second})
	wp := newPeer(t)
	c.registerWorker(t, wp, 7078, 2, 4096)
	driverSrv := httptest.NewServer(http.NotFoundHandler())
	driverURL := driverSrv.URL
	resp, err := c.client.RegisterApplication(context.Background(), connect.NewRequest(&masterv1.RegisterApplicationRequest{AppToken: rpc.NewToken(), MasterToken: rpc.NewToken(),
		Description: appDesc(512, 1), DriverUrl: driverURL,
	}))
	if err != nil {
		t.Fatal(err)
	}
	app := resp.Msg.GetAppId()
	driverSrv.Close()

	c.clock.Advance(30 * time.Second)
	c.srv.checkDrivers(context.Background())
	if got := lifecycle.Name(c.app(t, app).GetState()); got != "RUNNING" {
		t.Fatalf("app %s after 30s without its driver, want RUNNING (timeout is 60s)", got)
	}
	c.clock.Advance(31 * time.Second)
	c.srv.checkDrivers(context.Background())
	a := c.app(t, app)
	if lifecycle.Name(a.GetState()) != "FAILED" || !strings.Contains(a.GetStatusMessage(), "driver at "+driverURL+" unreachable") {
		t.Errorf("app %s %q; want FAILED naming the unreachable driver", lifecycle.Name(a.GetState()), a.GetStatusMessage())
	}
	wp.expect(t, "KillExecutor "+app)
}

func TestTheEndOfAnExecutorTheDriverHadKilledIsAccepted(t *testing.T) {
	c := newCluster(t, Config{})
	wp, dp := newPeer(t), newPeer(t)
	worker := c.registerWorker(t, wp, 7078, 2, 4096)
	app := c.registerApp(t, dp, appDesc(512, 1))
	wp.expect(t, "LaunchExecutor "+app)
	if _, err := c.client.KillExecutors(context.Background(), connect.NewRequest(&masterv1.KillExecutorsRequest{AppId: app, ExecutorIds: []int32{0}})); err != nil {
		t.Fatal(err)
	}
	wp.expect(t, "KillExecutor "+app)
	// The master forgot it at once; the worker's report of the kill is no error.
	if _, err := c.client.ExecutorStateChanged(context.Background(), connect.NewRequest(&masterv1.ExecutorStateChangedRequest{
		AppId: app, ExecutorId: 0, WorkerId: worker, State: masterv1.ExecutorState_EXECUTOR_STATE_KILLED,
	})); err != nil {
		t.Errorf("the killed executor's end: %v, want it accepted", err)
	}
}

func TestAnExecutorThatExitsUnaskedIsRelaunchedOnlyAfterABackoff(t *testing.T) {
	c := newCluster(t, Config{MaxExecutorRetries: 10})
	wp, dp := newPeer(t), newPeer(t)
	worker := c.registerWorker(t, wp, 7078, 1, 4096)
	app := c.registerApp(t, dp, appDesc(512, 1))
	// The executors the app has now (it also lists those that ended).
	executors := func() []*masterv1.ExecutorInfo {
		var live []*masterv1.ExecutorInfo
		for _, e := range c.app(t, app).GetExecutors() {
			if !lifecycle.ExecutorFinished(e.GetState()) {
				live = append(live, e)
			}
		}
		return live
	}
	report := func(e int32, state masterv1.ExecutorState) {
		t.Helper()
		if _, err := c.client.ExecutorStateChanged(context.Background(), connect.NewRequest(&masterv1.ExecutorStateChangedRequest{
			AppId: app, ExecutorId: e, State: state, WorkerId: worker, ExitStatus: ptr[int32](0),
		})); err != nil {
			t.Fatal(err)
		}
	}
	for failures, wait := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, time.Second} {
		e := executors()[0].GetId()
		// It starts and exits 0 at once, without being asked: a failure,
		// which the next backoff doubles — unless it ran a while first.
		report(e, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)
		if failures == 3 {
			c.clock.Advance(5 * time.Second)
		}
		report(e, masterv1.ExecutorState_EXECUTOR_STATE_EXITED)
		if live, msg := executors(), c.app(t, app).GetStatusMessage(); len(live) != 0 || !strings.Contains(msg, "executors failed in a row") {
			t.Fatalf("after failure %d: executors %v, status %q; want none launched yet and the backoff said", failures+1, live, msg)
		}
		c.clock.Advance(wait - time.Millisecond)
		c.srv.wake()
		if n := len(executors()); n != 0 {
			t.Fatalf("after failure %d: %d executors before the %s backoff ended", failures+1, n, wait)
		}
		c.clock.Advance(time.Millisecond)
		c.srv.wake()
		if n := len(executors()); n != 1 {
			t.Fatalf("after failure %d: %d executors once the %s backoff ended, want 1", failures+1, n, wait)
		}
	}
	// Exits after the driver released its executors (it is stopping) are asked for.
	if _, err := c.client.RequestExecutors(context.Background(), connect.NewRequest(&masterv1.RequestExecutorsRequest{AppId: app, Stopping: true})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.client.ExecutorStateChanged(context.Background(), connect.NewRequest(&masterv1.ExecutorStateChangedRequest{
		AppId: app, ExecutorId: executors()[0].GetId(), State: masterv1.ExecutorState_EXECUTOR_STATE_EXITED, WorkerId: worker, ExitStatus: ptr[int32](0),
	})); err != nil {
		t.Fatal(err)
	}
	if msg := c.app(t, app).GetStatusMessage(); strings.Contains(msg, "failed in a row") {
		t.Errorf("an asked-for exit counted as a failure: %q", msg)
	}
}

func TestRelaunchWaitDoublesAndIsCapped(t *testing.T) {
	for failures, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 7: time.Minute, 100: time.Minute} {
		if got := relaunchWait(failures); got != want {
			t.Errorf("relaunchWait(%d) = %s, want %s", failures, got, want)
		}
	}
}

func TestExecutorsThatExitAtOnceFailTheAppThoughEachReachedRunning(t *testing.T) {
	c := newCluster(t, Config{MaxExecutorRetries: 3})
	wp, dp := newPeer(t), newPeer(t)
	worker := c.registerWorker(t, wp, 7078, 1, 4096)
	app := c.registerApp(t, dp, appDesc(512, 1))
	for i := range 3 {
		e := c.app(t, app).GetExecutors()[i].GetId()
		for _, state := range []masterv1.ExecutorState{masterv1.ExecutorState_EXECUTOR_STATE_RUNNING, masterv1.ExecutorState_EXECUTOR_STATE_EXITED} {
			if _, err := c.client.ExecutorStateChanged(context.Background(), connect.NewRequest(&masterv1.ExecutorStateChangedRequest{
				AppId: app, ExecutorId: e, State: state, WorkerId: worker, ExitStatus: ptr[int32](0),
			})); err != nil {
				t.Fatal(err)
			}
		}
		c.clock.Advance(time.Minute)
		c.srv.wake()
	}
	if a := c.app(t, app); lifecycle.Name(a.GetState()) != "FAILED" || !strings.Contains(a.GetStatusMessage(), "3 executors failed in a row") {
		t.Errorf("app %s %q; want FAILED after 3 executors exited at once", lifecycle.Name(a.GetState()), a.GetStatusMessage())
	}
}
