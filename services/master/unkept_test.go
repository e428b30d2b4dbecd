package master

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/services/master/store"
)

// refusingStore is a Store that refuses every write while refuse is set, as
// an etcd without a quorum or a full disk would.
type refusingStore struct {
	store.Store
	refuse atomic.Bool
}

var errRefused = errors.New("etcdserver: request timed out")

func (s *refusingStore) PutApplication(p *masterv1.PersistedApplication) error {
	if s.refuse.Load() {
		return errRefused
	}
	return s.Store.PutApplication(p)
}

func (s *refusingStore) DeleteApplication(id string) error {
	if s.refuse.Load() {
		return errRefused
	}
	return s.Store.DeleteApplication(id)
}

// kept waits until the master's keeper made every write asked for so far:
// it writes in order, so a write asked for now is made after them.
func (c *cluster) kept(t *testing.T) {
	t.Helper()
	kept := make(chan error, 1)
	c.srv.mu.Lock()
	c.srv.keepLocked("counters", func(err error) { kept <- err })
	c.srv.mu.Unlock()
	if err := <-kept; err != nil {
		t.Fatalf("keep the counters: %v", err)
	}
}

func keptApp(t *testing.T, st store.Store, id string) *masterv1.PersistedApplication {
	t.Helper()
	r, err := st.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range r.Applications {
		if a.GetId() == id {
			return a
		}
	}
	return nil
}

// TestAChangeTheStoreRefusedIsKeptOnceItAnswersAgain: a driver's executor
// limit is a change the master makes whether or not the store kept it. The
// driver is told it was not kept, and the master keeps it once the store
// answers, rather than leaving the store with the limit before it — which a
// master leading next would recover.
func TestAChangeTheStoreRefusedIsKeptOnceItAnswersAgain(t *testing.T) {
	st := &refusingStore{Store: mustOpen(t, t.TempDir())}
	c := newCluster(t, Config{Store: st})
	app := c.registerApp(t, newPeer(t), appDesc(512, 1))
	st.refuse.Store(true)
	_, err := c.client.RequestExecutors(context.Background(), connect.NewRequest(&masterv1.RequestExecutorsRequest{AppId: app, RequestedTotal: 3}))
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("RequestExecutors while the store refuses writes: %v, want unavailable", err)
	}
	c.srv.keepUnkept()
	c.kept(t)
	if got := keptApp(t, st, app).GetExecutorLimit(); got == 3 {
		t.Fatal("the limit was kept while the store refused it")
	}
	st.refuse.Store(false)
	c.srv.keepUnkept()
	c.kept(t)
	if got := keptApp(t, st, app).GetExecutorLimit(); got != 3 {
		t.Fatalf("kept executor limit %d once the store answered, want 3", got)
	}
	if n := len(c.srv.unkept); n != 0 {
		t.Fatalf("%d things left to keep, want none", n)
	}
}

// TestAMasterThatMustKeepItsStateStepsDownAtAFailedWrite: under HA
// (StepDownOnFailedWrite) a write the store did not take ends the master's
// leadership: Run returns saying so, and the call that made the change is
// refused, to be retried at the master that leads next.
func TestAMasterThatMustKeepItsStateStepsDownAtAFailedWrite(t *testing.T) {
	st := &refusingStore{Store: mustOpen(t, t.TempDir())}
	c := newCluster(t, Config{Store: st, StepDownOnFailedWrite: true})
	app := c.registerApp(t, newPeer(t), appDesc(512, 1))
	ran := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { ran <- c.srv.Run(ctx) }()
	st.refuse.Store(true)
	_, err := c.client.RequestExecutors(context.Background(), connect.NewRequest(&masterv1.RequestExecutorsRequest{AppId: app, RequestedTotal: 3}))
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("RequestExecutors while the store refuses writes: %v, want unavailable", err)
	}
	select {
	case err := <-ran:
		if err == nil || !strings.Contains(err.Error(), "a state write failed, so it steps down") {
			t.Fatalf("Run ended with %v, want it stepping down after the failed write", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the master still leads 30s after a write failed")
	}
}

// driverRefusingStore is a Store that refuses every write of a driver while
// refuse is set.
type driverRefusingStore struct {
	store.Store
	refuse atomic.Bool
}

func (s *driverRefusingStore) PutDriver(p *masterv1.PersistedDriver) error {
	if s.refuse.Load() {
		return errRefused
	}
	return s.Store.PutDriver(p)
}

// TestADriversEndIsToldOnlyOnceKept: the store refuses the write of a
// driver's end. Before, its worker's report was answered and its status
// showed FINISHED all the same; a master that then stopped leading left the
// next one the driver running, which lost it with its worker in ERROR (the
// HA soak's "final state changed"). The report is refused as not kept, so its
// worker sends it again, and the status shows no end until it is kept.
func TestADriversEndIsToldOnlyOnceKept(t *testing.T) {
	st := &driverRefusingStore{Store: mustOpen(t, t.TempDir())}
	c := newCluster(t, Config{Store: st})
	wp := newPeer(t)
	worker := c.registerWorker(t, wp, 7078, 4, 4096)
	driver := submitDriver(t, c, false)
	wp.expect(t, "LaunchDriver "+driver)
	c.waitLaunched(t, driver)
	ctx := context.Background()
	report := &masterv1.DriverStateChangedRequest{DriverId: driver, WorkerId: worker, State: masterv1.DriverState_DRIVER_STATE_FINISHED}
	status := func() (*connect.Response[masterv1.DriverStatusResponse], error) {
		return c.client.DriverStatus(ctx, connect.NewRequest(&masterv1.DriverStatusRequest{DriverId: driver}))
	}
	st.refuse.Store(true)
	if _, err := c.client.DriverStateChanged(ctx, connect.NewRequest(report)); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("the driver's end reported while the store refuses writes: %v, want unavailable", err)
	}
	if resp, err := status(); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("the status of a driver whose end is not kept: %v, %v; want unavailable", resp.Msg.GetDriver().GetState(), err)
	}
	st.refuse.Store(false)
	if _, err := c.client.DriverStateChanged(ctx, connect.NewRequest(report)); err != nil {
		t.Fatalf("the report sent again once the store takes writes: %v", err)
	}
	resp, err := status()
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Msg.GetDriver().GetState(); got != masterv1.DriverState_DRIVER_STATE_FINISHED {
		t.Fatalf("the driver's status once its end is kept: %v, want FINISHED", got)
	}
}
