package master

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/glint-cluster/glint/internal/tooltest"
	"github.com/glint-cluster/glint/pkg/api/glint/driver/v1/driverv1connect"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/worker/v1/workerv1connect"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// stoppablePeer is newPeer with a function that closes its listener: a
// worker or driver process that is gone, whose port refuses connections.
func stoppablePeer(t *testing.T) (*peer, func()) {
	t.Helper()
	p := &peer{messages: make(chan string, 1000)}
	mux := http.NewServeMux()
	mux.Handle(workerv1connect.NewWorkerServiceHandler(&workerPeer{p}))
	mux.Handle(driverv1connect.NewDriverServiceHandler(&driverPeer{p}))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config = rpc.NewServer(mux)
	srv.Start()
	t.Cleanup(srv.Close)
	p.url = srv.URL
	return p, srv.Close
}

// TestRecoveryEndsOnceTheKeptWorkerIsKnownGone: the kept worker's port
// refuses the recovering master's MasterChanged. The master does not wait
// out the worker timeout (ten minutes here) for it: once the driver answered,
// it is ALIVE, the worker DEAD.
func TestRecoveryEndsOnceTheKeptWorkerIsKnownGone(t *testing.T) {
	dir := t.TempDir()
	wp, stop := stoppablePeer(t)
	dp := newPeer(t)
	worker, app := keptCluster(t, dir, wp, dp, false)
	stop()
	c := recoveringCluster(t, dir, Config{WorkerTimeout: 10 * time.Minute})
	c.srv.beginRecovery(context.Background())
	dp.expect(t, "MasterChanged "+app)
	tooltest.Eventually(t, "the master ALIVE before its worker timeout", func() bool { return c.srv.clusterState().GetStatus() == statusAlive })
	w := c.srv.clusterState().GetWorkers()[0]
	if w.GetId() != worker || lifecycle.Name(w.GetState()) != "DEAD" {
		t.Fatalf("the gone worker %s is %s, want DEAD", w.GetId(), lifecycle.Name(w.GetState()))
	}
}

// TestRecoveryEndsOnceTheKeptDriverIsKnownGone: the kept application's
// driver refuses the recovering master's connection: the application ends
// FAILED, saying so, and the recovery ends as soon as the worker is back.
func TestRecoveryEndsOnceTheKeptDriverIsKnownGone(t *testing.T) {
	dir := t.TempDir()
	wp := newPeer(t)
	dp, stop := stoppablePeer(t)
	worker, app := keptCluster(t, dir, wp, dp, false)
	stop()
	c := recoveringCluster(t, dir, Config{WorkerTimeout: 10 * time.Minute})
	c.srv.beginRecovery(context.Background())
	if _, err := c.client.RegisterWorker(context.Background(), connect.NewRequest(&masterv1.RegisterWorkerRequest{
		WorkerId: worker, Host: "127.0.0.1", Port: 7078, Cores: 4, MemoryMib: 4096, WorkerUrl: wp.url,
	})); err != nil {
		t.Fatal(err)
	}
	tooltest.Eventually(t, "the master ALIVE before its worker timeout", func() bool { return c.srv.clusterState().GetStatus() == statusAlive })
	if a := c.app(t, app); lifecycle.Name(a.GetState()) != "FAILED" || !strings.Contains(a.GetStatusMessage(), "refused") {
		t.Fatalf("the application whose driver is gone: %s %q, want FAILED saying its driver refused", lifecycle.Name(a.GetState()), a.GetStatusMessage())
	}
}

// TestRecoveryEndsOnceANewWorkerTookTheKeptOnesAddress: a worker restarted
// on the kept one's address registers under a new id: the kept one is gone,
// and the recovery does not wait for it.
func TestRecoveryEndsOnceANewWorkerTookTheKeptOnesAddress(t *testing.T) {
	dir := t.TempDir()
	wp, dp := newPeer(t), newPeer(t)
	worker, app := keptCluster(t, dir, wp, dp, false)
	c := recoveringCluster(t, dir, Config{WorkerTimeout: 10 * time.Minute})
	c.srv.beginRecovery(context.Background())
	dp.expect(t, "MasterChanged "+app)
	restarted := strings.Replace(worker, "20261129140000", "20261129140500", 1)
	if _, err := c.client.RegisterWorker(context.Background(), connect.NewRequest(&masterv1.RegisterWorkerRequest{
		WorkerId: restarted, Host: "127.0.0.1", Port: 7078, Cores: 4, MemoryMib: 4096, WorkerUrl: wp.url,
	})); err != nil {
		t.Fatal(err)
	}
	tooltest.Eventually(t, "the master ALIVE before its worker timeout", func() bool { return c.srv.clusterState().GetStatus() == statusAlive })
}

// TestARecoveringMasterAnswersARepeatedRegistrationWithTheKeptApplication:
// a driver whose registration's answer was lost registers again while the
// master recovers: it gets its kept application, which that acknowledges.
func TestARecoveringMasterAnswersARepeatedRegistrationWithTheKeptApplication(t *testing.T) {
	dir := t.TempDir()
	dp := newPeer(t)
	_, app := keptCluster(t, dir, newPeer(t), dp, false)
	c := recoveringCluster(t, dir, Config{WorkerTimeout: 10 * time.Minute})
	c.srv.mu.Lock()
	token := c.srv.apps[app].appToken
	c.srv.mu.Unlock()
	resp, err := c.client.RegisterApplication(context.Background(), connect.NewRequest(&masterv1.RegisterApplicationRequest{
		AppToken: token, MasterToken: rpc.NewToken(), Description: appDesc(512, 1), DriverUrl: dp.url}))
	if err != nil || resp.Msg.GetAppId() != app {
		t.Fatalf("a repeated registration while recovering: %v %v, want the kept application %s", resp, err, app)
	}
	if a := c.app(t, app); lifecycle.Name(a.GetState()) == "UNKNOWN" {
		t.Fatalf("the kept application is still UNKNOWN after its driver registered again")
	}
}
