package driver_test

import (
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/glint-cluster/glint/internal/servicetest"
	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/rpc/rpctest"
	"github.com/glint-cluster/glint/services/driver"
	"github.com/glint-cluster/glint/services/master"
)

// FuzzDriverHandlers posts any body, with the application's token or
// without, to any DriverService procedure of a fresh driver: answers are
// success or a client's error, Unauthenticated without the token, and
// PermissionDenied for the master's procedures, which the application's
// token may not call.
func FuzzDriverHandlers(f *testing.F) {
	fuzzDriver(f, func(d *driver.Driver) string { return d.AppToken() })
}

// FuzzDriverHandlersAsTheMaster is FuzzDriverHandlers with the token the
// driver gave the master, which may call the master's procedures only.
func FuzzDriverHandlersAsTheMaster(f *testing.F) {
	fuzzDriver(f, driver.MasterToken)
}

func fuzzDriver(f *testing.F, token func(*driver.Driver) string) {
	// A registered driver, so that calls are answered at once; its master
	// has no workers, so nothing is launched.
	d := servicetest.Driver(f, driver.Config{
		Masters: []string{servicetest.Master(f, master.Config{})}, App: echoApp(nil), ExecutorCommand: []string{"/bin/false"},
	})
	rpctest.Fuzz(f, rpctest.Target{
		Service: driverv1.File_glint_driver_v1_driver_proto.Services().ByName("DriverService"),
		Handler: func(*testing.T) http.Handler { return d.Handler() },
		Token:   token(d),
		Seeds: []proto.Message{
			&driverv1.RegisterExecutorRequest{ExecutorId: 1, Hostname: "127.0.0.1", Cores: 2, ExecutorUrl: "http://127.0.0.1:3"},
			&driverv1.StatusUpdateRequest{ExecutorId: 1, Updates: []*driverv1.TaskStatus{{TaskId: 7, State: driverv1.TaskState_TASK_STATE_FINISHED}}},
			&driverv1.ExecutorUpdatedRequest{ExecutorId: 1, State: masterv1.ExecutorState_EXECUTOR_STATE_LOST, WorkerLost: true},
			&driverv1.ExecutorsRecoveredRequest{ExecutorIds: []int32{0, 2}, NextExecutorId: 3},
		},
		Codes: []connect.Code{connect.CodeInvalidArgument, connect.CodeNotFound, connect.CodeFailedPrecondition,
			connect.CodeAlreadyExists, connect.CodeResourceExhausted, connect.CodePermissionDenied},
	})
}
