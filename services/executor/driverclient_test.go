package executor

import (
	"testing"

	"github.com/glint-cluster/glint/pkg/api/glint/driver/v1/driverv1connect"
	"github.com/glint-cluster/glint/pkg/rpc"
)

func TestTheExecutorMakesClientsOnlyForTheFourProceduresItCalls(t *testing.T) {
	hc, opts := rpc.NewHTTPClient(), rpc.ClientOptions(nil, "token")
	ours := testing.AllocsPerRun(10, func() { newDriverClient(hc, "http://127.0.0.1:1", opts...) })
	all := testing.AllocsPerRun(10, func() { driverv1connect.NewDriverServiceClient(hc, "http://127.0.0.1:1", opts...) })
	// The generated client makes nine; four of nine is 44%.
	if ours > all/2 {
		t.Errorf("the executor's driver client allocates %.0f times, the generated one for all nine procedures %.0f", ours, all)
	}
}
