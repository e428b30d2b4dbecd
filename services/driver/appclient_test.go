package driver_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/glint-cluster/glint/internal/etcdtest"
	"github.com/glint-cluster/glint/internal/servicetest"
	"github.com/glint-cluster/glint/internal/tooltest"
	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/services/driver"
	"github.com/glint-cluster/glint/services/master"
	"github.com/glint-cluster/glint/services/master/store"
)

// startStandby serves a master under etcd election that stays a standby
// (another candidate leads) and accepts only tokens, until the test ends.
func startStandby(t *testing.T, tokens *rpc.Tokens) string {
	t.Helper()
	endpoint := etcdtest.Start(t)
	s, err := concurrency.NewSession(etcdtest.Client(t, endpoint), concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := concurrency.NewElection(s, "/glint-test/leader").Campaign(context.Background(), "http://leader.example:7077"); err != nil {
		t.Fatal(err)
	}
	ln, url := servicetest.Listen(t)
	h, err := master.NewHA(master.HAConfig{Master: master.Config{URL: url, Tokens: tokens}, Etcd: etcdtest.Client(t, endpoint), Prefix: "/glint-test", LeaseTTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served, ran := make(chan struct{}), make(chan struct{})
	go func() { defer close(served); _ = rpc.Serve(ctx, ln, h.Handler()) }()
	go func() { defer close(ran); _ = h.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-served; <-ran })
	return url
}

// tokensOf accepts the cluster token and the submit tokens given.
func tokensOf(cluster string, submit ...string) *rpc.Tokens {
	tokens := rpc.NewTokens()
	tokens.Add(rpc.Cluster, cluster)
	for _, s := range submit {
		tokens.Add(rpc.Submit, s)
	}
	return tokens
}

// A cluster-mode driver calls with a submit token that only the master
// that made it knows. A standby listed first is passed for the next master
// however the driver's token looks to it; the leader takes it.
func TestRegistrationPassesAStandbyListedFirstWhateverTheDriversToken(t *testing.T) {
	cluster, driverToken := rpc.NewToken(), rpc.NewToken()
	standby := startStandby(t, tokensOf(cluster))
	leader := servicetest.Master(t, master.Config{Tokens: tokensOf(cluster, driverToken)})
	d := servicetest.Driver(t, driver.Config{
		Masters: []string{standby, leader}, App: echoApp(nil), ExecutorCommand: []string{"/bin/false"},
		SubmitToken: driverToken, RegisterInterval: 10 * time.Millisecond,
	})
	if !strings.HasPrefix(d.AppID(), "app-") {
		t.Fatalf("app id %q", d.AppID())
	}
	// The standby alone: Unavailable is tried again until the timeout, not
	// taken as a refusal.
	d, err := servicetest.NewDriver(t, driver.Config{
		Masters: []string{standby}, App: echoApp(nil), ExecutorCommand: []string{"/bin/false"},
		SubmitToken: driverToken, RegisterTimeout: 2 * time.Second, RegisterInterval: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Register(context.Background()); err == nil || !strings.Contains(err.Error(), "no master took it within 2s") ||
		!strings.Contains(err.Error(), "standby") {
		t.Fatalf("registering with a standby alone: %v, want the standby's answer until the timeout", err)
	}
}

// A master that recovers its state refuses registrations (Unavailable)
// until its workers reported or a worker timeout passed: the driver tries
// again until it takes the application.
func TestRegistrationWaitsForAMasterThatRecovers(t *testing.T) {
	store, err := store.OpenFileStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// A kept worker that never answers (a paused process: its port takes
	// connections, nothing reads them): recovery lasts a worker timeout.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	port := silent.Addr().(*net.TCPAddr).Port
	if err := store.PutWorker(&masterv1.PersistedWorker{Id: fmt.Sprintf("worker-20261201000000-127.0.0.1-%d", port), Host: "127.0.0.1",
		Port: int32(port), WorkerUrl: "http://" + silent.Addr().String(), Cores: 1, MemoryMib: 1024}); err != nil {
		t.Fatal(err)
	}
	m := servicetest.Master(t, master.Config{Store: store, WorkerTimeout: 2 * time.Second})
	if status := readyz(t, m); status != "RECOVERING" {
		t.Fatalf("the master is %s, want RECOVERING", status)
	}
	d := servicetest.Driver(t, driver.Config{
		Masters: []string{m}, App: echoApp(nil), ExecutorCommand: []string{"/bin/false"}, RegisterInterval: 50 * time.Millisecond,
	})
	if status := readyz(t, m); !strings.HasPrefix(d.AppID(), "app-") || status != "ALIVE" {
		t.Fatalf("app id %q registered with a master %s", d.AppID(), status)
	}
}

// readyz is what a master's /readyz says (its status).
func readyz(t *testing.T, url string) string {
	t.Helper()
	return strings.TrimSpace(tooltest.Get(t, url+"/readyz"))
}

// After registration, the driver's calls go to the master it reports to and
// on to the others while that one does not lead: here a master change named
// a standby, and the driver's end still reaches the leader.
func TestTheDriversCallsPassOnFromAMasterThatDoesNotLead(t *testing.T) {
	cluster := rpc.NewToken()
	standby := startStandby(t, tokensOf(cluster))
	leader := servicetest.Master(t, master.Config{Tokens: tokensOf(cluster, cluster)})
	d, err := servicetest.NewDriver(t, driver.Config{
		Masters: []string{leader, standby}, App: echoApp(nil), ExecutorCommand: []string{"/bin/false"}, SubmitToken: cluster,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Register(context.Background()); err != nil {
		t.Fatal(err)
	}
	toDriver := asMaster(d)
	if _, err := toDriver.MasterChanged(context.Background(), connect.NewRequest(&driverv1.MasterChangedRequest{AppId: d.AppID(), MasterUrl: standby})); err != nil {
		t.Fatal(err)
	}
	d.Stop(context.Background())
	state, err := masterv1connect.NewMasterServiceClient(rpc.NewHTTPClient(), leader, rpc.ClientOptions(nil, cluster)...).
		GetClusterState(context.Background(), connect.NewRequest(&masterv1.GetClusterStateRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if done := state.Msg.GetCompletedApps(); len(done) != 1 || done[0].GetId() != d.AppID() ||
		done[0].GetState() != masterv1.ApplicationState_APPLICATION_STATE_FINISHED {
		t.Fatalf("the leader's completed applications %v, want %s FINISHED", done, d.AppID())
	}
}
