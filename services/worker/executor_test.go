package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	workerv1 "github.com/glint-cluster/glint/pkg/api/glint/worker/v1"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/services/master"
)

func TestExecutorRunsAndItsEndReachesTheMaster(t *testing.T) {
	// The worker's own token file, which its executors must not be handed.
	t.Setenv("GLINT_TOKEN_FILE", filepath.Join(t.TempDir(), "cluster.token"))
	release := func(t *testing.T, dir string, _ int) {
		if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	killFromOutside := func(t *testing.T, _ string, pid int) {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name        string
		exitCode    int
		end         func(t *testing.T, dir string, pid int)
		wantState   masterv1.ExecutorState
		wantStatus  int32
		wantMessage string
	}{
		{"exit 0 ends EXITED", 0, release, masterv1.ExecutorState_EXECUTOR_STATE_EXITED, 0, "exited with code 0"},
		{"exit 3 ends FAILED with status 3", 3, release, masterv1.ExecutorState_EXECUTOR_STATE_FAILED, 3, "exited with code 3"},
		{"signal from outside ends FAILED", 0, killFromOutside, masterv1.ExecutorState_EXECUTOR_STATE_FAILED, 137, "killed by signal 9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := startCluster(t, clusterConfig{})
			appID := c.registerApp(t, executorCommand(t, "hold", tt.exitCode), 1)
			c.waitMasterExecutor(t, appID, 0, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)

			dir := filepath.Join(c.worker.cfg.WorkDir, appID, "0")
			header := fmt.Sprintf("Launch command: %q \"--executor-id\" \"0\" \"--app-id\" %q", testBinary(t), appID)
			rule := "\n" + strings.Repeat("=", 40) + "\n\n"
			for _, name := range []string{"stdout", "stderr"} {
				data, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil {
					t.Fatalf("read %s: %v", name, err)
				}
				if !strings.HasPrefix(string(data), header) || !strings.Contains(string(data), rule) {
					t.Errorf("%s does not start with the launch header:\n%s", name, data)
				}
			}
			args := fmt.Sprintf("%q", []string{"--executor-id", "0", "--app-id", appID, "--cores", "1",
				"--hostname", "127.0.0.1", "--worker-url", c.worker.url})
			waitFileContains(t, filepath.Join(dir, "stdout"), args,
				"env GLINT_WORK_DIR="+dir+"\n", "env GLINT_APP_ID="+appID+"\n", "env GLINT_EXECUTOR_ID=0\n",
				"env GLINT_WORKER_URL="+c.worker.url+"\n", fmt.Sprintf("env GLINT_WORKER_PID=%d\n", os.Getpid()),
				"env GLINT_TOKEN_FILE=\n", "env GOMAXPROCS=1\n")
			waitFileContains(t, filepath.Join(dir, "stderr"), "child hold stderr")

			running, _ := c.worker.executor(t, appID, 0)
			tt.end(t, dir, running.PID)

			var e *masterv1.ExecutorInfo
			tooltest.Eventually(t, "executor 0 to end at the master", func() bool {
				e = c.masterExecutor(t, appID, 0)
				return e.GetState() != masterv1.ExecutorState_EXECUTOR_STATE_RUNNING
			})
			if e.GetState() != tt.wantState || e.ExitStatus == nil || e.GetExitStatus() != tt.wantStatus ||
				!strings.Contains(e.GetMessage(), tt.wantMessage) {
				t.Errorf("master shows executor 0 %s status %v %q; want %s status %d %q",
					e.GetState(), e.ExitStatus, e.GetMessage(), tt.wantState, tt.wantStatus, tt.wantMessage)
			}
			fin := c.worker.waitFinishedExecutor(t, appID, 0)
			if fin.State != lifecycle.Name(tt.wantState) || fin.ExitStatus == nil || *fin.ExitStatus != tt.wantStatus {
				t.Errorf("worker shows executor 0 %+v, want %s with status %d", fin, lifecycle.Name(tt.wantState), tt.wantStatus)
			}
			assertGone(t, running.PID)
		})
	}
}

func TestExecutorWithMissingBinaryFailsAndWorkerKeepsServing(t *testing.T) {
	// Two failed launches, a second apart (the master's relaunch backoff), fail the app.
	c := startCluster(t, clusterConfig{worker: Config{Cores: 1}, master: master.Config{MaxExecutorRetries: 2}})
	missing := "/nonexistent/glint-worker-test-binary"
	appID := c.registerApp(t, &masterv1.Command{Args: []string{missing}}, 1)
	e := c.waitMasterExecutor(t, appID, 0, masterv1.ExecutorState_EXECUTOR_STATE_FAILED)
	want := fmt.Sprintf(`process.start: exec: %q: stat %s: no such file or directory`, missing, missing)
	if e.GetMessage() != want || e.ExitStatus != nil {
		t.Errorf("executor 0: message %q exit status %v; want %q and none", e.GetMessage(), e.ExitStatus, want)
	}

	// The master retries until the application fails; the worker carries on.
	tooltest.Eventually(t, "the application to fail", func() bool {
		return c.masterApp(t, appID).GetState() == masterv1.ApplicationState_APPLICATION_STATE_FAILED
	})
	resp, err := http.Get(c.worker.url + "/healthz")
	if err != nil {
		t.Fatalf("healthz: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok\n" {
		t.Errorf("healthz = %q", body)
	}
	tooltest.Eventually(t, "the failed executors' core freed", func() bool { return c.worker.fetchJSON(t).CoresUsed == 0 })
	next := c.registerApp(t, executorCommand(t, "hold", 0), 1)
	c.waitMasterExecutor(t, next, 0, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)
}

func TestKillExecutorSendsSIGKILLAfterGrace(t *testing.T) {
	c := startCluster(t, clusterConfig{worker: Config{KillGrace: 100 * time.Millisecond}})
	appID := c.registerApp(t, executorCommand(t, "ignore-term", 0), 1)
	c.waitMasterExecutor(t, appID, 0, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)
	waitFileContains(t, filepath.Join(c.worker.cfg.WorkDir, appID, "0", "stdout"), "ready")
	running, _ := c.worker.executor(t, appID, 0)

	if _, err := c.master.KillExecutors(context.Background(), connect.NewRequest(&masterv1.KillExecutorsRequest{
		AppId: appID, ExecutorIds: []int32{0},
	})); err != nil {
		t.Fatalf("kill executors: %v", err)
	}
	e := c.worker.waitFinishedExecutor(t, appID, 0)
	if e.State != "KILLED" || e.ExitStatus == nil || *e.ExitStatus != 137 ||
		!strings.Contains(e.Message, "killed at the master's request") || !strings.Contains(e.Message, "signal 9") {
		t.Errorf("executor 0 = %+v; want KILLED by SIGKILL at the master's request", e)
	}
	assertGone(t, running.PID)
}

func TestRunEndingKillsReapsAndReportsEveryExecutor(t *testing.T) {
	c := startCluster(t, clusterConfig{worker: Config{Cores: 2, KillGrace: 100 * time.Millisecond}})
	apps := []string{
		c.registerApp(t, executorCommand(t, "hold", 0), 1),
		c.registerApp(t, executorCommand(t, "ignore-term", 0), 1),
	}
	var pids []int
	for _, appID := range apps {
		c.waitMasterExecutor(t, appID, 0, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)
		waitFileContains(t, filepath.Join(c.worker.cfg.WorkDir, appID, "0", "stdout"), "env GLINT_WORKER_URL")
		e, _ := c.worker.executor(t, appID, 0)
		pids = append(pids, e.PID)
	}
	waitFileContains(t, filepath.Join(c.worker.cfg.WorkDir, apps[1], "0", "stdout"), "ready")

	if err := c.worker.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, pid := range pids {
		assertGone(t, pid)
	}
	// Run waited for the reports: the master already knows.
	for _, appID := range apps {
		e := c.masterExecutor(t, appID, 0)
		if e.GetState() != masterv1.ExecutorState_EXECUTOR_STATE_KILLED || !strings.Contains(e.GetMessage(), "worker shutting down") {
			t.Errorf("master shows %s/0 %s %q; want KILLED, worker shutting down", appID, e.GetState(), e.GetMessage())
		}
	}
}

func TestExecutorOutcome(t *testing.T) {
	tests := []struct {
		name        string
		exit        exit
		reason      error
		wantState   masterv1.ExecutorState
		wantMessage string
		wantStatus  *int32
	}{
		{"exit 0", exit{code: 0}, nil, masterv1.ExecutorState_EXECUTOR_STATE_EXITED, "exited with code 0", ptr[int32](0)},
		{"exit 1", exit{code: 1}, nil, masterv1.ExecutorState_EXECUTOR_STATE_FAILED, "exited with code 1", ptr[int32](1)},
		{"signal not sent by the worker", exit{signal: syscall.SIGSEGV}, nil, masterv1.ExecutorState_EXECUTOR_STATE_FAILED,
			"killed by signal 11 (segmentation fault)", ptr[int32](139)},
		{"killed on request", exit{signal: syscall.SIGTERM}, errKilledByMaster, masterv1.ExecutorState_EXECUTOR_STATE_KILLED,
			"killed at the master's request; killed by signal 15 (terminated)", ptr[int32](143)},
		{"killed on request but exited 0", exit{code: 0}, errAppFinished, masterv1.ExecutorState_EXECUTOR_STATE_KILLED,
			"application finished; exited with code 0", ptr[int32](0)},
		{"status unknown", exit{code: -1, err: errors.New("wait: no child processes")}, nil,
			masterv1.ExecutorState_EXECUTOR_STATE_FAILED, "exit status unknown: wait: no child processes", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state, message := executorKind.outcome(tt.exit, tt.reason)
			if state != tt.wantState || message != tt.wantMessage {
				t.Errorf("outcome = %s %q, want %s %q", state, message, tt.wantState, tt.wantMessage)
			}
			got := tt.exit.status()
			if (got == nil) != (tt.wantStatus == nil) || (got != nil && *got != *tt.wantStatus) {
				t.Errorf("status() = %v, want %v", got, tt.wantStatus)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestKillingAnExecutorThatAlreadyEndedIsDone(t *testing.T) {
	c := startCluster(t, clusterConfig{})
	ctx := context.Background()
	if _, err := c.worker.client.LaunchExecutor(ctx, connect.NewRequest(&workerv1.LaunchExecutorRequest{
		MasterUrl: c.masterURL, AppId: testAppID, ExecutorId: 0, Cores: 1, MemoryMib: 64,
		Description: &masterv1.ApplicationDescription{Name: "t", Command: executorCommand(t, "exit", 0)},
	})); err != nil {
		t.Fatal(err)
	}
	tooltest.Eventually(t, "executor EXITED", func() bool {
		e, finished := c.worker.executor(t, testAppID, 0)
		return finished && e.State == "EXITED"
	})
	// The master's kill raced the executor's exit: a kill of what ended is done.
	if _, err := c.worker.client.KillExecutor(ctx, connect.NewRequest(&workerv1.KillExecutorRequest{
		MasterUrl: c.masterURL, AppId: testAppID, ExecutorId: 0,
	})); err != nil {
		t.Errorf("KillExecutor of an executor that exited: %v, want success", err)
	}
}
