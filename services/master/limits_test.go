package master

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/resources"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// refused asserts that err is a Connect error with code whose message names
// field and limit.
func refused(t *testing.T, err error, code connect.Code, field, limit string) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Fatalf("got %v, want %v", err, code)
	}
	if !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), limit) {
		t.Errorf("error %q does not name %q and the limit %q", err, field, limit)
	}
	if len(err.Error()) > 2048 {
		t.Errorf("error message of %d bytes", len(err.Error()))
	}
}

// commandCases are commands over each limit, and the field and limit each
// rejection must name.
func commandCases() map[string]struct {
	cmd          *masterv1.Command
	field, limit string
} {
	args := func(n int, a string) []string { return append([]string{"/bin/glint"}, repeated(n, a)...) }
	env := map[string]string{}
	for i := range resources.MaxEnv + 1 {
		env[fmt.Sprint("V", i)] = "x"
	}
	big := strings.Repeat("x", resources.MaxArgBytes)
	return map[string]struct {
		cmd          *masterv1.Command
		field, limit string
	}{
		"too many args":     {&masterv1.Command{Args: args(resources.MaxArgs, "x")}, "arguments", "1024"},
		"long arg":          {&masterv1.Command{Args: args(1, big+"x")}, "argument 1", "65536"},
		"too many --conf":   {&masterv1.Command{Args: args(2*(resources.MaxConfEntries+1), "--conf")}, "--conf", "256"},
		"too many env":      {&masterv1.Command{Args: args(0, ""), Env: env}, "environment variables", "256"},
		"long env name":     {&masterv1.Command{Args: args(0, ""), Env: map[string]string{strings.Repeat("N", 257): "x"}}, "variable name", "256"},
		"long env value":    {&masterv1.Command{Args: args(0, ""), Env: map[string]string{"N": big + "x"}}, `"N"`, "65536"},
		"command too large": {&masterv1.Command{Args: args(5, big)}, "bytes of arguments and environment", "262144"},
		// What a worker would refuse at launch, refused at the door.
		"NUL in an arg":       {&masterv1.Command{Args: args(1, "a\x00b")}, "argument 1", "NUL"},
		"'=' in an env name":  {&masterv1.Command{Args: args(0, ""), Env: map[string]string{"A=B": "x"}}, "environment", "'='"},
		"NUL in an env name":  {&masterv1.Command{Args: args(0, ""), Env: map[string]string{"A\x00": "x"}}, "environment", "NUL"},
		"empty env name":      {&masterv1.Command{Args: args(0, ""), Env: map[string]string{"": "x"}}, "environment", "empty"},
		"NUL in an env value": {&masterv1.Command{Args: args(0, ""), Env: map[string]string{"N": "a\x00"}}, `"N"`, "NUL"},
	}
}

func repeated(n int, s string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func TestRegisterWorkerEnforcesLimits(t *testing.T) {
	c := newCluster(t, Config{})
	p := newPeer(t)
	ok := func() *masterv1.RegisterWorkerRequest {
		return &masterv1.RegisterWorkerRequest{WorkerId: "worker-20261129140000-h-1", Host: "h", Port: 1,
			Cores: resources.MaxCores, MemoryMib: resources.MaxMemoryMiB, WorkerUrl: p.url}
	}
	for name, tc := range map[string]struct {
		edit         func(*masterv1.RegisterWorkerRequest)
		field, limit string
	}{
		"cores over max":  {func(m *masterv1.RegisterWorkerRequest) { m.Cores = resources.MaxCores + 1 }, "cores", "4096"},
		"cores 2^31-1":    {func(m *masterv1.RegisterWorkerRequest) { m.Cores = math.MaxInt32 }, "cores", "4096"},
		"memory over max": {func(m *masterv1.RegisterWorkerRequest) { m.MemoryMib = resources.MaxMemoryMiB + 1 }, "memory_mib", "64.0 TiB"},
		"memory 2^63-1":   {func(m *masterv1.RegisterWorkerRequest) { m.MemoryMib = math.MaxInt64 }, "memory_mib", "64.0 TiB"},
		"long host":       {func(m *masterv1.RegisterWorkerRequest) { m.Host = strings.Repeat("h", 254) }, "host", "253"},
		"long url":        {func(m *masterv1.RegisterWorkerRequest) { m.WorkerUrl = "http://h:1/" + strings.Repeat("x", 2048) }, "worker_url", "2048"},
		"long id": {func(m *masterv1.RegisterWorkerRequest) {
			m.WorkerId = "worker-20261129140000-" + strings.Repeat("h", 300) + "-1"
		}, "worker id", "300"},
		"traversal id": {func(m *masterv1.RegisterWorkerRequest) { m.WorkerId = "worker-20261129140000-../../etc-1" }, "worker id", "invalid id"},
		"too many running": {func(m *masterv1.RegisterWorkerRequest) {
			m.DriverIds = repeated(resources.MaxCores+1, "driver-20261129140000-0001")
		}, "executors and drivers", "4096"},
	} {
		t.Run(name, func(t *testing.T) {
			m := ok()
			tc.edit(m)
			_, err := c.client.RegisterWorker(context.Background(), connect.NewRequest(m))
			refused(t, err, connect.CodeInvalidArgument, tc.field, tc.limit)
		})
	}
	if n := len(c.srv.clusterState().GetWorkers()); n != 0 {
		t.Fatalf("%d workers registered after refused requests", n)
	}
	if _, err := c.client.RegisterWorker(context.Background(), connect.NewRequest(ok())); err != nil {
		t.Fatalf("worker at the maxima refused: %v", err)
	}
}

func TestRegisterApplicationEnforcesLimits(t *testing.T) {
	c := newCluster(t, Config{})
	p := newPeer(t)
	register := func(d *masterv1.ApplicationDescription, url string) error {
		_, err := c.client.RegisterApplication(context.Background(), connect.NewRequest(&masterv1.RegisterApplicationRequest{AppToken: rpc.NewToken(), MasterToken: rpc.NewToken(), Description: d, DriverUrl: url}))
		return err
	}
	for name, tc := range commandCases() {
		t.Run(name, func(t *testing.T) {
			d := appDesc(512, 0)
			d.Command = tc.cmd
			refused(t, register(d, p.url), connect.CodeInvalidArgument, tc.field, tc.limit)
		})
	}
	for name, tc := range map[string]struct {
		edit         func(*masterv1.ApplicationDescription)
		field, limit string
	}{
		"long name":          {func(d *masterv1.ApplicationDescription) { d.Name = strings.Repeat("n", 257) }, "name", "256"},
		"memory over max":    {func(d *masterv1.ApplicationDescription) { d.MemoryPerExecutorMib = math.MaxInt64 }, "memory_per_executor_mib", "64.0 TiB"},
		"executor cores max": {func(d *masterv1.ApplicationDescription) { d.CoresPerExecutor = ptr[int32](math.MaxInt32) }, "cores_per_executor", "4096"},
	} {
		t.Run(name, func(t *testing.T) {
			d := appDesc(512, 0)
			tc.edit(d)
			refused(t, register(d, p.url), connect.CodeInvalidArgument, tc.field, tc.limit)
		})
	}
	refused(t, register(appDesc(512, 0), "http://h:1/"+strings.Repeat("x", 2048)), connect.CodeInvalidArgument, "driver_url", "2048")
	if n := len(c.srv.clusterState().GetActiveApps()); n != 0 {
		t.Fatalf("%d apps registered after refused requests", n)
	}
}

func TestSubmitDriverEnforcesLimits(t *testing.T) {
	c := newCluster(t, Config{})
	desc := func() *masterv1.DriverDescription {
		return &masterv1.DriverDescription{Name: "d", Cores: 1, MemoryMib: 512, Command: &masterv1.Command{Args: []string{"/bin/true"}}}
	}
	submit := func(d *masterv1.DriverDescription) error {
		_, err := c.client.SubmitDriver(context.Background(), connect.NewRequest(&masterv1.SubmitDriverRequest{Description: d}))
		return err
	}
	for name, tc := range commandCases() {
		t.Run(name, func(t *testing.T) {
			d := desc()
			d.Command = tc.cmd
			refused(t, submit(d), connect.CodeInvalidArgument, tc.field, tc.limit)
		})
	}
	for name, tc := range map[string]struct {
		edit         func(*masterv1.DriverDescription)
		field, limit string
	}{
		"long name":       {func(d *masterv1.DriverDescription) { d.Name = strings.Repeat("n", 257) }, "name", "256"},
		"cores over max":  {func(d *masterv1.DriverDescription) { d.Cores = resources.MaxCores + 1 }, "cores", "4096"},
		"memory over max": {func(d *masterv1.DriverDescription) { d.MemoryMib = resources.MaxMemoryMiB + 1 }, "memory_mib", "64.0 TiB"},
	} {
		t.Run(name, func(t *testing.T) {
			d := desc()
			tc.edit(d)
			refused(t, submit(d), connect.CodeInvalidArgument, tc.field, tc.limit)
		})
	}
	if n := len(c.srv.clusterState().GetActiveDrivers()); n != 0 {
		t.Fatalf("%d drivers submitted after refused requests", n)
	}
}

func TestMasterKeepsBoundedNumbersOfWorkersAppsAndDrivers(t *testing.T) {
	c := newCluster(t, Config{})
	p := newPeer(t)
	ctx := context.Background()
	drv := &masterv1.DriverDescription{Name: "d", Cores: 1, MemoryMib: 512, Command: &masterv1.Command{Args: []string{"/bin/true"}}}
	for range MaxActiveDrivers {
		if _, err := c.client.SubmitDriver(ctx, connect.NewRequest(&masterv1.SubmitDriverRequest{Description: drv})); err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.client.SubmitDriver(ctx, connect.NewRequest(&masterv1.SubmitDriverRequest{Description: drv}))
	refused(t, err, connect.CodeResourceExhausted, "submit driver", "1000")
	for range MaxActiveApps {
		c.registerApp(t, p, appDesc(512, 0))
	}
	_, err = c.client.RegisterApplication(ctx, connect.NewRequest(&masterv1.RegisterApplicationRequest{AppToken: rpc.NewToken(), MasterToken: rpc.NewToken(), Description: appDesc(512, 0), DriverUrl: p.url}))
	refused(t, err, connect.CodeResourceExhausted, "register application", "1000")

	c.srv.mu.Lock()
	for i := range MaxWorkers {
		c.srv.workers.add(&workerInfo{id: fmt.Sprint("w", i), host: "h", port: int32(i)})
	}
	c.srv.mu.Unlock()
	_, err = c.client.RegisterWorker(ctx, connect.NewRequest(&masterv1.RegisterWorkerRequest{
		WorkerId: "worker-20261129140000-x-1", Host: "x", Port: 1, Cores: 1, MemoryMib: 1, WorkerUrl: p.url}))
	refused(t, err, connect.CodeResourceExhausted, "workers are listed", "10000")
}

func TestActiveDescriptionsAreBoundedByBytes(t *testing.T) {
	c := newCluster(t, Config{})
	c.srv.mu.Lock()
	c.srv.activeBytes = MaxActiveBytes - 10
	c.srv.mu.Unlock()
	_, err := c.client.SubmitDriver(context.Background(), connect.NewRequest(&masterv1.SubmitDriverRequest{Description: &masterv1.DriverDescription{
		Name: "d", Cores: 1, MemoryMib: 512, Command: &masterv1.Command{Args: []string{"/bin/true"}}}}))
	refused(t, err, connect.CodeResourceExhausted, "bytes", fmt.Sprint(MaxActiveBytes))
}

func TestCompletedListsAreBoundedByCountAndBytes(t *testing.T) {
	var r retained[int]
	for i := range 100 {
		r.add(i, 10, 20, 1000)
	}
	if len(r.items) > 20 || r.items[len(r.items)-1] != 99 {
		t.Fatalf("by count: kept %v", r.items)
	}
	r = retained[int]{}
	for i := range 100 {
		r.add(i, 100, 1000, 550)
	}
	if r.bytes > 550 || len(r.items) != 5 || r.items[0] != 95 {
		t.Fatalf("by bytes: kept %v, %d bytes", r.items, r.bytes)
	}
	r.add(100, 10_000, 1000, 550) // larger than the limit: kept alone
	if len(r.items) != 1 || r.bytes != 10_000 {
		t.Fatalf("oversize entry: kept %v, %d bytes", r.items, r.bytes)
	}

	// The master's lists: each driver is a few hundred bytes as sent.
	c := newCluster(t, Config{RetainedBytes: 4 << 10})
	for range 50 {
		resp, err := c.client.SubmitDriver(context.Background(), connect.NewRequest(&masterv1.SubmitDriverRequest{Description: &masterv1.DriverDescription{
			Name: "d", Cores: 1, MemoryMib: 512, Command: &masterv1.Command{Args: []string{"/bin/true", strings.Repeat("a", 500)}}}}))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.client.KillDriver(context.Background(), connect.NewRequest(&masterv1.KillDriverRequest{DriverId: resp.Msg.GetDriverId()})); err != nil {
			t.Fatal(err)
		}
	}
	app := c.registerApp(t, newPeer(t), appDesc(512, 0))
	if _, err := c.client.KillApplication(context.Background(), connect.NewRequest(&masterv1.KillApplicationRequest{AppId: app})); err != nil {
		t.Fatal(err)
	}
	st := c.srv.clusterState()
	if n := len(st.GetCompletedDrivers()); n == 0 || n > 8 {
		t.Errorf("%d completed drivers kept of 50 within 4 KiB", n)
	}
	c.srv.mu.Lock()
	defer c.srv.mu.Unlock()
	if c.srv.activeBytes != 0 {
		t.Errorf("active bytes %d with nothing active", c.srv.activeBytes)
	}
}

func TestWorkerReportsAreClipped(t *testing.T) {
	if got := clip(strings.Repeat("m", 1<<20)); len(got) > MaxMessageBytes+32 {
		t.Errorf("clipped to %d bytes", len(got))
	}
	if got := clip("short"); got != "short" {
		t.Errorf("short message changed: %q", got)
	}
}

// TestTotalsOfTwoLargestWorkers: two workers at the maxima, and (set in the
// state directly) two claiming 2^31−1 cores, add up in /json and the metrics.
func TestTotalsOfTwoLargestWorkers(t *testing.T) {
	c := newCluster(t, Config{})
	p := newPeer(t)
	c.registerWorker(t, p, 7078, resources.MaxCores, resources.MaxMemoryMiB)
	c.registerWorker(t, p, 7079, resources.MaxCores, resources.MaxMemoryMiB)
	checkTotals(t, c, 2*resources.MaxCores, 2*resources.MaxMemoryMiB)

	c.srv.mu.Lock()
	for w := range c.srv.workers.all() {
		w.cores, w.memoryMiB = math.MaxInt32, math.MaxInt64>>21
	}
	c.srv.mu.Unlock()
	checkTotals(t, c, 2*math.MaxInt32, 2*(math.MaxInt64>>21))
}

func checkTotals(t *testing.T, c *cluster, cores, memoryMiB int64) {
	t.Helper()
	resp, err := http.Get(c.url + "/json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var js struct {
		Cores  int64 `json:"cores"`
		Memory int64 `json:"memory"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&js); err != nil {
		t.Fatal(err)
	}
	if js.Cores != cores || js.Memory != memoryMiB {
		t.Errorf("/json: cores %d, memory %d MiB; want %d, %d", js.Cores, js.Memory, cores, memoryMiB)
	}
	if got := gaugeValue(t, c, "glint_master_cores", "free"); got != float64(cores) {
		t.Errorf("glint_master_cores free = %g, want %d", got, cores)
	}
	if got, want := gaugeValue(t, c, "glint_master_memory_bytes", "free"), float64(memoryMiB)*(1<<20); got != want {
		t.Errorf("glint_master_memory_bytes free = %g, want %g", got, want)
	}
}

// gaugeValue reads the master's gauge name with label state.
func gaugeValue(t *testing.T, c *cluster, name, state string) float64 {
	t.Helper()
	families, err := c.srv.cfg.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if f.GetName() == name && m.GetLabel()[0].GetValue() == state {
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no %s{state=%q}", name, state)
	return 0
}
