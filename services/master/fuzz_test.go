package master

import (
	"errors"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/resources"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/rpc/rpctest"
)

// noNetwork fails every call the master makes, so fuzzed URLs reach nothing.
type noNetwork struct{}

func (noNetwork) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, errors.New("no network in fuzz tests")
}

// FuzzMasterHandlers posts any body to any MasterService procedure of one
// master kept across inputs: answers are success or a client's error, and the
// master's state stays within its limits.
func FuzzMasterHandlers(f *testing.F) {
	s, err := New(Config{URL: "http://master.test:7077"})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(s.cancel)
	s.http = &http.Client{Transport: noNetwork{}}
	h := s.Handler()
	cmd := &masterv1.Command{Args: []string{"/bin/true", "--conf", "a=b"}, Env: map[string]string{"A": "b"}}
	rpctest.Fuzz(f, rpctest.Target{
		Service: masterv1.File_glint_master_v1_master_proto.Services().ByName("MasterService"),
		Handler: func(*testing.T) http.Handler { return h },
		Seeds: []proto.Message{
			&masterv1.RegisterWorkerRequest{WorkerId: "worker-20261129140000-h-1", Host: "h", Port: 1, Cores: 4, MemoryMib: 4096, WorkerUrl: "http://h:1"},
			&masterv1.RegisterApplicationRequest{AppToken: rpc.NewToken(), MasterToken: rpc.NewToken(), DriverUrl: "http://d:1", Description: &masterv1.ApplicationDescription{Name: "a", MemoryPerExecutorMib: 512, Command: cmd}},
			&masterv1.SubmitDriverRequest{Description: &masterv1.DriverDescription{Name: "d", Cores: 1, MemoryMib: 512, Command: cmd}},
			&masterv1.ExecutorStateChangedRequest{AppId: "app-20261129140000-0000", WorkerId: "worker-20261129140000-h-1", State: masterv1.ExecutorState_EXECUTOR_STATE_RUNNING},
			&masterv1.DriverStateChangedRequest{DriverId: "driver-20261129140000-0000", State: masterv1.DriverState_DRIVER_STATE_FINISHED},
			&masterv1.KillExecutorsRequest{AppId: "app-20261129140000-0000", ExecutorIds: []int32{0, 1}},
			&masterv1.DecommissionWorkerRequest{WorkerId: "worker-20261129140000-h-1"},
		},
		Codes: []connect.Code{connect.CodeInvalidArgument, connect.CodeNotFound, connect.CodeAlreadyExists,
			connect.CodeFailedPrecondition, connect.CodeResourceExhausted},
		Check: func(t *testing.T) { checkMasterInvariants(t, s) },
	})
}

// checkMasterInvariants: every worker within the limits and using no more
// than it has, and the kept lists within theirs.
func checkMasterInvariants(t *testing.T, s *Server) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.workers.all() {
		if w.cores < 1 || w.cores > resources.MaxCores || w.memoryMiB < 1 || w.memoryMiB > resources.MaxMemoryMiB ||
			w.coresUsed < 0 || w.coresUsed > w.cores || w.memoryUsedMiB < 0 || w.memoryUsedMiB > w.memoryMiB {
			t.Fatalf("worker %s: %d/%d cores, %d/%d MiB", w.id, w.coresUsed, w.cores, w.memoryUsedMiB, w.memoryMiB)
		}
	}
	if s.workers.len() > MaxWorkers || len(s.apps) > MaxActiveApps || len(s.drivers) > MaxActiveDrivers || s.activeBytes > MaxActiveBytes {
		t.Fatalf("%d workers, %d apps, %d drivers, %d active bytes", s.workers.len(), len(s.apps), len(s.drivers), s.activeBytes)
	}
	if len(s.appQueue) != len(s.apps) {
		t.Fatalf("%d apps queued, %d active", len(s.appQueue), len(s.apps))
	}
}
