package schedule

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/glint-cluster/glint/internal/benchtable"
)

// TestBenchPlacement is row 5 of make bench: placements per second in one
// schedule() pass with 1,000 waiting applications (two one-core executors of
// 1 GiB each), spread out over 100, 1,000 and 10,000 idle workers of 16 cores.
func TestBenchPlacement(t *testing.T) {
	benchtable.Start(t)
	figures := map[string]float64{}
	var parts []string
	perPlacement := map[int]float64{}
	for _, n := range []int{100, 1000, 10_000} {
		s := placementSnapshot(n, 1000)
		rng := rand.New(rand.NewPCG(1, 2))
		placed := len(Schedule(s, rng).Executors)
		r := testing.Benchmark(func(b *testing.B) {
			for b.Loop() {
				Schedule(s, rng)
			}
		})
		perSecond := float64(placed) * 1e9 / float64(r.NsPerOp())
		perPlacement[n] = float64(r.NsPerOp()) / float64(placed)
		figures[fmt.Sprintf("workers_%d_per_s", n)] = perSecond
		figures[fmt.Sprintf("workers_%d_ns_per_placement", n)] = perPlacement[n]
		parts = append(parts, fmt.Sprintf("%d workers: %.0f/s (%d per pass)", n, perSecond, placed))
	}
	growth := perPlacement[10_000] / perPlacement[100]
	figures["growth_100_to_10000"] = growth
	rate := figures["workers_1000_per_s"]
	benchtable.Record(t, benchtable.Row{
		ID: "5", What: "placement: executors placed per second in schedule(), 1,000 waiting apps",
		Result: strings.Join(parts, "; ") + fmt.Sprintf("; cost per placement ×%.1f from 100 to 10,000 workers", growth),
		Target: "≥ 100,000/s at 1,000 workers, growth ≤ 4×",
		Met:    benchtable.Check(min(rate/100_000, 4/growth), 1, false), Figures: figures,
	})
}

// placementSnapshot is n idle workers of 16 cores and 64 GiB and apps
// waiting applications, each wanting two one-core executors of 1 GiB.
func placementSnapshot(n, apps int) Snapshot {
	s := Snapshot{SpreadOut: true}
	for i := range n {
		s.Workers = append(s.Workers, WorkerSlot{ID: fmt.Sprintf("worker-%d", i), Cores: 16, MemoryMiB: 64 << 10, CoresFree: 16, MemoryFreeMiB: 64 << 10})
	}
	for i := range apps {
		s.Apps = append(s.Apps, AppDemand{ID: fmt.Sprintf("app-%d", i), CoresLeft: 2, CoresPerExecutor: 1, MemoryPerExecutorMiB: 1 << 10, ExecutorsLeft: 2})
	}
	return s
}
