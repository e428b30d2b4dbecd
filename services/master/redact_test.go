package master

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	workerv1 "github.com/glint-cluster/glint/pkg/api/glint/worker/v1"
	"github.com/glint-cluster/glint/pkg/redact"
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
