package master

import (
	"context"
	"math"
	"strings"
	"testing"

	"connectrpc.com/connect"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/resources"
)

// A heartbeat's usage is applied only to what the master placed on that
// worker: another worker's executor, one never placed and an unknown
// driver are ignored; the worker and the application sum their executors.
func TestAHeartbeatsUsageCountsOnlyWhatTheMasterPlacedThere(t *testing.T) {
	c := newCluster(t, Config{})
	wp := newPeer(t)
	worker := c.registerWorker(t, wp, 7078, 2, 4096)
	app := c.registerApp(t, newPeer(t), appDesc(512, 2))
	wp.expect(t, "LaunchExecutor "+app+"/0")
	other := newPeer(t)
	c.registerWorker(t, other, 7079, 2, 4096)
	other.expect(t, "LaunchExecutor "+app+"/1")
	_, err := c.client.Heartbeat(context.Background(), connect.NewRequest(&masterv1.HeartbeatRequest{
		WorkerId: worker,
		Usage: []*masterv1.ProcessUsage{
			{AppId: app, ExecutorId: 0, CpuSeconds: 2.5, MemoryBytes: 100 << 20, MemoryPeakBytes: 200 << 20},
			{AppId: app, ExecutorId: 1, CpuSeconds: 1000, MemoryBytes: 1 << 30, MemoryPeakBytes: 1 << 30},  // the other worker's
			{AppId: app, ExecutorId: 99, CpuSeconds: 1000, MemoryBytes: 1 << 30, MemoryPeakBytes: 1 << 30}, // never placed
			{DriverId: "driver-20261129140000-0000", CpuSeconds: 1000, MemoryBytes: 1 << 30, MemoryPeakBytes: 1 << 30},
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	st := c.srv.clusterState()
	for _, w := range st.GetWorkers() {
		want := &masterv1.Usage{}
		if w.GetId() == worker {
			want = &masterv1.Usage{CpuSeconds: 2.5, MemoryBytes: 100 << 20, MemoryPeakBytes: 200 << 20}
		}
		if got := w.GetUsage(); got.GetCpuSeconds() != want.GetCpuSeconds() || got.GetMemoryBytes() != want.GetMemoryBytes() || got.GetMemoryPeakBytes() != want.GetMemoryPeakBytes() {
			t.Errorf("worker %s usage %v, want %v", w.GetId(), got, want)
		}
	}
	a := st.GetActiveApps()[0]
	if u := a.GetUsage(); u.GetCpuSeconds() != 2.5 || u.GetMemoryBytes() != 100<<20 || u.GetMemoryPeakBytes() != 200<<20 {
		t.Errorf("application usage %v, want executor 0's alone", u)
	}
	for _, e := range a.GetExecutors() {
		if e.GetId() == 1 && e.GetUsage().GetCpuSeconds() != 0 {
			t.Errorf("executor 1 took usage %v from a worker it does not run on", e.GetUsage())
		}
	}
	// The pages show it: the executor's CPU against its cores and its
	// peak against its limit, the worker's sum.
	row := c.srv.appPage(st, a, true, "executors").Executors[0]
	if row.CPU != "2.5 s / 2 cores" || row.MemoryPeak != "200.0 MiB / 512.0 MiB" {
		t.Errorf("executor row CPU %q, memory %q; want 2.5 s / 2 cores and 200.0 MiB / 512.0 MiB", row.CPU, row.MemoryPeak)
	}
	for _, w := range index(st, c.clock.Now()).Workers {
		if w.ID == worker && w.Measured != "2.5 s CPU, 100.0 MiB" {
			t.Errorf("worker row measured %q, want 2.5 s CPU, 100.0 MiB", w.Measured)
		}
	}
	// Once it ended it holds no memory; its CPU and peak stay its own.
	if _, err := c.client.ExecutorStateChanged(context.Background(), connect.NewRequest(&masterv1.ExecutorStateChangedRequest{
		AppId: app, ExecutorId: 0, State: masterv1.ExecutorState_EXECUTOR_STATE_EXITED, WorkerId: worker, ExitStatus: new(int32),
	})); err != nil {
		t.Fatal(err)
	}
	for _, e := range c.app(t, app).GetExecutors() {
		if u := e.GetUsage(); e.GetId() == 0 && (u.GetMemoryBytes() != 0 || u.GetCpuSeconds() != 2.5 || u.GetMemoryPeakBytes() != 200<<20) {
			t.Errorf("ended executor's usage %v, want no memory, its CPU and peak kept", u)
		}
	}
}

// A heartbeat whose usage no worker measures is refused, naming the field,
// and changes nothing.
func TestAHeartbeatWithHostileUsageIsRefusedAndChangesNothing(t *testing.T) {
	c := newCluster(t, Config{})
	wp := newPeer(t)
	worker := c.registerWorker(t, wp, 7078, 2, 4096)
	app := c.registerApp(t, newPeer(t), appDesc(512, 1))
	wp.expect(t, "LaunchExecutor "+app+"/0")
	const maxBytes = resources.MaxMemoryMiB << 20
	ok := masterv1.ProcessUsage{AppId: app, ExecutorId: 0, CpuSeconds: 1, MemoryBytes: 10, MemoryPeakBytes: 10}
	for _, tc := range []struct {
		name, field string
		change      func(u *masterv1.ProcessUsage)
	}{
		{"negative CPU", "cpu_seconds", func(u *masterv1.ProcessUsage) { u.CpuSeconds = -1 }},
		{"NaN CPU", "cpu_seconds", func(u *masterv1.ProcessUsage) { u.CpuSeconds = math.NaN() }},
		{"infinite CPU", "cpu_seconds", func(u *masterv1.ProcessUsage) { u.CpuSeconds = math.Inf(1) }},
		{"huge CPU", "cpu_seconds", func(u *masterv1.ProcessUsage) { u.CpuSeconds = 1e11 }},
		{"negative memory", "memory_bytes", func(u *masterv1.ProcessUsage) { u.MemoryBytes = -1 }},
		{"huge memory", "memory_bytes", func(u *masterv1.ProcessUsage) { u.MemoryBytes, u.MemoryPeakBytes = maxBytes+1, maxBytes+1 }},
		{"peak below current", "memory_peak_bytes", func(u *masterv1.ProcessUsage) { u.MemoryPeakBytes = 9 }},
		{"huge peak", "memory_peak_bytes", func(u *masterv1.ProcessUsage) { u.MemoryPeakBytes = math.MaxInt64 }},
		{"neither executor nor driver", "driver_id", func(u *masterv1.ProcessUsage) { u.AppId = "" }},
		{"both executor and driver", "driver_id", func(u *masterv1.ProcessUsage) { u.DriverId = "driver-20261129140000-0000" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := &masterv1.ProcessUsage{AppId: ok.AppId, ExecutorId: ok.ExecutorId, CpuSeconds: ok.CpuSeconds, MemoryBytes: ok.MemoryBytes, MemoryPeakBytes: ok.MemoryPeakBytes}
			tc.change(bad)
			_, err := c.client.Heartbeat(context.Background(), connect.NewRequest(&masterv1.HeartbeatRequest{
				WorkerId: worker, Usage: []*masterv1.ProcessUsage{bad},
			}))
			if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "usage[0]."+tc.field) {
				t.Fatalf("heartbeat with %s: %v, want invalid_argument naming usage[0].%s", tc.name, err, tc.field)
			}
			if u := c.srv.clusterState().GetActiveApps()[0].GetUsage(); u.GetCpuSeconds() != 0 || u.GetMemoryBytes() != 0 {
				t.Fatalf("usage %v after a refused heartbeat, want none", u)
			}
		})
	}
	many := make([]*masterv1.ProcessUsage, resources.MaxCores+1)
	for i := range many {
		many[i] = &ok
	}
	_, err := c.client.Heartbeat(context.Background(), connect.NewRequest(&masterv1.HeartbeatRequest{WorkerId: worker, Usage: many}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("a heartbeat with %d usage entries: %v, want invalid_argument", len(many), err)
	}
}
