package worker

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	workerv1 "github.com/glint-cluster/glint/pkg/api/glint/worker/v1"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// assertNotShown checks that secret is neither in the environment nor on
// the command line of running process pid, as any process of its user reads
// them.
func assertNotShown(t *testing.T, pid int, secret string) {
	t.Helper()
	for _, f := range []string{"environ", "cmdline"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("/proc/%d/%s holds the process's token", pid, f)
		}
	}
}

func TestAnExecutorAndADriverReadTheirTokensFromTheirSecretsNotFromTheirEnvironmentOrCommandLine(t *testing.T) {
	c := startCluster(t, clusterConfig{})
	ctx := context.Background()

	appToken := rpc.NewToken()
	app, err := c.master.RegisterApplication(ctx, connect.NewRequest(&masterv1.RegisterApplicationRequest{AppToken: appToken, MasterToken: rpc.NewToken(),
		Description: &masterv1.ApplicationDescription{
			Name: "worker-test", MemoryPerExecutorMib: 64, CoresPerExecutor: proto.Int32(1), MaxCores: proto.Int32(1),
			Command: executorCommand(t, "hold", 0),
		},
		DriverUrl: c.driverURL,
	}))
	if err != nil {
		t.Fatal(err)
	}
	appID := app.Msg.GetAppId()
	c.waitMasterExecutor(t, appID, 0, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)
	dir := filepath.Join(c.worker.cfg.WorkDir, appID, "0")
	waitFileContains(t, filepath.Join(dir, "stdout"), fmt.Sprintf("secrets: app token %q, submit token \"\"\n", appToken))
	e, _ := c.worker.executor(t, appID, 0)
	assertNotShown(t, e.PID, appToken)
	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o600); err != nil {
		t.Fatal(err)
	}

	// The worker's master sends it a cluster-mode driver with the submit
	// token it made for it.
	submitToken, id := rpc.NewToken(), "driver-20261130120000-0000"
	if _, err := c.worker.client.LaunchDriver(ctx, connect.NewRequest(&workerv1.LaunchDriverRequest{
		MasterUrl: c.masterURL, DriverId: id, SubmitToken: submitToken,
		Description: &masterv1.DriverDescription{Name: "worker-test-driver", Cores: 1, MemoryMib: 64, Command: driverCommand(t, "hold")},
	})); err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(c.worker.cfg.WorkDir, id)
	waitFileContains(t, filepath.Join(dir, "stdout"), fmt.Sprintf("secrets: app token \"\", submit token %q\n", submitToken))
	var pid int
	for _, d := range c.worker.fetchJSON(t).Drivers {
		if d.ID == id {
			pid = d.PID
		}
	}
	if pid == 0 {
		t.Fatalf("the worker shows no running driver %s", id)
	}
	assertNotShown(t, pid, submitToken)
	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
}
