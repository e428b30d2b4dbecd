package worker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/lifecycle"
)

func TestDriverEndStatesReachTheMaster(t *testing.T) {
	missing := &masterv1.Command{Args: []string{"/nonexistent/glint-worker-test-driver"}}
	tests := []struct {
		name         string
		command      func(t *testing.T) *masterv1.Command
		supervise    bool
		kill         bool
		wantState    masterv1.DriverState
		wantMessage  string
		wantStarts   int
		wantRestarts int
	}{
		{
			name:    "supervised driver is restarted after failing, then finishes",
			command: func(t *testing.T) *masterv1.Command { return driverCommand(t, "fail-once") }, supervise: true,
			wantState: masterv1.DriverState_DRIVER_STATE_FINISHED, wantMessage: "exited with code 0", wantStarts: 2, wantRestarts: 1,
		},
		{
			name:      "unsupervised driver that fails ends FAILED",
			command:   func(t *testing.T) *masterv1.Command { return driverCommand(t, "fail-once") },
			wantState: masterv1.DriverState_DRIVER_STATE_FAILED, wantMessage: "exited with code 3", wantStarts: 1,
		},
		{
			name:        "unsupervised driver that cannot start ends ERROR",
			command:     func(*testing.T) *masterv1.Command { return missing },
			wantState:   masterv1.DriverState_DRIVER_STATE_ERROR,
			wantMessage: `process.start: exec: "/nonexistent/glint-worker-test-driver": stat /nonexistent/glint-worker-test-driver: no such file or directory`,
			wantStarts:  1, // the log shows the one attempt; it is not retried
		},
		{
			name:    "killed supervised driver ends KILLED",
			command: func(t *testing.T) *masterv1.Command { return driverCommand(t, "hold") }, supervise: true, kill: true,
			wantState: masterv1.DriverState_DRIVER_STATE_KILLED, wantMessage: "killed at the master's request; killed by signal 15",
			wantStarts: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := startCluster(t, clusterConfig{worker: Config{SuperviseBackoffCap: 10 * time.Millisecond}})
			ctx := context.Background()
			resp, err := c.master.SubmitDriver(ctx, connect.NewRequest(&masterv1.SubmitDriverRequest{
				Description: &masterv1.DriverDescription{
					Name: "worker-test-driver", Cores: 1, MemoryMib: 64, Supervise: tt.supervise, Command: tt.command(t),
				},
			}))
			if err != nil {
				t.Fatalf("submit driver: %v", err)
			}
			id := resp.Msg.GetDriverId()
			dir := filepath.Join(c.worker.cfg.WorkDir, id)
			if tt.kill {
				waitFileContains(t, filepath.Join(dir, "stdout"), "env GLINT_DRIVER_ID="+id+"\n",
					"env GLINT_WORK_DIR="+dir+"\n", `"--driver-id" "`+id+`" "--worker-url" "`+c.worker.url+`"`,
					"env GLINT_WORKER_URL="+c.worker.url+"\n", fmt.Sprintf("env GLINT_WORKER_PID=%d\n", os.Getpid()), "env GOMAXPROCS=1\n")
				if _, err := c.master.KillDriver(ctx, connect.NewRequest(&masterv1.KillDriverRequest{DriverId: id})); err != nil {
					t.Fatalf("kill driver: %v", err)
				}
			}

			var d *masterv1.DriverInfo
			tooltest.Eventually(t, "the driver to end at the master", func() bool {
				st, err := c.master.DriverStatus(ctx, connect.NewRequest(&masterv1.DriverStatusRequest{DriverId: id}))
				if err != nil {
					t.Fatalf("driver status: %v", err)
				}
				d = st.Msg.GetDriver()
				return d.GetState() != masterv1.DriverState_DRIVER_STATE_RUNNING
			})
			if d.GetState() != tt.wantState || !strings.HasPrefix(d.GetMessage(), tt.wantMessage) {
				t.Errorf("master shows the driver %s %q; want %s %q", d.GetState(), d.GetMessage(), tt.wantState, tt.wantMessage)
			}

			data, _ := os.ReadFile(filepath.Join(dir, "stdout"))
			if starts := strings.Count(string(data), "Launch command: "); starts != tt.wantStarts {
				t.Errorf("driver launched %d times, want %d:\n%s", starts, tt.wantStarts, data)
			}
			st := c.worker.fetchJSON(t)
			if len(st.FinishedDrivers) != 1 || st.FinishedDrivers[0].ID != id || st.FinishedDrivers[0].Restarts != tt.wantRestarts ||
				st.FinishedDrivers[0].State != lifecycle.Name(tt.wantState) {
				t.Errorf("worker's finished drivers = %+v; want %s %s after %d restarts", st.FinishedDrivers, id, lifecycle.Name(tt.wantState), tt.wantRestarts)
			}
			if st.CoresUsed != 0 || st.MemoryUsed != 0 {
				t.Errorf("the ended driver still holds %d cores and %d MiB", st.CoresUsed, st.MemoryUsed)
			}
		})
	}
}

// TestASupervisedDriverWhoseLaunchFailsIsRestarted: a supervised driver
// whose launch fails is launched again, with the supervise backoff, as one
// that failed after it ran: the worker shows it RESTARTING with the launch's
// error, the master RUNNING, until it is killed.
func TestASupervisedDriverWhoseLaunchFailsIsRestarted(t *testing.T) {
	c := startCluster(t, clusterConfig{worker: Config{SuperviseBackoffCap: 10 * time.Millisecond}})
	ctx := context.Background()
	resp, err := c.master.SubmitDriver(ctx, connect.NewRequest(&masterv1.SubmitDriverRequest{
		Description: &masterv1.DriverDescription{Name: "worker-test-driver", Cores: 1, MemoryMib: 64, Supervise: true,
			Command: &masterv1.Command{Args: []string{"/nonexistent/glint-worker-test-driver"}}},
	}))
	if err != nil {
		t.Fatalf("submit driver: %v", err)
	}
	id := resp.Msg.GetDriverId()
	tooltest.Eventually(t, "the driver restarted after failed launches", func() bool {
		st := c.worker.fetchJSON(t)
		return len(st.Drivers) == 1 && st.Drivers[0].Restarts >= 2 && st.Drivers[0].State == "RESTARTING" &&
			strings.HasPrefix(st.Drivers[0].Message, "launch failed: process.start: exec: ")
	})
	st, err := c.master.DriverStatus(ctx, connect.NewRequest(&masterv1.DriverStatusRequest{DriverId: id}))
	if err != nil || st.Msg.GetDriver().GetState() != masterv1.DriverState_DRIVER_STATE_RUNNING {
		t.Fatalf("the master shows the restarting driver %v %v, want RUNNING", st, err)
	}
	if _, err := c.master.KillDriver(ctx, connect.NewRequest(&masterv1.KillDriverRequest{DriverId: id})); err != nil {
		t.Fatalf("kill driver: %v", err)
	}
	tooltest.Eventually(t, "the killed driver KILLED at the master", func() bool {
		st, err := c.master.DriverStatus(ctx, connect.NewRequest(&masterv1.DriverStatusRequest{DriverId: id}))
		return err == nil && st.Msg.GetDriver().GetState() == masterv1.DriverState_DRIVER_STATE_KILLED
	})
}

func TestRestartWaitDoublesResetsAndIsCapped(t *testing.T) {
	tests := []struct {
		name  string
		prev  time.Duration
		ran   time.Duration
		limit time.Duration
		want  time.Duration
	}{
		{"first restart waits a second", 0, time.Second, time.Minute, time.Second},
		{"quick failure doubles the wait", time.Second, time.Second, time.Minute, 2 * time.Second},
		{"and doubles again", 4 * time.Second, 0, time.Minute, 8 * time.Second},
		{"a run of exactly 5s is not yet healthy", 4 * time.Second, 5 * time.Second, time.Minute, 8 * time.Second},
		{"a healthy run resets the wait", 32 * time.Second, 6 * time.Second, time.Minute, time.Second},
		{"the wait is capped", 32 * time.Second, time.Second, time.Minute, time.Minute},
		{"and stays at the cap", time.Minute, time.Second, time.Minute, time.Minute},
		{"a cap below a second caps the first wait", 0, 0, 10 * time.Millisecond, 10 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := restartWait(tt.prev, tt.ran, tt.limit); got != tt.want {
				t.Errorf("restartWait(%v, %v, %v) = %v, want %v", tt.prev, tt.ran, tt.limit, got, tt.want)
			}
		})
	}
}
