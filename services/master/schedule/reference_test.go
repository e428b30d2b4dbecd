package schedule

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"pgregory.net/rapid"

	"github.com/glint-cluster/glint/pkg/resources"
)

// referenceSchedule is the spec schedule's executor placement is held to:
// Spark's startExecutorsOnWorkers written out plainly, each application
// scanning every worker, sorting the usable ones by free cores (a stable
// sort, so equals stay in snapshot order), handing out units one at a time
// and explaining a wait from all the workers' sizes. Drivers are placed by
// the product's placeDrivers, which this does not check.
func referenceSchedule(s Snapshot, rng *rand.Rand) Plan {
	drivers, left := placeDrivers(s.Workers, s.Drivers, rng)
	plan := Plan{Drivers: drivers, Waiting: map[string]string{}}
	workers := slices.Clone(s.Workers)
	for i := range workers {
		workers[i].CoresFree, workers[i].MemoryFreeMiB = left[i].cores, left[i].memoryMiB
	}
	for _, a := range s.Apps {
		minCores := max(a.CoresPerExecutor, 1)
		if a.CoresLeft < minCores {
			continue
		}
		if a.ExecutorsLeft <= 0 {
			plan.Waiting[a.ID] = "executor limit reached (dynamic allocation)"
			continue
		}
		var usable []int
		var coresFree int64
		for i, w := range workers {
			if w.MemoryFreeMiB >= a.MemoryPerExecutorMiB && w.CoresFree >= minCores {
				usable = append(usable, i)
				coresFree += int64(w.CoresFree)
			}
		}
		sort.SliceStable(usable, func(i, j int) bool { return workers[usable[i]].CoresFree > workers[usable[j]].CoresFree })

		oneExecutorPerWorker := a.CoresPerExecutor == 0
		units := min(int64(a.CoresLeft), coresFree) / int64(minCores)
		if !oneExecutorPerWorker {
			units = min(units, int64(a.ExecutorsLeft))
		}
		capacity := make([]int64, len(usable))
		for pos, i := range usable {
			w := workers[i]
			capacity[pos] = int64(w.CoresFree / minCores)
			switch {
			case oneExecutorPerWorker && pos >= a.ExecutorsLeft:
				capacity[pos] = 0
			case !oneExecutorPerWorker && a.MemoryPerExecutorMiB > 0:
				capacity[pos] = min(capacity[pos], w.MemoryFreeMiB/a.MemoryPerExecutorMiB)
			}
		}
		assigned := assignOneAtATime(capacity, units, s.SpreadOut)

		// allocateWorkerResourceToExecutors, in Spark's terms of cores.
		placed := false
		for pos, i := range usable {
			assignedCores := int32(assigned[pos]) * minCores
			if assignedCores == 0 {
				continue
			}
			numExecutors, coresEach := int32(1), assignedCores
			if a.CoresPerExecutor > 0 {
				numExecutors, coresEach = assignedCores/a.CoresPerExecutor, a.CoresPerExecutor
			}
			for range numExecutors {
				e := ExecutorPlacement{AppID: a.ID, WorkerID: workers[i].ID, Cores: coresEach, MemoryMiB: a.MemoryPerExecutorMiB}
				plan.Executors = append(plan.Executors, e)
				workers[i].CoresFree -= e.Cores
				workers[i].MemoryFreeMiB -= e.MemoryMiB
				placed = true
			}
		}
		if !placed {
			plan.Waiting[a.ID] = referenceWaitingReason(workers, a, minCores)
		}
	}
	return plan
}

// referenceWaitingReason is the wait explained from every worker's size.
func referenceWaitingReason(workers []WorkerSlot, a AppDemand, minCores int32) string {
	var maxCores int32
	var maxMemory int64
	fits := false
	for _, w := range workers {
		maxCores, maxMemory = max(maxCores, w.Cores), max(maxMemory, w.MemoryMiB)
		fits = fits || w.Cores >= minCores && w.MemoryMiB >= a.MemoryPerExecutorMiB
	}
	need := fmt.Sprintf("%d core(s) and %s per executor", minCores, resources.FormatMiB(a.MemoryPerExecutorMiB))
	switch {
	case len(workers) == 0:
		return "no alive workers"
	case !fits:
		return fmt.Sprintf("requires more resources than any worker has: %s; workers have at most %d core(s) and %s",
			need, maxCores, resources.FormatMiB(maxMemory))
	default:
		return fmt.Sprintf("waiting for free resources: %s", need)
	}
}

// tiedSnapshotGen draws small clusters where ties and shortages are common:
// up to 30 workers of 1–8 cores, many with equal free cores, memory in steps
// of 512 MiB so that workers often have the cores but not the memory for an
// executor; up to 12 apps with cores per executor 0–4, executor limits and
// max cores both small and unbounded.
func tiedSnapshotGen() *rapid.Generator[Snapshot] {
	return rapid.Custom(func(t *rapid.T) Snapshot {
		s := Snapshot{SpreadOut: rapid.Bool().Draw(t, "spreadOut")}
		for i := range rapid.IntRange(0, 30).Draw(t, "workers") {
			cores := rapid.Int32Range(1, 8).Draw(t, "cores")
			memory := 512 * rapid.Int64Range(1, 16).Draw(t, "memory")
			s.Workers = append(s.Workers, WorkerSlot{
				ID:            fmt.Sprintf("w%d", i),
				Cores:         cores,
				MemoryMiB:     memory,
				CoresFree:     rapid.Int32Range(0, cores).Draw(t, "coresFree"),
				MemoryFreeMiB: 512 * rapid.Int64Range(0, memory/512).Draw(t, "memoryFree"),
			})
		}
		for i := range rapid.IntRange(0, 12).Draw(t, "apps") {
			s.Apps = append(s.Apps, AppDemand{
				ID:                   fmt.Sprintf("app%d", i),
				CoresLeft:            rapid.OneOf(rapid.Int32Range(0, 40), rapid.Just[int32](math.MaxInt32)).Draw(t, "coresLeft"),
				CoresPerExecutor:     rapid.Int32Range(0, 4).Draw(t, "coresPerExecutor"),
				MemoryPerExecutorMiB: 512 * rapid.Int64Range(0, 20).Draw(t, "memoryPerExecutor"),
				ExecutorsLeft:        rapid.OneOf(rapid.IntRange(0, 10), rapid.Just(math.MaxInt)).Draw(t, "executorsLeft"),
			})
		}
		for i := range rapid.IntRange(0, 3).Draw(t, "drivers") {
			s.Drivers = append(s.Drivers, DriverDemand{
				ID:        fmt.Sprintf("d%d", i),
				Cores:     rapid.Int32Range(1, 4).Draw(t, "driverCores"),
				MemoryMiB: 512 * rapid.Int64Range(1, 8).Draw(t, "driverMemory"),
			})
		}
		return s
	})
}

// TestScheduleIsTheReference: schedule places exactly what the plain
// reference places — the same executors on the same workers in the same
// order, the same waiting reasons — on clusters drawn for ties and
// shortages and on the wider ones of the invariants test.
func TestScheduleIsTheReference(t *testing.T) {
	for name, gen := range map[string]*rapid.Generator[Snapshot]{"tied": tiedSnapshotGen(), "wide": snapshotGen()} {
		t.Run(name, func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				s := gen.Draw(t, "snapshot")
				seed1, seed2 := rapid.Uint64().Draw(t, "seed1"), rapid.Uint64().Draw(t, "seed2")
				got := Schedule(s, rand.New(rand.NewPCG(seed1, seed2)))
				want := referenceSchedule(s, rand.New(rand.NewPCG(seed1, seed2)))
				if !slices.Equal(got.Drivers, want.Drivers) {
					t.Fatalf("drivers = %+v, want %+v", got.Drivers, want.Drivers)
				}
				if !slices.Equal(got.Executors, want.Executors) {
					t.Fatalf("executors = %+v\nwant %+v", got.Executors, want.Executors)
				}
				if !maps.Equal(got.Waiting, want.Waiting) {
					t.Fatalf("waiting = %v, want %v", got.Waiting, want.Waiting)
				}
			})
		})
	}
}
