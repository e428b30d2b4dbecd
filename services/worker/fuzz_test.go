package worker

import (
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	workerv1 "github.com/glint-cluster/glint/pkg/api/glint/worker/v1"
	"github.com/glint-cluster/glint/pkg/rpc/rpctest"
)

// FuzzWorkerHandlers posts any body to any WorkerService procedure of a fresh,
// unregistered worker (so no command it is sent can run: it has no active
// master): answers are success or a client's error, and nothing is reserved
// or written.
func FuzzWorkerHandlers(f *testing.F) {
	const master = "http://127.0.0.1:7077"
	var s *Server
	cmd := &masterv1.Command{Args: []string{"/bin/true", "--conf", "a=b"}, Env: map[string]string{"A": "b"}}
	rpctest.Fuzz(f, rpctest.Target{
		Service: workerv1.File_glint_worker_v1_worker_proto.Services().ByName("WorkerService"),
		Handler: func(t *testing.T) http.Handler {
			var err error
			s, err = New(Config{Masters: []string{master}, URL: "http://127.0.0.1:7078", Cores: 4, MemoryMiB: 4096, WorkDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			return s.Handler()
		},
		Seeds: []proto.Message{
			&workerv1.LaunchExecutorRequest{MasterUrl: master, AppId: testAppID, Cores: 1, MemoryMib: 64,
				Description: &masterv1.ApplicationDescription{Name: "a", MemoryPerExecutorMib: 64, Command: cmd}},
			&workerv1.LaunchDriverRequest{MasterUrl: master, DriverId: testDriverID,
				Description: &masterv1.DriverDescription{Name: "d", Cores: 1, MemoryMib: 64, Command: cmd}},
			&workerv1.KillExecutorRequest{MasterUrl: master, AppId: testAppID},
			&workerv1.KillDriverRequest{MasterUrl: master, DriverId: testDriverID},
			&workerv1.ApplicationFinishedRequest{MasterUrl: master, AppId: testAppID},
			&workerv1.MasterChangedRequest{MasterUrl: master},
			&workerv1.DecommissionWorkerRequest{MasterUrl: master},
		},
		Codes: []connect.Code{connect.CodeInvalidArgument, connect.CodeNotFound, connect.CodeFailedPrecondition,
			connect.CodeResourceExhausted, connect.CodeUnavailable},
		Check: func(t *testing.T) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.coresUsed != 0 || s.memoryUsedMiB != 0 || len(s.executors) != 0 || len(s.drivers) != 0 {
				t.Fatalf("an unregistered worker holds %d cores, %d MiB, %d executors, %d drivers",
					s.coresUsed, s.memoryUsedMiB, len(s.executors), len(s.drivers))
			}
			if names := madeByLaunches(t, s.cfg.WorkDir); len(names) != 0 {
				t.Fatalf("work dir holds %v", names)
			}
		},
	})
}
