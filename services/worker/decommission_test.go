package worker

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	workerv1 "github.com/glint-cluster/glint/pkg/api/glint/worker/v1"
	"github.com/glint-cluster/glint/services/master"
)

func TestADecommissionedWorkerTakesNoNewLaunches(t *testing.T) {
	for name, decommission := range map[string]func(*cluster){
		// SIGPWR: the worker tells the master, then refuses launches.
		"on its own": func(c *cluster) { c.worker.Decommission() },
		// glint decommission: the master tells the worker.
		"by the master": func(c *cluster) {
			if _, err := c.master.DecommissionWorker(context.Background(), connect.NewRequest(&masterv1.DecommissionWorkerRequest{WorkerId: c.worker.ID()})); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := startCluster(t, clusterConfig{worker: Config{Cores: 2, MemoryMiB: 1024}})
			decommission(c)
			tooltest.Eventually(t, "the master lists the worker DECOMMISSIONED", func() bool {
				return c.masterWorker(t, c.worker.ID()).GetState() == masterv1.WorkerState_WORKER_STATE_DECOMMISSIONED
			})
			req := &workerv1.LaunchExecutorRequest{
				MasterUrl: c.masterURL, AppId: testAppID, ExecutorId: 0, Cores: 1, MemoryMib: 64,
				Description: &masterv1.ApplicationDescription{Name: "t", Command: executorCommand(t, "exit", 0)},
			}
			tooltest.Eventually(t, "the worker knows it is decommissioned", func() bool {
				c.worker.mu.Lock()
				defer c.worker.mu.Unlock()
				return c.worker.decommissioned
			})
			if _, err := c.worker.client.LaunchExecutor(context.Background(), connect.NewRequest(req)); connect.CodeOf(err) != connect.CodeFailedPrecondition {
				t.Errorf("LaunchExecutor on a decommissioned worker: %v, want FailedPrecondition", err)
			}
			assertEmptyDir(t, c.worker.cfg.WorkDir)
		})
	}
}

func TestADecommissionedWorkerTellsANewMasterSo(t *testing.T) {
	other := startMaster(t, master.Config{}, false)
	c := startCluster(t, clusterConfig{otherMasters: []string{other}})
	c.worker.Decommission()
	if _, err := c.worker.client.MasterChanged(context.Background(), connect.NewRequest(&workerv1.MasterChangedRequest{MasterUrl: other})); err != nil {
		t.Fatal(err)
	}
	client := newMasterClient(t, other)
	tooltest.Eventually(t, "the new master lists the worker DECOMMISSIONED", func() bool {
		st, err := client.GetClusterState(context.Background(), connect.NewRequest(&masterv1.GetClusterStateRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range st.Msg.GetWorkers() {
			if w.GetId() == c.worker.ID() {
				return w.GetState() == masterv1.WorkerState_WORKER_STATE_DECOMMISSIONED
			}
		}
		return false
	})
}

func TestADeposedMasterCannotDecommissionAWorker(t *testing.T) {
	c := startCluster(t, clusterConfig{})
	c.worker.mu.Lock()
	c.worker.epoch = 5 // a newer leader's commands reached the worker
	c.worker.mu.Unlock()
	_, err := c.worker.client.DecommissionWorker(context.Background(), connect.NewRequest(&workerv1.DecommissionWorkerRequest{MasterUrl: c.masterURL, Epoch: 4}))
	c.worker.mu.Lock()
	decommissioned := c.worker.decommissioned
	c.worker.mu.Unlock()
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || decommissioned {
		t.Errorf("DecommissionWorker from epoch 4 after 5: %v, decommissioned=%v; want refused", err, decommissioned)
	}
}

// TestALaunchOfAnEarlierRegistrationIsRefused: a launch carrying another
// registration than the worker's current one with its master — one sent
// before the master declared the worker lost and it registered again — is
// refused unavailable and runs nothing; one of its registration runs.
func TestALaunchOfAnEarlierRegistrationIsRefused(t *testing.T) {
	c := startCluster(t, clusterConfig{worker: Config{Cores: 2, MemoryMiB: 1024}})
	c.worker.mu.Lock()
	current := c.worker.registration
	c.worker.mu.Unlock()
	if current == 0 {
		t.Fatal("the worker holds no registration from its master")
	}
	req := &workerv1.LaunchExecutorRequest{
		MasterUrl: c.masterURL, AppId: testAppID, ExecutorId: 0, Cores: 1, MemoryMib: 64, Registration: current + 1,
		Description: &masterv1.ApplicationDescription{Name: "t", Command: executorCommand(t, "exit", 0)},
	}
	if _, err := c.worker.client.LaunchExecutor(context.Background(), connect.NewRequest(req)); connect.CodeOf(err) != connect.CodeUnavailable ||
		!strings.Contains(err.Error(), "earlier registration") {
		t.Fatalf("LaunchExecutor of another registration: %v, want Unavailable", err)
	}
	assertEmptyDir(t, c.worker.cfg.WorkDir)
	req.Registration = current
	if _, err := c.worker.client.LaunchExecutor(context.Background(), connect.NewRequest(req)); err != nil {
		t.Fatalf("LaunchExecutor of the worker's registration: %v", err)
	}
}
