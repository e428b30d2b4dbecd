package master

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/glint-cluster/glint/pkg/api/glint/driver/v1/driverv1connect"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	workerv1 "github.com/glint-cluster/glint/pkg/api/glint/worker/v1"
	"github.com/glint-cluster/glint/pkg/redact"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/rpc/rpctest"
	"github.com/glint-cluster/glint/pkg/telemetry"
	"github.com/glint-cluster/glint/pkg/telemetry/prom"
)

// secrets are the values the commands below carry under secret names.
var secrets = []string{"s3cr3t-conf", "s3cr3t-conf-eq", "s3cr3t-arg", "s3cr3t-env", "s3cr3t-aws", "s3cr3t-driver-conf", "s3cr3t-driver-env"}

func secretAppCommand() *masterv1.Command {
	return &masterv1.Command{
		Args: []string{"glint", "executor", "--conf", "spark.authenticate.secret=s3cr3t-conf",
			"--conf=spark.ssl.keyPassword=s3cr3t-conf-eq", "AWS_ACCESS_KEY=s3cr3t-arg", "--conf", "spark.executor.memory=1g"},
		Env: map[string]string{"MY_TOKEN": "s3cr3t-env", "AWS_SECRET_ACCESS_KEY": "s3cr3t-aws", "PLAIN": "shown"},
	}
}

func secretDriverCommand() *masterv1.Command {
	return &masterv1.Command{
		Args: []string{"glint", "driver", "--conf", "my.token=s3cr3t-driver-conf", "pi"},
		Env:  map[string]string{"DB_PASSWORD": "s3cr3t-driver-env"},
	}
}

// launchPeer is a worker that passes on the commands the master sends it.
type launchPeer struct {
	workerPeer
	commands chan *masterv1.Command
}

func (w *launchPeer) LaunchExecutor(_ context.Context, r *connect.Request[workerv1.LaunchExecutorRequest]) (*connect.Response[workerv1.LaunchExecutorResponse], error) {
	w.commands <- r.Msg.GetDescription().GetCommand()
	return connect.NewResponse(&workerv1.LaunchExecutorResponse{}), nil
}

func (w *launchPeer) LaunchDriver(_ context.Context, r *connect.Request[workerv1.LaunchDriverRequest]) (*connect.Response[workerv1.LaunchDriverResponse], error) {
	w.commands <- r.Msg.GetDescription().GetCommand()
	return connect.NewResponse(&workerv1.LaunchDriverResponse{}), nil
}

// TestShownStateHidesSecretsOfCommands: an application's and a driver's
// secrets, given as --conf properties, KEY=VALUE arguments and environment
// variables, never appear in GetClusterState, DriverStatus or /json, active or
// completed; the commands the master sends the worker afterwards are whole.
func TestShownStateHidesSecretsOfCommands(t *testing.T) {
	c := newCluster(t, Config{})
	dp := newPeer(t)
	c.registerApp(t, dp, &masterv1.ApplicationDescription{Name: "pi", MemoryPerExecutorMib: 512, Command: secretAppCommand()})
	done := c.registerApp(t, dp, &masterv1.ApplicationDescription{Name: "done", MemoryPerExecutorMib: 512, Command: secretAppCommand()})
	if _, err := c.client.KillApplication(context.Background(), connect.NewRequest(&masterv1.KillApplicationRequest{AppId: done})); err != nil {
		t.Fatal(err)
	}
	submitted, err := c.client.SubmitDriver(context.Background(), connect.NewRequest(&masterv1.SubmitDriverRequest{
		Description: &masterv1.DriverDescription{Name: "d", Cores: 1, MemoryMib: 512, Command: secretDriverCommand()},
	}))
	if err != nil {
		t.Fatal(err)
	}
	driver := submitted.Msg.GetDriverId()

	st, err := c.client.GetClusterState(context.Background(), connect.NewRequest(&masterv1.GetClusterStateRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	status, err := c.client.DriverStatus(context.Background(), connect.NewRequest(&masterv1.DriverStatusRequest{DriverId: driver}))
	if err != nil {
		t.Fatal(err)
	}
	for name, m := range map[string]proto.Message{"GetClusterState": st.Msg, "DriverStatus": status.Msg} {
		assertNoSecret(t, name, protojson.Format(m))
	}
	if len(st.Msg.GetActiveApps()) != 1 || len(st.Msg.GetCompletedApps()) != 1 || len(st.Msg.GetActiveDrivers()) != 1 {
		t.Fatalf("cluster state %v: want an active and a completed app, an active driver", st.Msg)
	}
	for _, a := range append(st.Msg.GetActiveApps(), st.Msg.GetCompletedApps()...) {
		args, env := a.GetDescription().GetCommand().GetArgs(), a.GetDescription().GetCommand().GetEnv()
		if args[3] != "spark.authenticate.secret="+redact.Text || args[7] != "spark.executor.memory=1g" || env["MY_TOKEN"] != redact.Text || env["PLAIN"] != "shown" {
			t.Errorf("app %s shows command %q %v; want the secrets' values hidden, the rest kept", a.GetId(), args, env)
		}
	}
	resp, err := http.Get(c.url + "/json")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	assertNoSecret(t, "/json", string(body))

	// The state shown did not change what the master keeps: the worker is
	// sent the whole commands.
	wp := &launchPeer{workerPeer: workerPeer{newPeer(t)}, commands: make(chan *masterv1.Command, 10)}
	c.registerWorker(t, &peer{url: serveWorker(t, wp)}, 7078, 4, 4096)
	var got []*masterv1.Command
	for range 2 {
		select {
		case cmd := <-wp.commands:
			got = append(got, cmd)
		case <-time.After(30 * time.Second):
			t.Fatalf("the worker was sent %d launches, want an executor's and a driver's", len(got))
		}
	}
	for _, want := range []*masterv1.Command{secretAppCommand(), secretDriverCommand()} {
		if !slices.ContainsFunc(got, func(c *masterv1.Command) bool { return proto.Equal(c, want) }) {
			t.Errorf("worker was sent %v; want %v among them, unredacted", got, want)
		}
	}
}

func assertNoSecret(t *testing.T, where, shown string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(shown, s) {
			t.Errorf("%s shows secret %q:\n%s", where, s, shown)
		}
	}
}

// tokenWorker is a worker that passes on the whole launch requests the
// master sends it.
type tokenWorker struct {
	workerPeer
	launches chan string
}

func (w *tokenWorker) LaunchExecutor(_ context.Context, r *connect.Request[workerv1.LaunchExecutorRequest]) (*connect.Response[workerv1.LaunchExecutorResponse], error) {
	w.launches <- protojson.Format(r.Msg)
	return connect.NewResponse(&workerv1.LaunchExecutorResponse{}), nil
}

// An application's two tokens are never shown — GetClusterState, /json, the
// web pages, the log, active or completed — and the master's is never sent
// to a worker (so no executor sees it): the master calls the driver with
// it, as the driver's listener, which takes no other, shows.
func TestTheApplicationsTokensAreNeverShownAndTheMastersGoesToTheDriverOnly(t *testing.T) {
	var log bytes.Buffer
	var logMu sync.Mutex
	c := newCluster(t, Config{Instruments: telemetry.Instruments{Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &log}, &slog.HandlerOptions{Level: slog.LevelDebug}))}})
	appToken, masterToken := rpc.NewToken(), rpc.NewToken()
	dp := newPeer(t)
	tokens := rpc.NewTokens()
	tokens.Add(rpc.Master, masterToken)
	tokens.Add(rpc.App, appToken)
	driverURL := rpctest.Serve(t, rpc.NewHandler(rpc.Endpoints{
		Service: func(o ...connect.HandlerOption) (string, http.Handler) {
			return driverv1connect.NewDriverServiceHandler(&driverPeer{dp}, o...)
		},
		Metrics: prom.Handler(prom.NewRegistry()), Tokens: tokens,
		Access: rpc.Access{"/" + driverv1connect.DriverServiceName + "/": rpc.Master},
	}))
	resp, err := c.client.RegisterApplication(context.Background(), connect.NewRequest(&masterv1.RegisterApplicationRequest{
		AppToken: appToken, MasterToken: masterToken, Description: appDesc(512, 1), DriverUrl: driverURL}))
	if err != nil {
		t.Fatal(err)
	}
	app := resp.Msg.GetAppId()
	wp := &tokenWorker{workerPeer: workerPeer{newPeer(t)}, launches: make(chan string, 10)}
	c.registerWorker(t, &peer{url: serveWorker(t, wp)}, 7078, 1, 4096)
	var launch string
	select {
	case launch = <-wp.launches:
	case <-time.After(30 * time.Second):
		t.Fatal("no executor launched")
	}
	if !strings.Contains(launch, appToken) || strings.Contains(launch, masterToken) {
		t.Errorf("the worker was sent %s; want the application's token in it and not the master's", launch)
	}
	dp.expect(t, "ExecutorAdded "+app+"/0")
	c.srv.mu.Lock()
	client := c.srv.apps[app].client
	c.srv.mu.Unlock()
	if !c.srv.probe(context.Background(), client, app) {
		t.Error("the driver did not answer the master's Ping")
	}
	shown := func(when string) {
		t.Helper()
		st, err := c.client.GetClusterState(context.Background(), connect.NewRequest(&masterv1.GetClusterStateRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		pages := map[string]string{"GetClusterState": protojson.Format(st.Msg)}
		for _, path := range []string{"/json", "/", "/app/" + app} {
			resp, err := http.Get(c.url + path)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
			}
			pages[path] = string(body)
		}
		logMu.Lock()
		pages["the log"] = log.String()
		logMu.Unlock()
		for where, text := range pages {
			for name, token := range map[string]string{"application": appToken, "master": masterToken} {
				if strings.Contains(text, token) {
					t.Errorf("%s: %s shows the %s token", when, where, name)
				}
			}
		}
	}
	shown("running")
	if _, err := c.client.KillApplication(context.Background(), connect.NewRequest(&masterv1.KillApplicationRequest{AppId: app})); err != nil {
		t.Fatal(err)
	}
	dp.expect(t, "ApplicationRemoved "+app)
	shown("killed")
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
