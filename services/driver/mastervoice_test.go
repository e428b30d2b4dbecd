package driver_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/glint-cluster/glint/internal/etcdtest"
	"github.com/glint-cluster/glint/internal/servicetest"
	"github.com/glint-cluster/glint/internal/tooltest"
	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/driver/v1/driverv1connect"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/services/driver"
	"github.com/glint-cluster/glint/services/master"
	"github.com/glint-cluster/glint/services/master/store"
)

// attacker is a loopback listener that counts the connections made to it:
// where a hostile MasterChanged would send the driver's calls.
type attacker struct {
	url string
	mu  sync.Mutex
	n   int
}

func listenAsAttacker(t *testing.T) *attacker {
	t.Helper()
	ln, url := servicetest.Listen(t)
	a := &attacker{url: url}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			a.mu.Lock()
			a.n++
			a.mu.Unlock()
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return a
}

func (a *attacker) connections() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n
}

// callDriver is a client of d's DriverService with token.
func callDriver(d *driver.Driver, token string) driverv1connect.DriverServiceClient {
	return driverv1connect.NewDriverServiceClient(rpc.NewHTTPClient(), d.URL(), rpc.ClientOptions(noop.NewTracerProvider(), token)...)
}

// completedAs is the state in which the master at url lists app among its
// completed applications ("" while it does not).
func completedAs(t *testing.T, url, app string) string {
	t.Helper()
	st, err := masterv1connect.NewMasterServiceClient(rpc.NewHTTPClient(), url).
		GetClusterState(context.Background(), connect.NewRequest(&masterv1.GetClusterStateRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range st.Msg.GetCompletedApps() {
		if a.GetId() == app {
			return a.GetState().String()
		}
	}
	return ""
}

// Code in an executor holds the application's token only. With it, none of
// the master's calls is taken: each is refused before its handler runs, so
// the driver keeps its master (its end reaches that master, nothing reaches
// the URL named), its epoch, its executors and its application.
func TestAnExecutorsTokenCannotSpeakAsTheMaster(t *testing.T) {
	a := echoApp(func(_ context.Context, in []byte) ([]byte, error) { return in, nil })
	m := startMaster(t)
	d, err := servicetest.NewDriver(t, driver.Config{Masters: []string{m}, App: a, ExecutorCommand: []string{"/bin/false"}, ExecutorMemoryMiB: 256})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Register(context.Background()); err != nil {
		t.Fatal(err)
	}
	startExecutor(t, d, a, 0, 1)
	if r := await(t, "a job before", runJob(d, "before")); r.err != nil {
		t.Fatal(r.err)
	}
	evil := listenAsAttacker(t)
	ctx := context.Background()
	for _, token := range []struct {
		name, token string
		want        connect.Code
	}{
		{"the application's token", d.AppToken(), connect.CodePermissionDenied},
		{"no token", "", connect.CodeUnauthenticated},
		{"a wrong token", rpc.NewToken(), connect.CodeUnauthenticated},
	} {
		c := callDriver(d, token.token)
		for name, call := range map[string]func() error{
			"MasterChanged to another URL": func() error {
				_, err := c.MasterChanged(ctx, connect.NewRequest(&driverv1.MasterChangedRequest{AppId: d.AppID(), MasterUrl: evil.url}))
				return err
			},
			"ExecutorAdded of a future epoch": func() error {
				_, err := c.ExecutorAdded(ctx, connect.NewRequest(&driverv1.ExecutorAddedRequest{AppId: d.AppID(), ExecutorId: 9, Cores: 64, Epoch: 9e18}))
				return err
			},
			"ExecutorUpdated: the executor is killed": func() error {
				_, err := c.ExecutorUpdated(ctx, connect.NewRequest(&driverv1.ExecutorUpdatedRequest{AppId: d.AppID(), ExecutorId: 0,
					State: masterv1.ExecutorState_EXECUTOR_STATE_KILLED}))
				return err
			},
			"ApplicationRemoved": func() error {
				_, err := c.ApplicationRemoved(ctx, connect.NewRequest(&driverv1.ApplicationRemovedRequest{AppId: d.AppID(), Message: "KILLED: forged"}))
				return err
			},
			"Ping": func() error {
				_, err := c.Ping(ctx, connect.NewRequest(&driverv1.PingRequest{AppId: d.AppID()}))
				return err
			},
		} {
			if err := call(); connect.CodeOf(err) != token.want {
				t.Errorf("%s with %s: %v, want %v", name, token.name, err, token.want)
			}
		}
	}
	// Nothing changed: a job still runs on executor 0, the master's own
	// messages of epoch 0 are taken, and the driver's end reaches its master.
	if r := await(t, "a job after", runJob(d, "after")); r.err != nil || string(r.out[0]) != "after" {
		t.Fatalf("a job after the forged calls: %q, %v; want it run on executor 0", r.out, r.err)
	}
	if _, err := asMaster(d).Ping(ctx, connect.NewRequest(&driverv1.PingRequest{AppId: d.AppID()})); err != nil {
		t.Fatalf("the master's Ping: %v", err)
	}
	if _, err := asMaster(d).ExecutorAdded(ctx, connect.NewRequest(&driverv1.ExecutorAddedRequest{AppId: d.AppID(), ExecutorId: 1, Cores: 1})); err != nil {
		t.Fatalf("the master's ExecutorAdded of epoch 0: %v (a forged epoch was kept)", err)
	}
	d.Stop(ctx)
	if state := completedAs(t, m, d.AppID()); state != "APPLICATION_STATE_FINISHED" {
		t.Errorf("the driver's master lists the application as %q, want it FINISHED by the driver's end", state)
	}
	if n := evil.connections(); n != 0 {
		t.Errorf("the URL an executor named got %d connections, want none", n)
	}
}

// Even with the master's token, MasterChanged selects among the masters the
// driver was given (named in any spelling of the same scheme, host and
// port) and never adds one: the driver sends its submit token to no other.
func TestMasterChangedSelectsAmongTheDriversMastersOnly(t *testing.T) {
	m := startMaster(t)
	other := startMaster(t)
	d := servicetest.Driver(t, driver.Config{Masters: []string{m, other}, App: echoApp(nil), ExecutorCommand: []string{"/bin/false"}})
	evil := listenAsAttacker(t)
	ctx := context.Background()
	// The last named is where the driver's calls would go.
	for _, url := range []string{"http://attacker.example:7077", "http://localhost" + strings.TrimPrefix(evil.url, "http://127.0.0.1"), evil.url} {
		_, err := asMaster(d).MasterChanged(ctx, connect.NewRequest(&driverv1.MasterChangedRequest{AppId: d.AppID(), MasterUrl: url}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "master_url") ||
			!strings.Contains(err.Error(), "not one of this driver's masters") {
			t.Errorf("MasterChanged to %s: %v, want invalid_argument naming master_url, not one of the driver's masters", url, err)
		}
	}
	d.Stop(ctx)
	if state := completedAs(t, m, d.AppID()); state != "APPLICATION_STATE_FINISHED" {
		t.Errorf("its master lists the application as %q, want FINISHED by the driver's end", state)
	}
	if n := evil.connections(); n != 0 {
		t.Errorf("the URL named got %d connections, want none", n)
	}
	// Its other master, named in another spelling, is selected.
	if _, err := asMaster(d).MasterChanged(ctx, connect.NewRequest(&driverv1.MasterChangedRequest{
		AppId: d.AppID(), MasterUrl: "spark://" + strings.TrimPrefix(other, "http://")})); err != nil {
		t.Fatalf("MasterChanged to its other master: %v", err)
	}
}

// runMaster serves a master for cfg on ln until stop is called (or the test
// ends).
func runMaster(t *testing.T, ln net.Listener, cfg master.Config) (stop func()) {
	t.Helper()
	cfg.URL = "http://" + ln.Addr().String()
	m, err := master.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return serveUntilStopped(t, ln, m.Handler(), m.Run)
}

// serveUntilStopped serves h on ln and runs run until stop is called (or
// the test ends).
func serveUntilStopped(t *testing.T, ln net.Listener, h http.Handler, run func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = run(ctx) })
	wg.Go(func() { _ = rpc.Serve(ctx, ln, h) })
	stop = sync.OnceFunc(func() { cancel(); wg.Wait() })
	t.Cleanup(stop)
	return stop
}

// A master that restarts from its file, or is elected on etcd after the
// leader stopped, speaks to the driver with the token the driver gave the
// first: the driver's answer acknowledges the application, so the master is
// ALIVE long before the worker timeout would end its recovery, and the
// driver's end reaches it.
func TestAMasterThatTakesOverSpeaksToTheDriverWithTheTokenItKept(t *testing.T) {
	const workerTimeout = 10 * time.Minute // recovery ends only by the driver's answer
	restartFromFile := func(t *testing.T, ln1, ln2 net.Listener) (func(), func()) {
		dir := t.TempDir()
		st, err := store.OpenFileStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		stop := runMaster(t, ln1, master.Config{Store: st, WorkerTimeout: workerTimeout})
		return func() {
				stop()
				if err := st.Close(); err != nil {
					t.Fatal(err)
				}
			}, func() {
				next, err := store.OpenFileStore(dir)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { next.Close() })
				runMaster(t, ln2, master.Config{Store: next, WorkerTimeout: workerTimeout})
			}
	}
	for _, tc := range []struct {
		name string
		// alias: the driver names the next master otherwise than it names
		// itself (a Service in front of it): the driver refuses to follow
		// its URL, and its answer to the master's Ping acknowledges the
		// application instead.
		alias bool
		// start starts the first master on ln1 and the next on ln2 once
		// the first stopped, and returns the function that stops the first.
		start func(t *testing.T, ln1, ln2 net.Listener) (stopFirst func(), startNext func())
	}{
		{"restarted from its file", false, restartFromFile},
		{"restarted from its file, named otherwise by the driver", true, restartFromFile},
		{"elected on etcd", false, func(t *testing.T, ln1, ln2 net.Listener) (func(), func()) {
			cli := etcdtest.Client(t, etcdtest.Start(t))
			ha := func(ln net.Listener) func() {
				h, err := master.NewHA(master.HAConfig{Master: master.Config{URL: "http://" + ln.Addr().String(), WorkerTimeout: workerTimeout},
					Etcd: cli, Prefix: "/glint-voice", LeaseTTL: 5 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				return serveUntilStopped(t, ln, h.Handler(), h.Run)
			}
			stop := ha(ln1)
			tooltest.Eventually(t, "the first master elected", func() bool { return readyz(t, "http://"+ln1.Addr().String()) == "ALIVE" })
			return stop, func() { ha(ln2) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln1, first := servicetest.Listen(t)
			ln2, next := servicetest.Listen(t)
			stopFirst, startNext := tc.start(t, ln1, ln2)
			driversName := next
			if tc.alias {
				driversName = strings.Replace(next, "127.0.0.1", "localhost", 1)
			}
			d, err := servicetest.NewDriver(t, driver.Config{Masters: []string{first, driversName}, App: echoApp(nil), ExecutorCommand: []string{"/bin/false"}})
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Register(context.Background()); err != nil {
				t.Fatal(err)
			}
			stopFirst()
			startNext()
			tooltest.Eventually(t, "the next master ALIVE, the driver's answer acknowledging the application", func() bool { return readyz(t, next) == "ALIVE" })
			d.Stop(context.Background())
			if state := completedAs(t, next, d.AppID()); state != "APPLICATION_STATE_FINISHED" {
				t.Errorf("the next master lists the application as %q, want FINISHED", state)
			}
		})
	}
}

// A driver whose registration is not answered yet refuses a recovering
// master's MasterChanged Unavailable, so that the master tells it again once
// its registration — which that master may have kept — is answered.
func TestADriverNotYetRegisteredAsksTheMasterToTellItAgain(t *testing.T) {
	m := startMaster(t)
	d, err := servicetest.NewDriver(t, driver.Config{Masters: []string{m}, App: echoApp(nil), ExecutorCommand: []string{"/bin/false"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = asMaster(d).MasterChanged(context.Background(), connect.NewRequest(&driverv1.MasterChangedRequest{AppId: "app-20261203060731-0044", MasterUrl: m}))
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "not answered yet") {
		t.Fatalf("MasterChanged before the registration was answered: %v, want unavailable, not answered yet", err)
	}
}
