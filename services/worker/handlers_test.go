package worker

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	workerv1 "github.com/glint-cluster/glint/pkg/api/glint/worker/v1"
	"github.com/glint-cluster/glint/services/master"
)

const (
	testAppID    = "app-20250101000000-0000"
	testDriverID = "driver-20250101000000-0000"
)

func TestLaunchExecutorRefusesBadCommands(t *testing.T) {
	c := startCluster(t, clusterConfig{worker: Config{Cores: 2, MemoryMiB: 1024}})
	tests := []struct {
		name   string
		mutate func(*workerv1.LaunchExecutorRequest)
		want   connect.Code
	}{
		{"app id with a slash", func(r *workerv1.LaunchExecutorRequest) { r.AppId = testAppID + "/x" }, connect.CodeInvalidArgument},
		{"app id climbing out", func(r *workerv1.LaunchExecutorRequest) { r.AppId = "../" + testAppID }, connect.CodeInvalidArgument},
		{"app id with dot dot", func(r *workerv1.LaunchExecutorRequest) { r.AppId = testAppID + "/../.." }, connect.CodeInvalidArgument},
		{"empty app id", func(r *workerv1.LaunchExecutorRequest) { r.AppId = "" }, connect.CodeInvalidArgument},
		{"negative executor id", func(r *workerv1.LaunchExecutorRequest) { r.ExecutorId = -1 }, connect.CodeInvalidArgument},
		{"no cores", func(r *workerv1.LaunchExecutorRequest) { r.Cores = 0 }, connect.CodeInvalidArgument},
		{"no memory", func(r *workerv1.LaunchExecutorRequest) { r.MemoryMib = 0 }, connect.CodeInvalidArgument},
		{"no command", func(r *workerv1.LaunchExecutorRequest) { r.Description.Command = nil }, connect.CodeInvalidArgument},
		{"empty argv[0]", func(r *workerv1.LaunchExecutorRequest) { r.Description.Command.Args[0] = "" }, connect.CodeInvalidArgument},
		{"environment key with '='", func(r *workerv1.LaunchExecutorRequest) { r.Description.Command.Env["A=B"] = "x" }, connect.CodeInvalidArgument},
		{"another master", func(r *workerv1.LaunchExecutorRequest) { r.MasterUrl = "http://127.0.0.1:1" }, connect.CodeFailedPrecondition},
		{"no master", func(r *workerv1.LaunchExecutorRequest) { r.MasterUrl = "" }, connect.CodeFailedPrecondition},
		{"more cores than free", func(r *workerv1.LaunchExecutorRequest) { r.Cores = 3 }, connect.CodeResourceExhausted},
		{"more memory than free", func(r *workerv1.LaunchExecutorRequest) { r.MemoryMib = 1025 }, connect.CodeResourceExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &workerv1.LaunchExecutorRequest{
				MasterUrl: c.masterURL, AppId: testAppID, ExecutorId: 0, Cores: 1, MemoryMib: 64,
				Description: &masterv1.ApplicationDescription{Name: "t", Command: executorCommand(t, "exit", 0)},
			}
			tt.mutate(req)
			_, err := c.worker.client.LaunchExecutor(context.Background(), connect.NewRequest(req))
			if got := connect.CodeOf(err); got != tt.want {
				t.Errorf("LaunchExecutor: code %v (%v), want %v", got, err, tt.want)
			}
		})
	}
	assertEmptyDir(t, c.worker.cfg.WorkDir)
	if st := c.worker.fetchJSON(t); st.CoresUsed != 0 || st.MemoryUsed != 0 {
		t.Errorf("refused launches hold %d cores and %d MiB", st.CoresUsed, st.MemoryUsed)
	}
}

func TestLaunchDriverRefusesBadCommands(t *testing.T) {
	c := startCluster(t, clusterConfig{worker: Config{Cores: 2, MemoryMiB: 1024}})
	tests := []struct {
		name   string
		mutate func(*workerv1.LaunchDriverRequest)
		want   connect.Code
	}{
		{"driver id with a slash", func(r *workerv1.LaunchDriverRequest) { r.DriverId = testDriverID + "/x" }, connect.CodeInvalidArgument},
		{"driver id climbing out", func(r *workerv1.LaunchDriverRequest) { r.DriverId = "../../" + testDriverID }, connect.CodeInvalidArgument},
		{"driver id dot dot", func(r *workerv1.LaunchDriverRequest) { r.DriverId = ".." }, connect.CodeInvalidArgument},
		{"no cores", func(r *workerv1.LaunchDriverRequest) { r.Description.Cores = 0 }, connect.CodeInvalidArgument},
		{"no command", func(r *workerv1.LaunchDriverRequest) { r.Description.Command = nil }, connect.CodeInvalidArgument},
		{"another master", func(r *workerv1.LaunchDriverRequest) { r.MasterUrl = "http://127.0.0.1:1" }, connect.CodeFailedPrecondition},
		{"more cores than free", func(r *workerv1.LaunchDriverRequest) { r.Description.Cores = 3 }, connect.CodeResourceExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &workerv1.LaunchDriverRequest{
				MasterUrl: c.masterURL, DriverId: testDriverID,
				Description: &masterv1.DriverDescription{Name: "t", Cores: 1, MemoryMib: 64, Command: driverCommand(t, "exit")},
			}
			tt.mutate(req)
			_, err := c.worker.client.LaunchDriver(context.Background(), connect.NewRequest(req))
			if got := connect.CodeOf(err); got != tt.want {
				t.Errorf("LaunchDriver: code %v (%v), want %v", got, err, tt.want)
			}
		})
	}
	assertEmptyDir(t, c.worker.cfg.WorkDir)
}

func TestCommandsAboutRunningProcesses(t *testing.T) {
	c := startCluster(t, clusterConfig{})
	ctx := context.Background()
	launch := &workerv1.LaunchExecutorRequest{
		MasterUrl: c.masterURL, AppId: testAppID, ExecutorId: 0, Cores: 1, MemoryMib: 64,
		Description: &masterv1.ApplicationDescription{Name: "t", Command: executorCommand(t, "hold", 0)},
	}
	if _, err := c.worker.client.LaunchExecutor(ctx, connect.NewRequest(launch)); err != nil {
		t.Fatalf("LaunchExecutor: %v", err)
	}
	tooltest.Eventually(t, "executor RUNNING on the worker", func() bool {
		e, _ := c.worker.executor(t, testAppID, 0)
		return e.State == "RUNNING"
	})

	tests := []struct {
		name string
		call func() error
		want connect.Code
	}{
		{"launching it again", func() error {
			_, err := c.worker.client.LaunchExecutor(ctx, connect.NewRequest(launch))
			return err
		}, connect.CodeAlreadyExists},
		{"killing an executor not running here", func() error {
			_, err := c.worker.client.KillExecutor(ctx, connect.NewRequest(&workerv1.KillExecutorRequest{
				MasterUrl: c.masterURL, AppId: testAppID, ExecutorId: 7,
			}))
			return err
		}, connect.CodeNotFound},
		{"killing it from another master", func() error {
			_, err := c.worker.client.KillExecutor(ctx, connect.NewRequest(&workerv1.KillExecutorRequest{
				MasterUrl: "http://127.0.0.1:1", AppId: testAppID, ExecutorId: 0,
			}))
			return err
		}, connect.CodeFailedPrecondition},
		{"killing an executor with a bad app id", func() error {
			_, err := c.worker.client.KillExecutor(ctx, connect.NewRequest(&workerv1.KillExecutorRequest{
				MasterUrl: c.masterURL, AppId: "../x", ExecutorId: 0,
			}))
			return err
		}, connect.CodeInvalidArgument},
		{"killing a driver not running here", func() error {
			_, err := c.worker.client.KillDriver(ctx, connect.NewRequest(&workerv1.KillDriverRequest{
				MasterUrl: c.masterURL, DriverId: testDriverID,
			}))
			return err
		}, connect.CodeNotFound},
		{"finishing an application with a bad id", func() error {
			_, err := c.worker.client.ApplicationFinished(ctx, connect.NewRequest(&workerv1.ApplicationFinishedRequest{
				MasterUrl: c.masterURL, AppId: "app-1/..",
			}))
			return err
		}, connect.CodeInvalidArgument},
		{"a master change to a bad URL", func() error {
			_, err := c.worker.client.MasterChanged(ctx, connect.NewRequest(&workerv1.MasterChangedRequest{MasterUrl: "ftp://x"}))
			return err
		}, connect.CodeInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := connect.CodeOf(tt.call()); got != tt.want {
				t.Errorf("code %v, want %v", got, tt.want)
			}
		})
	}

	// ApplicationFinished kills what is left of the application.
	if _, err := c.worker.client.ApplicationFinished(ctx, connect.NewRequest(&workerv1.ApplicationFinishedRequest{
		MasterUrl: c.masterURL, AppId: testAppID,
	})); err != nil {
		t.Fatalf("ApplicationFinished: %v", err)
	}
	e := c.worker.waitFinishedExecutor(t, testAppID, 0)
	if e.State != "KILLED" || !strings.HasPrefix(e.Message, "application finished; killed by signal 15") {
		t.Errorf("executor after ApplicationFinished = %+v, want KILLED by SIGTERM", e)
	}
	assertGone(t, e.PID)
	if st := c.worker.fetchJSON(t); st.CoresUsed != 0 || st.MemoryUsed != 0 || st.CoresFree != 4 {
		t.Errorf("after the executor ended: %d cores and %d MiB used, %d cores free", st.CoresUsed, st.MemoryUsed, st.CoresFree)
	}
}

func TestJSONHasSparkWorkerShape(t *testing.T) {
	c := startCluster(t, clusterConfig{worker: Config{Cores: 3, MemoryMiB: 2048}})
	appID := c.registerApp(t, executorCommand(t, "hold", 0), 1)
	c.waitMasterExecutor(t, appID, 0, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)

	resp, err := http.Get(c.worker.url + "/json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"id", "masterurl", "cores", "coresused", "coresfree", "memory", "memoryused", "memoryfree",
		"executors", "finishedexecutors", "drivers", "finisheddrivers"} {
		if _, ok := doc[key]; !ok {
			t.Errorf("/json has no %q", key)
		}
	}
	want := map[string]any{"id": c.worker.ID(), "masterurl": c.masterURL, "cores": 3.0, "coresused": 1.0, "coresfree": 2.0,
		"memory": 2048.0, "memoryused": 64.0, "memoryfree": 1984.0}
	for k, v := range want {
		if doc[k] != v {
			t.Errorf("/json %s = %v, want %v", k, doc[k], v)
		}
	}
	execs, _ := doc["executors"].([]any)
	if len(execs) != 1 {
		t.Fatalf("/json executors = %v, want one", doc["executors"])
	}
	e := execs[0].(map[string]any)
	var keys []string
	for k := range e {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"appid", "cores", "cpuseconds", "id", "memory", "memorybytes", "memorypeakbytes", "pid", "state"}) || e["appid"] != appID || e["state"] != "RUNNING" {
		t.Errorf("/json executor = %v", e)
	}
}

func TestMasterChangedMovesTheWorkerToTheNewMaster(t *testing.T) {
	other := startMaster(t, master.Config{}, false)
	c := startCluster(t, clusterConfig{otherMasters: []string{other}})
	ctx := context.Background()
	if _, err := c.worker.client.MasterChanged(ctx, connect.NewRequest(&workerv1.MasterChangedRequest{MasterUrl: other})); err != nil {
		t.Fatalf("MasterChanged: %v", err)
	}
	oc := &cluster{masterURL: other, master: newMasterClient(t, other)}
	tooltest.Eventually(t, "the worker registered with the new master", func() bool {
		w := oc.masterWorker(t, c.worker.ID())
		return w != nil && w.GetState() == masterv1.WorkerState_WORKER_STATE_ALIVE
	})
	if got := c.worker.fetchJSON(t).MasterURL; got != other {
		t.Errorf("active master %q, want %q", got, other)
	}
	launch := func(masterURL string, id int32) error {
		_, err := c.worker.client.LaunchExecutor(ctx, connect.NewRequest(&workerv1.LaunchExecutorRequest{
			MasterUrl: masterURL, AppId: testAppID, ExecutorId: id, Cores: 1, MemoryMib: 64,
			Description: &masterv1.ApplicationDescription{Name: "t", Command: executorCommand(t, "exit", 0)},
		}))
		return err
	}
	if err := launch(c.masterURL, 0); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("launch from the old master: %v, want FailedPrecondition", err)
	}
	if err := launch(other, 1); err != nil {
		t.Errorf("launch from the new master: %v", err)
	}
	c.worker.waitFinishedExecutor(t, testAppID, 1)
}

// assertEmptyDir checks that nothing was created in dir, a worker's work dir
// (but for its spare, made ahead of any launch).
func assertEmptyDir(t *testing.T, dir string) {
	t.Helper()
	if names := madeByLaunches(t, dir); len(names) != 0 {
		t.Errorf("refused commands created %v", names)
	}
}

// madeByLaunches lists what is in dir, a worker's work dir, but for its spare.
func madeByLaunches(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), spareDirPrefix) {
			names = append(names, filepath.Join(dir, e.Name()))
		}
	}
	return names
}
