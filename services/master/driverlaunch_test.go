package master

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	workerv1 "github.com/glint-cluster/glint/pkg/api/glint/worker/v1"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/services/master/store"
)

// busyOnceWorker refuses its first LaunchDriver for want of free resources
// (still reaping what ran before), as a worker whose executors die does.
type busyOnceWorker struct {
	workerPeer
	refused atomic.Bool
}

func (w *busyOnceWorker) LaunchDriver(ctx context.Context, r *connect.Request[workerv1.LaunchDriverRequest]) (*connect.Response[workerv1.LaunchDriverResponse], error) {
	if w.refused.CompareAndSwap(false, true) {
		w.record("refused LaunchDriver %s", r.Msg.GetDriverId())
		return nil, connect.NewError(connect.CodeResourceExhausted, nil)
	}
	return w.workerPeer.LaunchDriver(ctx, r)
}

func submitDriver(t *testing.T, c *cluster, supervise bool) string {
	t.Helper()
	resp, err := c.client.SubmitDriver(context.Background(), connect.NewRequest(&masterv1.SubmitDriverRequest{
		Description: &masterv1.DriverDescription{Name: "d", Cores: 1, MemoryMib: 256, Supervise: supervise,
			Command: &masterv1.Command{Args: []string{"/bin/true"}}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Msg.GetDriverId()
}

// waitLaunched waits until the master knows the worker took driver id's
// launch.
func (c *cluster) waitLaunched(t *testing.T, id string) {
	t.Helper()
	tooltest.Eventually(t, "the launch of "+id+" taken", func() bool {
		c.srv.mu.Lock()
		defer c.srv.mu.Unlock()
		d := c.srv.drivers[id]
		return d != nil && d.launched
	})
}

func (c *cluster) driver(t *testing.T, id string) *masterv1.DriverInfo {
	t.Helper()
	st, err := c.client.DriverStatus(context.Background(), connect.NewRequest(&masterv1.DriverStatusRequest{DriverId: id}))
	if err != nil {
		t.Fatal(err)
	}
	return st.Msg.GetDriver()
}

// TestADriverWhoseLaunchWasRefusedForNowIsLaunchedAgainAfterABackoff: the
// worker refuses a driver's launch for want of free resources; the driver
// waits (SUBMITTED, saying why) and is launched again once its backoff is
// over, supervised or not.
func TestADriverWhoseLaunchWasRefusedForNowIsLaunchedAgainAfterABackoff(t *testing.T) {
	c := newCluster(t, Config{})
	w := &busyOnceWorker{workerPeer: workerPeer{&peer{messages: make(chan string, 100)}}}
	w.url = serveWorker(t, w)
	c.registerWorker(t, w.peer, 7078, 2, 4096)
	id := submitDriver(t, c, false)
	w.expect(t, "refused LaunchDriver "+id)
	tooltest.Eventually(t, "the driver waiting again", func() bool {
		d := c.driver(t, id)
		return lifecycle.Name(d.GetState()) == "SUBMITTED" && strings.Contains(d.GetMessage(), "launching it again in 1s")
	})
	c.clock.Advance(time.Second)
	w.expect(t, "LaunchDriver "+id)
	if d := c.driver(t, id); lifecycle.Name(d.GetState()) != "RUNNING" || d.GetMessage() != "" {
		t.Fatalf("driver %s %q after its second launch, want RUNNING", lifecycle.Name(d.GetState()), d.GetMessage())
	}
}

// TestADriverWhoseWorkerIsGoneWaitsForAnother: the worker's port refuses
// the launch (it was killed): nothing ran, so the driver waits to be placed
// again instead of ending in ERROR.
func TestADriverWhoseWorkerIsGoneWaitsForAnother(t *testing.T) {
	c := newCluster(t, Config{})
	wp, stop := stoppablePeer(t)
	c.registerWorker(t, wp, 7078, 2, 4096)
	stop()
	id := submitDriver(t, c, false)
	tooltest.Eventually(t, "the driver waiting again", func() bool {
		d := c.driver(t, id)
		return lifecycle.Name(d.GetState()) == "SUBMITTED" && strings.Contains(d.GetMessage(), "launching it again")
	})
}

// stuckWorker takes LaunchDriver calls and answers none (a worker that died
// as the launch reached it).
type stuckWorker struct {
	workerPeer
	release chan struct{}
}

func (w *stuckWorker) LaunchDriver(ctx context.Context, r *connect.Request[workerv1.LaunchDriverRequest]) (*connect.Response[workerv1.LaunchDriverResponse], error) {
	w.record("stuck LaunchDriver %s", r.Msg.GetDriverId())
	select {
	case <-w.release:
	case <-ctx.Done():
	}
	return nil, connect.NewError(connect.CodeUnavailable, nil)
}

// TestADriverWhoseWorkerWasLostBeforeItTookTheLaunchIsPlacedAgain: an
// unsupervised driver placed on a worker that times out before answering its
// LaunchDriver never ran there: it waits to be placed again, not ERROR.
func TestADriverWhoseWorkerWasLostBeforeItTookTheLaunchIsPlacedAgain(t *testing.T) {
	c := newCluster(t, Config{WorkerTimeout: time.Minute})
	w := &stuckWorker{workerPeer: workerPeer{&peer{messages: make(chan string, 100)}}, release: make(chan struct{})}
	w.url = serveWorker(t, w)
	t.Cleanup(func() { close(w.release) })
	c.registerWorker(t, w.peer, 7078, 2, 4096)
	id := submitDriver(t, c, false)
	w.expect(t, "stuck LaunchDriver "+id)
	c.clock.Advance(2 * time.Minute)
	c.srv.checkWorkerTimeouts(context.Background())
	if d := c.driver(t, id); lifecycle.Name(d.GetState()) != "SUBMITTED" || !strings.Contains(d.GetMessage(), "before it took the launch") {
		t.Fatalf("driver %s %q after its worker was lost, want SUBMITTED, waiting to be placed again", lifecycle.Name(d.GetState()), d.GetMessage())
	}
}

// TestADriverThatRanOnALostWorkerEndsInError: Spark's rule stands for an
// unsupervised driver its worker took: it is lost with the worker (ERROR).
func TestADriverThatRanOnALostWorkerEndsInError(t *testing.T) {
	c := newCluster(t, Config{WorkerTimeout: time.Minute})
	wp := newPeer(t)
	c.registerWorker(t, wp, 7078, 2, 4096)
	id := submitDriver(t, c, false)
	wp.expect(t, "LaunchDriver "+id)
	c.waitLaunched(t, id)
	c.clock.Advance(2 * time.Minute)
	c.srv.checkWorkerTimeouts(context.Background())
	if d := c.driver(t, id); lifecycle.Name(d.GetState()) != "ERROR" || !strings.Contains(d.GetMessage(), "lost") {
		t.Fatalf("driver %s %q after its worker was lost, want ERROR", lifecycle.Name(d.GetState()), d.GetMessage())
	}
}

// runningSupervisedDriver submits a supervised driver to c, has a worker
// take its launch, and registers the driver's application; it returns the
// driver's and the application's ids.
func runningSupervisedDriver(t *testing.T, c *cluster) (id, app string) {
	t.Helper()
	wp := newPeer(t)
	c.registerWorker(t, wp, 7078, 2, 4096)
	id = submitDriver(t, c, true)
	wp.expect(t, "LaunchDriver "+id)
	c.waitLaunched(t, id)
	resp, err := c.client.RegisterApplication(context.Background(), connect.NewRequest(&masterv1.RegisterApplicationRequest{
		AppToken: rpc.NewToken(), MasterToken: rpc.NewToken(), Description: appDesc(512, 1), DriverUrl: newPeer(t).url, DriverId: id}))
	if err != nil {
		t.Fatal(err)
	}
	return id, resp.Msg.GetAppId()
}

// TestASupervisedDriverWhoseApplicationFinishedIsNotRunAgain: the driver
// unregistered its application (FINISHED), then its worker was lost before
// the worker reported the driver's exit: its work is done, so it ends
// FINISHED instead of being relaunched.
func TestASupervisedDriverWhoseApplicationFinishedIsNotRunAgain(t *testing.T) {
	c := newCluster(t, Config{WorkerTimeout: time.Minute})
	id, app := runningSupervisedDriver(t, c)
	if _, err := c.client.UnregisterApplication(context.Background(), connect.NewRequest(&masterv1.UnregisterApplicationRequest{AppId: app})); err != nil {
		t.Fatal(err)
	}
	c.clock.Advance(2 * time.Minute)
	c.srv.checkWorkerTimeouts(context.Background())
	if d := c.driver(t, id); lifecycle.Name(d.GetState()) != "FINISHED" || !strings.Contains(d.GetMessage(), "application had finished") {
		t.Fatalf("driver %s %q after its worker was lost, want FINISHED", lifecycle.Name(d.GetState()), d.GetMessage())
	}
	if n := len(c.srv.clusterState().GetActiveDrivers()); n != 0 {
		t.Fatalf("%d drivers active: the finished one was relaunched", n)
	}
}

// TestASupervisedDriverStoppedWithItsWorkerIsRelaunched: a worker that is
// killed takes its driver with it (SIGTERM), which ends its application
// KILLED before the worker is timed out: a supervised driver's work is not
// done, so it is relaunched (the soak lost such drivers as FINISHED). A
// state no application ends in is refused.
func TestASupervisedDriverStoppedWithItsWorkerIsRelaunched(t *testing.T) {
	c := newCluster(t, Config{WorkerTimeout: time.Minute})
	id, app := runningSupervisedDriver(t, c)
	running := &masterv1.UnregisterApplicationRequest{AppId: app, State: masterv1.ApplicationState_APPLICATION_STATE_RUNNING}
	if _, err := c.client.UnregisterApplication(context.Background(), connect.NewRequest(running)); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("unregister as RUNNING: %v, want invalid_argument", err)
	}
	killed := &masterv1.UnregisterApplicationRequest{AppId: app, State: masterv1.ApplicationState_APPLICATION_STATE_KILLED, Message: "context canceled"}
	if _, err := c.client.UnregisterApplication(context.Background(), connect.NewRequest(killed)); err != nil {
		t.Fatal(err)
	}
	c.clock.Advance(2 * time.Minute)
	c.srv.checkWorkerTimeouts(context.Background())
	if d := c.driver(t, id); lifecycle.Name(d.GetState()) != "RELAUNCHING" {
		t.Fatalf("driver %s %q after its worker was lost, want RELAUNCHING", lifecycle.Name(d.GetState()), d.GetMessage())
	}
	if n := len(c.srv.clusterState().GetActiveDrivers()); n != 1 {
		t.Fatalf("%d drivers active, want the relaunched one", n)
	}
}

// TestAMasterThatStalledGivesItsWorkersAWholeTimeout: a master that did not
// run for longer than the worker timeout (stopped) heard no heartbeat
// meanwhile; its workers are timed out only after a whole timeout more.
func TestAMasterThatStalledGivesItsWorkersAWholeTimeout(t *testing.T) {
	c := newCluster(t, Config{WorkerTimeout: time.Minute})
	worker := c.registerWorker(t, newPeer(t), 7078, 2, 4096)
	c.clock.Advance(2 * time.Minute)
	c.srv.resumed(2 * time.Minute)
	c.srv.checkWorkerTimeouts(context.Background())
	if !c.alive(worker) {
		t.Fatal("a worker was timed out as its master woke from a stall")
	}
	c.clock.Advance(61 * time.Second)
	c.srv.checkWorkerTimeouts(context.Background())
	if c.alive(worker) {
		t.Fatal("a worker silent for a whole timeout after the master resumed is still ALIVE")
	}
}

// alive reports whether the master holds worker ALIVE.
func (c *cluster) alive(worker string) bool {
	for _, w := range c.srv.clusterState().GetWorkers() {
		if w.GetId() == worker {
			return lifecycle.Name(w.GetState()) == "ALIVE"
		}
	}
	return false
}

// slowStore is a Store whose application writes wait until released, as
// etcd's do while it elects a leader.
type slowStore struct {
	store.Store
	writing, release chan struct{}
}

func (s *slowStore) PutApplication(p *masterv1.PersistedApplication) error {
	select {
	case s.writing <- struct{}{}:
	default:
	}
	<-s.release
	return s.Store.PutApplication(p)
}

// TestAMasterHearsItsWorkersWhileItsStoreIsSlow: state is written with the
// master's lock released, so a heartbeat is answered while a write waits,
// and the registration the write keeps is answered once it is kept.
func TestAMasterHearsItsWorkersWhileItsStoreIsSlow(t *testing.T) {
	st := &slowStore{Store: mustOpen(t, t.TempDir()), writing: make(chan struct{}, 1), release: make(chan struct{})}
	c := newCluster(t, Config{Store: st})
	worker := c.registerWorker(t, newPeer(t), 7078, 2, 4096)
	registered := make(chan error, 1)
	go func() {
		_, err := c.client.RegisterApplication(context.Background(), connect.NewRequest(&masterv1.RegisterApplicationRequest{
			AppToken: rpc.NewToken(), MasterToken: rpc.NewToken(), Description: appDesc(512, 1), DriverUrl: newPeer(t).url}))
		registered <- err
	}()
	<-st.writing
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.client.Heartbeat(ctx, connect.NewRequest(&masterv1.HeartbeatRequest{WorkerId: worker})); err != nil {
		t.Errorf("a heartbeat while the store writes: %v, want an answer", err)
	}
	select {
	case err := <-registered:
		t.Fatalf("the registration was answered (%v) before its write was kept", err)
	default:
	}
	close(st.release)
	if err := <-registered; err != nil {
		t.Fatalf("the registration once kept: %v", err)
	}
}

// unkeptLaunch is a Store that refuses its first write of a driver placed
// on a worker without keeping it, as etcd does when no quorum answers, and
// says whether a driver's placement was ever kept.
type unkeptLaunch struct {
	store.Store
	refused, kept atomic.Bool
}

func (s *unkeptLaunch) PutDriver(p *masterv1.PersistedDriver) error {
	if p.GetWorkerId() != "" && s.refused.CompareAndSwap(false, true) {
		return errors.New("etcdserver: request timed out")
	}
	err := s.Store.PutDriver(p)
	if err == nil && p.GetWorkerId() != "" {
		s.kept.Store(true)
	}
	return err
}

// keptLaunchWorker records whether each LaunchDriver came after the
// driver's placement was kept.
type keptLaunchWorker struct {
	workerPeer
	st *unkeptLaunch
}

func (w *keptLaunchWorker) LaunchDriver(ctx context.Context, r *connect.Request[workerv1.LaunchDriverRequest]) (*connect.Response[workerv1.LaunchDriverResponse], error) {
	if !w.st.kept.Load() {
		w.record("LaunchDriver %s before its placement was kept", r.Msg.GetDriverId())
	}
	return w.workerPeer.LaunchDriver(ctx, r)
}

// TestADriverWhosePlacementWasNotKeptIsNotLaunchedUntilItIs: the store
// refuses the write of a driver's placement. Before, the leader launched it
// all the same, and the next leader, finding it waiting, launched it again
// (the way the HA soak's cluster-mode wordcount could run twice with etcd
// members killed). The driver waits again with the reason and is launched
// once its placement is kept, never before.
func TestADriverWhosePlacementWasNotKeptIsNotLaunchedUntilItIs(t *testing.T) {
	st := &unkeptLaunch{Store: mustOpen(t, t.TempDir())}
	c := newCluster(t, Config{Store: st})
	w := &keptLaunchWorker{workerPeer: workerPeer{&peer{messages: make(chan string, 100)}}, st: st}
	w.url = serveWorker(t, w)
	c.registerWorker(t, w.peer, 7078, 2, 4096)
	id := submitDriver(t, c, false)
	tooltest.Eventually(t, "the driver waiting again", func() bool {
		d := c.driver(t, id)
		return lifecycle.Name(d.GetState()) == "SUBMITTED" && strings.Contains(d.GetMessage(), "could not be kept for recovery")
	})
	c.clock.Advance(time.Second)
	if m := w.expect(t, "LaunchDriver "+id); m != "LaunchDriver "+id {
		t.Fatalf("the worker got %q", m)
	}
	c.waitLaunched(t, id)
	if d := c.driver(t, id); lifecycle.Name(d.GetState()) != "RUNNING" {
		t.Errorf("driver %s is %s (%s), want RUNNING", id, lifecycle.Name(d.GetState()), d.GetMessage())
	}
}

// unkeptExecutor is a Store that refuses its first write of an application
// with an executor placed, without keeping it.
type unkeptExecutor struct {
	store.Store
	refused atomic.Bool
}

func (s *unkeptExecutor) PutApplication(p *masterv1.PersistedApplication) error {
	if p.GetNextExecutorId() > 0 && s.refused.CompareAndSwap(false, true) {
		return errors.New("etcdserver: request timed out")
	}
	return s.Store.PutApplication(p)
}

// TestAnExecutorWhoseIdWasNotKeptIsNotLaunched: the store refuses the write
// that keeps an application's next executor id. The executor is not
// launched (a master leading next could give its id to another); the
// application backs off and its next executor, kept, is launched.
func TestAnExecutorWhoseIdWasNotKeptIsNotLaunched(t *testing.T) {
	st := &unkeptExecutor{Store: mustOpen(t, t.TempDir())}
	c := newCluster(t, Config{Store: st})
	wp, dp := newPeer(t), newPeer(t)
	c.registerWorker(t, wp, 7078, 1, 4096) // room for one executor at a time
	app := c.registerApp(t, dp, appDesc(512, 1))
	tooltest.Eventually(t, "the store to refuse the executor's write", st.refused.Load)
	tooltest.Eventually(t, "the application to back off saying why", func() bool {
		return strings.Contains(c.app(t, app).GetStatusMessage(), "launching more in")
	})
	c.clock.Advance(time.Second)
	if m := wp.expect(t, "LaunchExecutor "+app+"/"); !strings.HasPrefix(m, "LaunchExecutor "+app+"/1 ") {
		t.Fatalf("the worker got %q first, want executor 1 (0 was not kept)", m)
	}
}
