package master

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/glint-cluster/glint/internal/faultproxy"
	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	workerv1 "github.com/glint-cluster/glint/pkg/api/glint/worker/v1"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// answerLostWorker takes the first LaunchExecutor and holds its answer until
// released (the test cuts the connection meanwhile, so the answer is lost);
// like Glint's worker, it refuses an executor it launched already.
type answerLostWorker struct {
	workerPeer
	launches atomic.Int32
	arrived  chan struct{}
	release  chan struct{}
}

func (w *answerLostWorker) LaunchExecutor(_ context.Context, r *connect.Request[workerv1.LaunchExecutorRequest]) (*connect.Response[workerv1.LaunchExecutorResponse], error) {
	if w.launches.Add(1) == 1 {
		close(w.arrived)
		<-w.release
		return connect.NewResponse(&workerv1.LaunchExecutorResponse{}), nil
	}
	return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("executor %s/%d runs here", r.Msg.GetAppId(), r.Msg.GetExecutorId()))
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

func TestALaunchWhoseAnswerWasLostIsSentAgainAndTheWorkersRefusalCountsAsLaunched(t *testing.T) {
	c := newCluster(t, Config{})
	w := &answerLostWorker{arrived: make(chan struct{}), release: make(chan struct{})}
	w.peer = &peer{messages: make(chan string, 100)}
	proxy := faultproxy.New(t, strings.TrimPrefix(serveWorker(t, w), "http://"))
	w.url = proxy.URL
	c.registerWorker(t, w.peer, 7078, 2, 4096)
	app := c.registerApp(t, newPeer(t), appDesc(512, 2))

	<-w.arrived
	proxy.Cut()
	proxy.Heal()
	close(w.release)

	ok := c.srv.metrics.executorLaunches.WithLabelValues(launchOK)
	failed := c.srv.metrics.executorLaunches.WithLabelValues(launchError)
	tooltest.Eventually(t, "the launch settled", func() bool { return counterValue(ok)+counterValue(failed) > 0 })
	if got := counterValue(failed); got != 0 {
		t.Fatalf("the launch whose answer was lost counted as failed (%v); app: %v", got, c.app(t, app))
	}
	if got := w.launches.Load(); got != 2 {
		t.Fatalf("the worker got %d LaunchExecutor calls, want 2 (the lost one and its resend)", got)
	}
	// The executor is the master's still: its RUNNING report is taken.
	_, err := c.client.ExecutorStateChanged(context.Background(), connect.NewRequest(&masterv1.ExecutorStateChangedRequest{
		AppId: app, ExecutorId: 0, State: masterv1.ExecutorState_EXECUTOR_STATE_RUNNING, WorkerId: "worker-20261129140000-127.0.0.1-7078"}))
	if err != nil {
		t.Fatalf("RUNNING after the resent launch: %v", err)
	}
}

// busyWorker refuses the first launches for want of free cores, as a worker
// still reaping the executors of an application that just ended does.
type busyWorker struct {
	workerPeer
	launches atomic.Int32
}

func (w *busyWorker) LaunchExecutor(context.Context, *connect.Request[workerv1.LaunchExecutorRequest]) (*connect.Response[workerv1.LaunchExecutorResponse], error) {
	if w.launches.Add(1) <= 2 {
		return nil, connect.NewError(connect.CodeResourceExhausted, errors.New("wants 1 cores and 0 MiB free"))
	}
	return connect.NewResponse(&workerv1.LaunchExecutorResponse{}), nil
}

func TestALaunchRefusedForWantOfFreeCoresIsSentAgain(t *testing.T) {
	c := newCluster(t, Config{})
	w := &busyWorker{}
	w.peer = &peer{messages: make(chan string, 100)}
	w.url = serveWorker(t, w)
	c.registerWorker(t, w.peer, 7078, 1, 4096)
	c.registerApp(t, newPeer(t), appDesc(512, 1))
	ok := c.srv.metrics.executorLaunches.WithLabelValues(launchOK)
	failed := c.srv.metrics.executorLaunches.WithLabelValues(launchError)
	tooltest.Eventually(t, "the launch settled", func() bool { return counterValue(ok)+counterValue(failed) > 0 })
	if got := counterValue(failed); got != 0 || w.launches.Load() != 3 {
		t.Fatalf("%v launches failed after %d tries, want the third try taken", got, w.launches.Load())
	}
}

func TestAHeartbeatIsAnsweredWithWhatTheMasterDoesNotKnowToRunThere(t *testing.T) {
	c := newCluster(t, Config{})
	wp := newPeer(t)
	worker := c.registerWorker(t, wp, 7078, 2, 4096)
	app := c.registerApp(t, newPeer(t), appDesc(512, 2))
	wp.expect(t, "LaunchExecutor "+app+"/0")
	other := newPeer(t)
	c.registerWorker(t, other, 7079, 2, 4096)
	other.expect(t, "LaunchExecutor "+app+"/1")
	resp, err := c.client.Heartbeat(context.Background(), connect.NewRequest(&masterv1.HeartbeatRequest{
		WorkerId: worker,
		Executors: []*masterv1.RunningExecutor{
			{AppId: app, ExecutorId: 0},  // placed here
			{AppId: app, ExecutorId: 1},  // placed on the other worker
			{AppId: app, ExecutorId: 99}, // never placed
			{AppId: "app-20261129140000-9999", ExecutorId: 0},
		},
		DriverIds: []string{"driver-20261129140000-0000"},
	}))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range resp.Msg.GetUnknownExecutors() {
		got = append(got, fmt.Sprintf("%s/%d", e.GetAppId(), e.GetExecutorId()))
	}
	want := []string{app + "/1", app + "/99", "app-20261129140000-9999/0"}
	if fmt.Sprint(got) != fmt.Sprint(want) || fmt.Sprint(resp.Msg.GetUnknownDriverIds()) != "[driver-20261129140000-0000]" {
		t.Fatalf("unknown executors %v and drivers %v, want %v and the driver", got, resp.Msg.GetUnknownDriverIds(), want)
	}
}

func TestOnlyTheApplicationsOwnDriverKeepsItAlive(t *testing.T) {
	c := newCluster(t, Config{WorkerTimeout: 60 * time.Second})
	// An application whose driver URL is the master's own: it answers
	// /healthz, but it is not the application's driver.
	impostor, err := c.client.RegisterApplication(context.Background(), connect.NewRequest(&masterv1.RegisterApplicationRequest{
		AppToken: rpc.NewToken(), MasterToken: rpc.NewToken(), Description: appDesc(512, 1), DriverUrl: c.url,
	}))
	if err != nil {
		t.Fatal(err)
	}
	genuine := c.registerApp(t, newPeer(t), appDesc(512, 1))
	c.srv.checkDrivers(context.Background())
	c.clock.Advance(61 * time.Second)
	c.srv.checkDrivers(context.Background())
	if a := c.app(t, impostor.Msg.GetAppId()); lifecycle.Name(a.GetState()) != "FAILED" {
		t.Errorf("app whose driver URL is the master's: %s %q, want FAILED", lifecycle.Name(a.GetState()), a.GetStatusMessage())
	}
	if a := c.app(t, genuine); a.GetState() == masterv1.ApplicationState_APPLICATION_STATE_FAILED {
		t.Errorf("app whose driver answers: FAILED %q", a.GetStatusMessage())
	}
}

// togetherWorker answers the launches sent to it once want of them are on
// their way at once.
type togetherWorker struct {
	workerPeer
	want     int32
	inFlight atomic.Int32
	once     sync.Once
	all      chan struct{}
}

func (w *togetherWorker) LaunchExecutor(ctx context.Context, _ *connect.Request[workerv1.LaunchExecutorRequest]) (*connect.Response[workerv1.LaunchExecutorResponse], error) {
	defer w.inFlight.Add(-1)
	if w.inFlight.Add(1) == w.want {
		w.once.Do(func() { close(w.all) })
	}
	select {
	case <-w.all:
		return connect.NewResponse(&workerv1.LaunchExecutorResponse{}), nil
	case <-ctx.Done():
		return nil, connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	}
}

func TestAnApplicationsLaunchesGoToAWorkerTogether(t *testing.T) {
	c := newCluster(t, Config{})
	w := &togetherWorker{want: 4, all: make(chan struct{})}
	w.peer = &peer{messages: make(chan string, 100)}
	w.url = serveWorker(t, w)
	c.registerWorker(t, w.peer, 7078, 4, 4096)
	c.registerApp(t, newPeer(t), appDesc(512, 1))
	select {
	case <-w.all:
	case <-time.After(30 * time.Second):
		t.Fatalf("at most %d of the application's 4 launches on their way to the worker at once, want all 4", w.inFlight.Load())
	}
}
