package schedule

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// assignOneAtATime is Spark's loop: spread out, one unit per worker per round.
func assignOneAtATime(capacity []int64, units int64, spreadOut bool) []int64 {
	assigned := make([]int64, len(capacity))
	for progress := true; progress && units > 0; {
		progress = false
		for pos := range capacity {
			for units > 0 && assigned[pos] < capacity[pos] {
				assigned[pos]++
				units--
				progress = true
				if spreadOut {
					break
				}
			}
		}
	}
	return assigned
}

func TestAssignUnitsInBulkIsSparksLoop(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		capacity := rapid.SliceOfN(rapid.Int64Range(0, 40), 0, 8).Draw(t, "capacity")
		units := rapid.Int64Range(0, 200).Draw(t, "units")
		spreadOut := rapid.Bool().Draw(t, "spreadOut")
		want := assignOneAtATime(capacity, units, spreadOut)
		if got := assignUnits(capacity, units, spreadOut); !slices.Equal(got, want) {
			t.Fatalf("assignUnits(%v, %d, %v) = %v, want %v", capacity, units, spreadOut, got, want)
		}
	})
}

// TestScheduleWorkDoesNotGrowWithAdvertisedCores: two workers claiming 2^30
// cores each cost schedule no more than two with 8, for an application without
// --total-executor-cores (one executor per worker, or one core per executor
// up to an executor limit). The one-core-at-a-time loop took 2^31 steps here.
// (With cores per executor set and no limit, one placement per executor is
// inherent; registration caps a worker's cores at resources.MaxCores.)
// sameAllocs compares allocations per run of one pass at two sizes: equal
// but for at most two, which the runtime may add to a run on a loaded machine
// under the race detector (seen: 31 against 32). Work that grew with the
// size would add at least one per growth of a slice, a dozen or more here.
func sameAllocs(a, b float64) bool { return math.Abs(a-b) <= 2 }

func TestScheduleWorkDoesNotGrowWithAdvertisedCores(t *testing.T) {
	snapshot := func(cores int32, coresPerExecutor int32, spreadOut bool) Snapshot {
		return Snapshot{SpreadOut: spreadOut,
			Workers: []WorkerSlot{
				{ID: "w1", Cores: cores, CoresFree: cores, MemoryMiB: 1 << 20, MemoryFreeMiB: 1 << 20},
				{ID: "w2", Cores: cores, CoresFree: cores, MemoryMiB: 1 << 20, MemoryFreeMiB: 1 << 20},
			},
			Apps: []AppDemand{{ID: "a", CoresLeft: math.MaxInt32, CoresPerExecutor: coresPerExecutor, MemoryPerExecutorMiB: 1024, ExecutorsLeft: 4}},
		}
	}
	for _, spreadOut := range []bool{true, false} {
		for _, perExecutor := range []int32{0, 1} {
			allocs := map[int32]float64{}
			for _, cores := range []int32{8, 4096, 1 << 30} {
				s := snapshot(cores, perExecutor, spreadOut)
				allocs[cores] = testing.AllocsPerRun(20, func() { Schedule(s, rand.New(rand.NewPCG(1, 2))) })
			}
			if !sameAllocs(allocs[1<<30], allocs[8]) || !sameAllocs(allocs[4096], allocs[8]) {
				t.Errorf("spreadOut=%v cores per executor %d: allocations by advertised cores %v, want equal", spreadOut, perExecutor, allocs)
			}
		}
	}
}

// TestSchedulePassWorkDoesNotGrowWithWorkers: a pass serving applications
// that want a few executors each — spread out or consolidated, with and
// without cores per executor, one bigger than every worker — makes as many
// allocations at 10,000 workers as at 100. A pass that scanned, sorted or
// passed over the workers for each application, or kept a list of them, made
// more. (Ordering the workers once per pass is one allocation.)
func TestSchedulePassWorkDoesNotGrowWithWorkers(t *testing.T) {
	apps := []AppDemand{
		{ID: "too-big", CoresLeft: 4, CoresPerExecutor: 1, MemoryPerExecutorMiB: 1 << 20, ExecutorsLeft: math.MaxInt},
		{ID: "per-executor", CoresLeft: 4, CoresPerExecutor: 2, MemoryPerExecutorMiB: 1 << 10, ExecutorsLeft: math.MaxInt},
		{ID: "one-per-worker", CoresLeft: math.MaxInt32, MemoryPerExecutorMiB: 1 << 10, ExecutorsLeft: 3},
		{ID: "limited", CoresLeft: math.MaxInt32, CoresPerExecutor: 1, MemoryPerExecutorMiB: 1 << 10, ExecutorsLeft: 5},
	}
	for _, spreadOut := range []bool{true, false} {
		allocs := map[int]float64{}
		for _, n := range []int{100, 10_000} {
			s := Snapshot{Workers: idleWorkers(n, 16, 64<<10), Apps: apps, SpreadOut: spreadOut}
			allocs[n] = testing.AllocsPerRun(20, func() { Schedule(s, rand.New(rand.NewPCG(1, 2))) })
		}
		if !sameAllocs(allocs[100], allocs[10_000]) {
			t.Errorf("spreadOut=%v: allocations by workers %v, want equal", spreadOut, allocs)
		}
	}
}
