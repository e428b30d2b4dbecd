package worker

import (
	"context"
	"math"
	"strings"
	"testing"

	"connectrpc.com/connect"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	workerv1 "github.com/glint-cluster/glint/pkg/api/glint/worker/v1"
	"github.com/glint-cluster/glint/pkg/resources"
)

// limitCase is a launch over one limit: what to change, and the field and
// limit the InvalidArgument must name.
type limitCase struct {
	name         string
	cores        int32
	memoryMiB    int64
	edit         func(c *masterv1.Command, name, masterURL *string)
	field, limit string
}

func limitCases() []limitCase {
	big := strings.Repeat("x", resources.MaxArgBytes+1)
	none := func(*masterv1.Command, *string, *string) {}
	return []limitCase{
		{"cores over max", resources.MaxCores + 1, 64, none, "cores", "4096"},
		{"cores 2^31-1", math.MaxInt32, 64, none, "cores", "4096"},
		{"memory over max", 1, resources.MaxMemoryMiB + 1, none, "memory_mib", "64.0 TiB"},
		{"long name", 1, 64, func(_ *masterv1.Command, n, _ *string) { *n = strings.Repeat("n", 257) }, "name", "256"},
		{"long master url", 1, 64, func(_ *masterv1.Command, _, u *string) { *u = "http://m:1/" + strings.Repeat("u", 2048) }, "master_url", "2048"},
		{"too many args", 1, 64, func(c *masterv1.Command, _, _ *string) { c.Args = append(c.Args, make([]string, resources.MaxArgs)...) }, "arguments", "1024"},
		{"long arg", 1, 64, func(c *masterv1.Command, _, _ *string) { c.Args = append(c.Args, big) }, "argument", "65536"},
		{"too many --conf", 1, 64, func(c *masterv1.Command, _, _ *string) {
			for range resources.MaxConfEntries + 1 {
				c.Args = append(c.Args, "--conf", "a=b")
			}
		}, "--conf", "256"},
		{"long env value", 1, 64, func(c *masterv1.Command, _, _ *string) { c.Env["BIG"] = big }, `"BIG"`, "65536"},
		{"long env name", 1, 64, func(c *masterv1.Command, _, _ *string) { c.Env[strings.Repeat("N", 257)] = "x" }, "variable name", "256"},
	}
}

func checkRefusal(t *testing.T, err error, tc limitCase) {
	t.Helper()
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("got %v, want InvalidArgument", err)
	}
	if msg := err.Error(); !strings.Contains(msg, tc.field) || !strings.Contains(msg, tc.limit) || len(msg) > 2048 {
		t.Errorf("error %.300q does not name %q and the limit %q briefly", msg, tc.field, tc.limit)
	}
}

func TestLaunchesEnforceLimits(t *testing.T) {
	c := startCluster(t, clusterConfig{worker: Config{Cores: 2, MemoryMiB: 1024}})
	for _, tc := range limitCases() {
		t.Run("executor "+tc.name, func(t *testing.T) {
			req := &workerv1.LaunchExecutorRequest{
				MasterUrl: c.masterURL, AppId: testAppID, Cores: tc.cores, MemoryMib: tc.memoryMiB,
				Description: &masterv1.ApplicationDescription{Name: "t", Command: executorCommand(t, "exit", 0)},
			}
			tc.edit(req.Description.Command, &req.Description.Name, &req.MasterUrl)
			_, err := c.worker.client.LaunchExecutor(context.Background(), connect.NewRequest(req))
			checkRefusal(t, err, tc)
		})
		t.Run("driver "+tc.name, func(t *testing.T) {
			req := &workerv1.LaunchDriverRequest{
				MasterUrl: c.masterURL, DriverId: testDriverID,
				Description: &masterv1.DriverDescription{Name: "t", Cores: tc.cores, MemoryMib: tc.memoryMiB, Command: executorCommand(t, "exit", 0)},
			}
			tc.edit(req.Description.Command, &req.Description.Name, &req.MasterUrl)
			_, err := c.worker.client.LaunchDriver(context.Background(), connect.NewRequest(req))
			checkRefusal(t, err, tc)
		})
	}
	assertEmptyDir(t, c.worker.cfg.WorkDir)
	if st := c.worker.fetchJSON(t); st.CoresUsed != 0 || st.MemoryUsed != 0 {
		t.Errorf("refused launches hold %d cores and %d MiB", st.CoresUsed, st.MemoryUsed)
	}
}
