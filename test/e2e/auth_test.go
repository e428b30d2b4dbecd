package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/proto"

	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	executorv1 "github.com/glint-cluster/glint/pkg/api/glint/executor/v1"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	workerv1 "github.com/glint-cluster/glint/pkg/api/glint/worker/v1"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// appUnderTest is a running application as an attacker finds it: its
// driver's and executor's URLs from the master's /json and /sd, and its
// token in its executor's memory. Creating release ends it; submitted
// waits for its submission to end.
type appUnderTest struct {
	id, driver, executor, token, release string
	submitted                            func() (string, error)
}

// runningApp submits `hold` with one one-core executor as the holder of
// submitTokenFile and waits until its task runs.
func runningApp(t *testing.T, c *testCluster, submitTokenFile string, seen map[string]bool) appUnderTest {
	t.Helper()
	a := appUnderTest{release: filepath.Join(t.TempDir(), "release")}
	a.submitted = runInBackground(t, []string{"GLINT_TOKEN_FILE=" + submitTokenFile}, "submit", "--master", c.master.url,
		"--executor-cores", "1", "--total-executor-cores", "1", "--executor-memory", "256m", "--log-level", "warn",
		"hold", a.release)
	s := c.waitFor(t, "a new application with a running executor", func(s masterJSON) bool {
		for _, app := range s.ActiveApps {
			if !seen[app.ID] && len(app.Executors) == 1 && app.Executors[0].State == "RUNNING" {
				a.id = app.ID
				return true
			}
		}
		return false
	})
	seen[a.id] = true
	for _, app := range s.ActiveApps {
		if app.ID == a.id {
			a.driver = app.DriverURL
		}
	}
	for _, g := range byRole(discover(t, c.master.url), "executor") {
		if g.Labels["app"] == a.id {
			a.executor = "http://" + g.Targets[0]
			waitForSample(t, a.executor, "glint_executor_tasks_running", 1)
		}
	}
	var w struct {
		Executors []struct {
			AppID string `json:"appid"`
			PID   int    `json:"pid"`
		} `json:"executors"`
	}
	resp := getPage(t, nil, c.workers[0].url+"/json")
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&w); err != nil {
		t.Fatal(err)
	}
	for _, e := range w.Executors {
		if e.AppID == a.id {
			a.token = heldToken(t, e.PID, acceptedBy(t, a.driver+"/glint.driver.v1.DriverService/RetrieveSparkProps", &driverv1.RetrieveSparkPropsRequest{AppId: a.id}))
		}
	}
	if a.driver == "" || a.executor == "" || a.token == "" {
		t.Fatalf("application %+v: not all of driver, executor and token found", a)
	}
	return a
}

// TestHostileCallsAreRefusedByRole sends a running master, worker, driver
// and executor calls without a token, with a wrong one, and with a valid
// token of the wrong role: each is refused with its Connect code before its
// handler runs, so nothing in the cluster changes.
func TestHostileCallsAreRefusedByRole(t *testing.T) {
	t.Parallel()
	submitToken := rpc.NewToken()
	submitFile := filepath.Join(t.TempDir(), "submit.token")
	if err := os.WriteFile(submitFile, []byte(submitToken), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, 1, "--submit-token-file", submitFile)
	seen := map[string]bool{}
	a, b := runningApp(t, c, submitFile, seen), runningApp(t, c, submitFile, seen)
	master, worker := c.master.url, c.workers[0].url
	wrong := rpc.NewToken()
	call := func(url, service, procedure string) string {
		return url + "/glint." + service + ".v1." + strings.ToUpper(service[:1]) + service[1:] + "Service/" + procedure
	}
	m := func(p string) string { return call(master, "master", p) }
	w := func(p string) string { return call(worker, "worker", p) }
	d := func(p string) string { return call(a.driver, "driver", p) }
	e := func(p string) string { return call(a.executor, "executor", p) }
	registerWorker := &masterv1.RegisterWorkerRequest{WorkerId: "worker-20261130120000-127.0.0.1-9", Host: "127.0.0.1", Port: 9, Cores: 64, MemoryMib: 1 << 20, WorkerUrl: "http://127.0.0.1:9"}
	registerApp := &masterv1.RegisterApplicationRequest{AppToken: rpc.NewToken(), MasterToken: rpc.NewToken(), DriverUrl: "http://127.0.0.1:9", Description: &masterv1.ApplicationDescription{
		Name: "evil", MemoryPerExecutorMib: 256, Command: &masterv1.Command{Args: []string{"/bin/sh", "-c", "touch /tmp/pwned"}}}}
	launch := &workerv1.LaunchExecutorRequest{MasterUrl: master, AppId: a.id, ExecutorId: 7, Cores: 1, MemoryMib: 64,
		Description: &masterv1.ApplicationDescription{Name: "evil", Command: &masterv1.Command{Args: []string{"/bin/sh", "-c", "touch /tmp/pwned"}}}}
	launchDriver := &workerv1.LaunchDriverRequest{MasterUrl: master, DriverId: "driver-20261130120000-0099",
		Description: &masterv1.DriverDescription{Name: "evil", Cores: 1, MemoryMib: 64, Command: &masterv1.Command{Args: []string{"/bin/sh", "-c", "touch /tmp/pwned"}}}}
	forged := &driverv1.RegisterExecutorRequest{AppId: a.id, ExecutorId: 9, Hostname: "127.0.0.1", Cores: 8, ExecutorUrl: "http://127.0.0.1:9"}
	update := &driverv1.StatusUpdateRequest{ExecutorId: 0, Updates: []*driverv1.TaskStatus{{TaskId: 0, State: driverv1.TaskState_TASK_STATE_FINISHED, Result: []byte("forged")}}}
	// Where an executor would send its driver's calls, and with them the
	// submit token: a real listener, which must see no connection.
	evil := listenAsAttacker(t)
	takeOver := &driverv1.MasterChangedRequest{AppId: a.id, MasterUrl: evil.url}
	const unauth, denied, invalid = "unauthenticated", "permission_denied", "invalid_argument"
	for _, tc := range []struct {
		name, url, token string
		body             proto.Message
		want             string
	}{
		// The master: workers' calls need the cluster token, clients' a submit token.
		{"register a worker without a token", m("RegisterWorker"), "", registerWorker, unauth},
		{"register a worker with a wrong token", m("RegisterWorker"), wrong, registerWorker, unauth},
		{"register a worker with a submit token", m("RegisterWorker"), submitToken, registerWorker, denied},
		{"heartbeat with a submit token", m("Heartbeat"), submitToken, &masterv1.HeartbeatRequest{WorkerId: registerWorker.WorkerId}, denied},
		{"report an executor's end without a token", m("ExecutorStateChanged"), "", &masterv1.ExecutorStateChangedRequest{AppId: a.id, ExecutorId: 0, State: masterv1.ExecutorState_EXECUTOR_STATE_FAILED}, unauth},
		{"report a driver's end with a submit token", m("DriverStateChanged"), submitToken, &masterv1.DriverStateChangedRequest{DriverId: "driver-20261130120000-0000", State: masterv1.DriverState_DRIVER_STATE_FAILED}, denied},
		{"decommission a worker with a submit token", m("WorkerDecommissioning"), submitToken, &masterv1.WorkerDecommissioningRequest{WorkerId: registerWorker.WorkerId}, denied},
		{"decommission a worker on request with a submit token", m("DecommissionWorker"), submitToken, &masterv1.DecommissionWorkerRequest{WorkerId: observeWorkerID(t, c)}, denied},
		{"decommission a worker on request without a token", m("DecommissionWorker"), "", &masterv1.DecommissionWorkerRequest{WorkerId: observeWorkerID(t, c)}, unauth},
		{"register an application without a token", m("RegisterApplication"), "", registerApp, unauth},
		{"register an application with a wrong token", m("RegisterApplication"), wrong, registerApp, unauth},
		{"register an application with an application's token", m("RegisterApplication"), a.token, registerApp, unauth},
		{"kill an application without a token", m("KillApplication"), "", &masterv1.KillApplicationRequest{AppId: a.id}, unauth},
		{"kill an application with another's token", m("KillApplication"), b.token, &masterv1.KillApplicationRequest{AppId: a.id}, unauth},
		{"submit a driver without a token", m("SubmitDriver"), "", &masterv1.SubmitDriverRequest{Description: launchDriver.Description}, unauth},
		{"kill a driver with a wrong token", m("KillDriver"), wrong, &masterv1.KillDriverRequest{DriverId: "driver-20261130120000-0000"}, unauth},
		{"read the cluster's state without a token", m("GetClusterState"), "", &masterv1.GetClusterStateRequest{}, unauth},
		{"ask for executors without a token", m("RequestExecutors"), "", &masterv1.RequestExecutorsRequest{AppId: a.id, RequestedTotal: 100}, unauth},
		// The worker: only the master's cluster token (it knows no other).
		{"launch an executor without a token", w("LaunchExecutor"), "", launch, unauth},
		{"launch an executor with a submit token", w("LaunchExecutor"), submitToken, launch, unauth},
		{"launch an executor with an application's token", w("LaunchExecutor"), a.token, launch, unauth},
		{"launch a driver with a submit token", w("LaunchDriver"), submitToken, launchDriver, unauth},
		{"kill an executor without a token", w("KillExecutor"), "", &workerv1.KillExecutorRequest{MasterUrl: master, AppId: a.id, ExecutorId: 0}, unauth},
		{"take the worker over (MasterChanged) without a token", w("MasterChanged"), "", &workerv1.MasterChangedRequest{MasterUrl: "http://127.0.0.1:9"}, unauth},
		{"take the worker over with a submit token", w("MasterChanged"), submitToken, &workerv1.MasterChangedRequest{MasterUrl: "http://127.0.0.1:9"}, unauth},
		{"move the worker to a master it was not given, with the cluster token", w("MasterChanged"), testToken, &workerv1.MasterChangedRequest{MasterUrl: evil.url}, invalid},
		{"decommission the worker with a submit token", w("DecommissionWorker"), submitToken, &workerv1.DecommissionWorkerRequest{MasterUrl: master}, unauth},
		{"finish an application on the worker with a wrong token", w("ApplicationFinished"), wrong, &workerv1.ApplicationFinishedRequest{MasterUrl: master, AppId: a.id}, unauth},
		// The driver: only its own application's token.
		{"retrieve an app's properties without a token", d("RetrieveSparkProps"), "", &driverv1.RetrieveSparkPropsRequest{AppId: a.id}, unauth},
		{"retrieve an app's properties with another app's token", d("RetrieveSparkProps"), b.token, &driverv1.RetrieveSparkPropsRequest{AppId: a.id}, unauth},
		{"register a forged executor without a token", d("RegisterExecutor"), "", forged, unauth},
		{"register a forged executor with the cluster token", d("RegisterExecutor"), testToken, forged, unauth},
		{"register a forged executor with another app's token", d("RegisterExecutor"), b.token, forged, unauth},
		{"forge a task result with a submit token", d("StatusUpdate"), submitToken, update, unauth},
		{"remove the application as a fake master", d("ApplicationRemoved"), testToken, &driverv1.ApplicationRemovedRequest{AppId: a.id, Message: "KILLED"}, unauth},
		{"ping an app's driver with another app's token", d("Ping"), b.token, &driverv1.PingRequest{AppId: a.id}, unauth},
		// The driver: the master's calls only with the token it gave the
		// master, which no executor holds.
		{"take the driver over (MasterChanged) with its application's token", d("MasterChanged"), a.token, takeOver, denied},
		{"take the driver over with the cluster token", d("MasterChanged"), testToken, takeOver, unauth},
		{"tell the driver of an executor of a future epoch with its application's token", d("ExecutorAdded"), a.token,
			&driverv1.ExecutorAddedRequest{AppId: a.id, ExecutorId: 9, Cores: 64, Epoch: 9e18}, denied},
		{"tell the driver its executor was killed with its application's token", d("ExecutorUpdated"), a.token,
			&driverv1.ExecutorUpdatedRequest{AppId: a.id, ExecutorId: 0, State: masterv1.ExecutorState_EXECUTOR_STATE_KILLED}, denied},
		{"remove the application with its own token", d("ApplicationRemoved"), a.token, &driverv1.ApplicationRemovedRequest{AppId: a.id, Message: "KILLED"}, denied},
		{"ping the driver with its application's token", d("Ping"), a.token, &driverv1.PingRequest{AppId: a.id}, denied},
		// The executor: only its application's token.
		{"launch a task without a token", e("LaunchTask"), "", &executorv1.LaunchTaskRequest{Tasks: []*executorv1.TaskDescription{{TaskId: 99, Name: "hold.hold"}}}, unauth},
		{"stop an executor with the cluster token", e("StopExecutor"), testToken, &executorv1.StopExecutorRequest{}, unauth},
		{"kill a task with another app's token", e("KillTask"), b.token, &executorv1.KillTaskRequest{TaskId: 0}, unauth},
	} {
		before := observe(t, c)
		t.Run(tc.name, func(t *testing.T) {
			// The body is JSON: a call that passes authentication is
			// answered by its handler, not refused as unreadable.
			header := http.Header{"Authorization": {""}, "Content-Type": {"application/json"}}
			if tc.token != "" {
				header.Set("Authorization", "Bearer "+tc.token)
			}
			code, msg := hostileCall(t, tc.url, jsonBody(t, tc.body)(), header)
			if code != tc.want {
				t.Fatalf("code %q (%s), want %q", code, msg, tc.want)
			}
			if after := observe(t, c); !reflect.DeepEqual(after, before) {
				t.Errorf("the cluster changed:\n%v\nwas\n%v", after, before)
			}
		})
	}
	for _, page := range []struct {
		url  string
		want int
	}{{master + "/json", http.StatusUnauthorized}, {worker + "/json", http.StatusUnauthorized},
		{master + "/healthz", http.StatusOK}, {master + "/metrics", http.StatusOK}, {master + "/sd", http.StatusOK}} {
		resp, err := http.Get(page.url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != page.want {
			t.Errorf("GET %s without a token: %s, want %d", page.url, resp.Status, page.want)
		}
	}
	// The driver kept its master: released, the application ends there
	// FINISHED, and the URL an executor named saw no connection.
	if err := os.WriteFile(a.release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := a.submitted(); err != nil {
		t.Fatalf("the application after the hostile calls: %v\n%s", err, out)
	}
	c.waitFor(t, "the application FINISHED", func(s masterJSON) bool {
		return slices.ContainsFunc(s.CompletedApps, func(app appJSON) bool { return app.ID == a.id && app.State == "FINISHED" })
	})
	if n := evil.connections(); n != 0 {
		t.Errorf("the attacker's URL got %d connections, want none", n)
	}
	// A client with a wrong token is told so at once, not retried.
	wrongFile := filepath.Join(t.TempDir(), "wrong.token")
	if err := os.WriteFile(wrongFile, []byte(wrong), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, err := glintWithEnv(t, []string{"GLINT_TOKEN_FILE=" + wrongFile}, "submit", "--master", master, "pi")
	if exitCode(err) == 0 || !strings.Contains(stderr, "rejected: unauthenticated") {
		t.Errorf("submit with a wrong token: exit %d, stderr %q; want it rejected as unauthenticated", exitCode(err), stderr)
	}
	if hwm := peakRSS(t, c.master.cmd.Process.Pid); hwm > 200<<10 {
		t.Errorf("master's peak RSS %d KiB, want under 200 MiB", hwm)
	}
}

// attacker is a loopback listener that counts the connections made to it.
type attacker struct {
	url string
	n   atomic.Int32
}

func listenAsAttacker(t *testing.T) *attacker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	a := &attacker{url: "http://" + ln.Addr().String()}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			a.n.Add(1)
			conn.Close()
		}
	}()
	return a
}

func (a *attacker) connections() int { return int(a.n.Load()) }

// observeWorkerID is the id of c's first worker.
func observeWorkerID(t *testing.T, c *testCluster) string {
	t.Helper()
	return c.state(t).Workers[0].ID
}

// observe is what an attack could change: the master's workers, applications
// and executors with their states, and the worker's executors and drivers.
func observe(t *testing.T, c *testCluster) string {
	t.Helper()
	s := c.state(t)
	var out []string
	for _, w := range s.Workers {
		out = append(out, fmt.Sprintf("worker %s %s %d", w.ID, w.State, w.CoresUsed))
	}
	for _, a := range s.ActiveApps {
		out = append(out, fmt.Sprintf("app %s %s %v", a.ID, a.State, a.Executors))
	}
	out = append(out, fmt.Sprintf("completed %d", len(s.CompletedApps)))
	resp := getPage(t, nil, c.workers[0].url+"/json")
	defer resp.Body.Close()
	var w struct {
		Executors []struct {
			AppID string `json:"appid"`
			ID    int    `json:"id"`
			State string `json:"state"`
		} `json:"executors"`
		Drivers []struct {
			ID string `json:"id"`
		} `json:"drivers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&w); err != nil {
		t.Fatal(err)
	}
	out = append(out, fmt.Sprintf("worker runs %v %v", w.Executors, w.Drivers))
	return strings.Join(out, "\n")
}

// Without a token, a master or worker refuses to start anywhere but on a
// loopback address with its masters on one: the machine's token is for its
// loopback cluster alone. There is no tokenless mode.
func TestAMasterOrWorkerOffLoopbackNeedsAToken(t *testing.T) {
	t.Parallel()
	noToken, _ := machineEnv(t)
	for _, args := range [][]string{
		{"master", "--listen", "0.0.0.0:0"},
		{"worker", "--master", "http://127.0.0.1:1", "--listen", "0.0.0.0:0", "--host", "127.0.0.1", "--work-dir", t.TempDir()},
		{"worker", "--master", "http://192.0.2.1:7077", "--listen", "127.0.0.1:0", "--work-dir", t.TempDir()},
	} {
		_, stderr, err := glintWithEnv(t, noToken, args...)
		if exitCode(err) == 0 || !strings.Contains(stderr, "needs a cluster token") || !strings.Contains(stderr, "glint token > cluster.token") {
			t.Errorf("glint %v without a token: exit %d, stderr %q; want a refusal saying how to make a token", args, exitCode(err), stderr)
		}
	}
	_, stderr, err := glintWithEnv(t, noToken, "master", "--listen", "0.0.0.0:0", "--insecure")
	if exitCode(err) == 0 || !strings.Contains(stderr, "unknown flag: --insecure") {
		t.Errorf("glint master --insecure: exit %d, stderr %q; want no such flag", exitCode(err), stderr)
	}
	_, stderr, err = glintWithEnv(t, noToken, "master", "--listen", "127.0.0.1:0", "--token-file", filepath.Join(t.TempDir(), "missing"))
	if exitCode(err) == 0 || !strings.Contains(stderr, "--token-file") {
		t.Errorf("a missing token file: exit %d, stderr %q", exitCode(err), stderr)
	}
}
