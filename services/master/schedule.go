package master

import (
	"fmt"
	"math/rand/v2"
	"sort"

	"github.com/glint-cluster/glint/pkg/resources"
)

// WorkerSlot is a worker as schedule sees it: its size and what is still free.
type WorkerSlot struct {
	ID            string
	Cores         int32
	MemoryMiB     int64
	CoresFree     int32
	MemoryFreeMiB int64
}

// AppDemand is a waiting application as schedule sees it.
type AppDemand struct {
	ID string
	// CoresLeft is how many more cores the application may be granted.
	CoresLeft int32
	// CoresPerExecutor is spark.executor.cores; 0 means unset: one executor per
	// worker taking every core assigned there.
	CoresPerExecutor     int32
	MemoryPerExecutorMiB int64
	// ExecutorsLeft is how many more executors the application may have
	// (its executor limit minus the executors it has).
	ExecutorsLeft int
}

// wantsExecutors reports whether a may be given an executor.
func (a AppDemand) wantsExecutors() bool {
	return a.CoresLeft >= max(a.CoresPerExecutor, 1) && a.ExecutorsLeft > 0
}

// DriverDemand is a waiting cluster-mode driver.
type DriverDemand struct {
	ID        string
	Cores     int32
	MemoryMiB int64
}

// Snapshot is everything schedule decides from. Apps and Drivers are in
// submission order; Workers are the ALIVE workers.
type Snapshot struct {
	Workers   []WorkerSlot
	Apps      []AppDemand
	Drivers   []DriverDemand
	SpreadOut bool
}

// DriverPlacement launches a driver on a worker.
type DriverPlacement struct {
	DriverID string
	WorkerID string
}

// ExecutorPlacement launches one executor of an application on a worker.
type ExecutorPlacement struct {
	AppID     string
	WorkerID  string
	Cores     int32
	MemoryMiB int64
}

// Plan is what schedule decided.
type Plan struct {
	Drivers   []DriverPlacement
	Executors []ExecutorPlacement
	// Waiting says, for each application that could not get an executor although
	// it wants more cores, why not.
	Waiting map[string]string
}

// schedule is Spark's Master.schedule() as a pure function of a snapshot: waiting
// drivers first, each on the first worker (in shuffled round-robin order) with
// enough free cores and memory; then executors, FIFO over the waiting
// applications. rng shuffles the workers for drivers.
func schedule(s Snapshot, rng *rand.Rand) Plan {
	workers := make([]WorkerSlot, len(s.Workers))
	copy(workers, s.Workers)
	plan := Plan{Waiting: map[string]string{}}
	plan.Drivers = placeDrivers(workers, s.Drivers, rng)
	for _, a := range s.Apps {
		execs, reason := placeExecutors(workers, a, s.SpreadOut)
		plan.Executors = append(plan.Executors, execs...)
		if reason != "" {
			plan.Waiting[a.ID] = reason
		}
	}
	return plan
}

// placeDrivers places drivers on a shuffled order of workers, resuming the
// round robin where the previous driver's search stopped, and takes their
// resources from workers.
func placeDrivers(workers []WorkerSlot, drivers []DriverDemand, rng *rand.Rand) []DriverPlacement {
	if len(workers) == 0 || len(drivers) == 0 {
		return nil
	}
	order := rng.Perm(len(workers))
	var out []DriverPlacement
	pos := 0
	for _, d := range drivers {
		for visited := 0; visited < len(order); visited++ {
			w := &workers[order[pos]]
			pos = (pos + 1) % len(order)
			if w.CoresFree >= d.Cores && w.MemoryFreeMiB >= d.MemoryMiB {
				w.CoresFree -= d.Cores
				w.MemoryFreeMiB -= d.MemoryMiB
				out = append(out, DriverPlacement{DriverID: d.ID, WorkerID: w.ID})
				break
			}
		}
	}
	return out
}

// placeExecutors is Spark's startExecutorsOnWorkers for one application:
// scheduleExecutorsOnWorkers decides how many cores each usable worker gives,
// allocateWorkerResourceToExecutors turns them into executors. It takes the
// resources from workers and returns why the app got nothing, if it did not.
func placeExecutors(workers []WorkerSlot, a AppDemand, spreadOut bool) ([]ExecutorPlacement, string) {
	minCores := max(a.CoresPerExecutor, 1)
	if a.CoresLeft < minCores {
		return nil, ""
	}
	if a.ExecutorsLeft <= 0 {
		return nil, "executor limit reached (dynamic allocation)"
	}
	var usable []int
	for i, w := range workers {
		if w.MemoryFreeMiB >= a.MemoryPerExecutorMiB && w.CoresFree >= minCores {
			usable = append(usable, i)
		}
	}
	sort.SliceStable(usable, func(i, j int) bool { return workers[usable[i]].CoresFree > workers[usable[j]].CoresFree })

	oneExecutorPerWorker := a.CoresPerExecutor == 0
	// Cores are handed out in units of minCores. Spark hands them one unit at
	// a time; the same result is computed in bulk, so the work does not grow
	// with how many cores workers advertise. Sums are in 64 bits.
	var coresFree int64
	for _, i := range usable {
		coresFree += int64(workers[i].CoresFree)
	}
	units := min(int64(a.CoresLeft), coresFree) / int64(minCores)
	if !oneExecutorPerWorker {
		units = min(units, int64(a.ExecutorsLeft)) // each unit is an executor
	}
	capacity := make([]int64, len(usable))
	for pos, i := range usable {
		w := workers[i]
		capacity[pos] = int64(w.CoresFree / minCores)
		switch {
		case oneExecutorPerWorker && pos >= a.ExecutorsLeft:
			// Every worker that gets cores starts one executor; the executor
			// limit lets only the first ExecutorsLeft start one.
			capacity[pos] = 0
		case !oneExecutorPerWorker && a.MemoryPerExecutorMiB > 0:
			capacity[pos] = min(capacity[pos], w.MemoryFreeMiB/a.MemoryPerExecutorMiB)
		}
	}
	assigned := assignUnits(capacity, units, spreadOut)

	var out []ExecutorPlacement
	for pos, i := range usable {
		if assigned[pos] == 0 {
			continue
		}
		w := &workers[i]
		n, cores := int64(1), int32(assigned[pos])*minCores
		if !oneExecutorPerWorker {
			n, cores = assigned[pos], a.CoresPerExecutor
		}
		for range n {
			w.CoresFree -= cores
			w.MemoryFreeMiB -= a.MemoryPerExecutorMiB
			out = append(out, ExecutorPlacement{AppID: a.ID, WorkerID: w.ID, Cores: cores, MemoryMiB: a.MemoryPerExecutorMiB})
		}
	}
	if len(out) > 0 {
		return out, ""
	}
	return nil, waitingReason(workers, a, minCores)
}

// assignUnits hands out units among workers that can take capacity[pos]
// each, as Spark's one-at-a-time loop does: spread out, round robin in order
// (each round gives one unit to every worker that can take one, until the
// units run out), else consolidated (each worker in order takes all it can).
// It takes O(workers × log capacity) steps, however large the numbers.
func assignUnits(capacity []int64, units int64, spreadOut bool) []int64 {
	assigned := make([]int64, len(capacity))
	var total, most int64
	for _, c := range capacity {
		total, most = total+c, max(most, c)
	}
	if !spreadOut || total <= units {
		for pos, c := range capacity {
			assigned[pos] = min(c, units)
			units -= assigned[pos]
		}
		return assigned
	}
	// After `rounds` full rounds every worker holds min(capacity, rounds).
	// Find the most rounds the units pay for in full, then give one more
	// unit to the first workers in order that can take it.
	upTo := func(rounds int64) int64 {
		var n int64
		for _, c := range capacity {
			n += min(c, rounds)
		}
		return n
	}
	lo, hi := int64(0), most // upTo(lo) <= units < upTo(hi)
	for hi-lo > 1 {
		if mid := lo + (hi-lo)/2; upTo(mid) <= units {
			lo = mid
		} else {
			hi = mid
		}
	}
	left := units - upTo(lo)
	for pos, c := range capacity {
		assigned[pos] = min(c, lo)
		if c > lo && left > 0 {
			assigned[pos]++
			left--
		}
	}
	return assigned
}

// waitingReason explains why an application got no executor: either no worker is
// big enough for one executor (it will wait forever unless a bigger worker joins),
// or the workers that are big enough are busy.
func waitingReason(workers []WorkerSlot, a AppDemand, minCores int32) string {
	var maxCores int32
	var maxMemory int64
	fits := false
	for _, w := range workers {
		maxCores, maxMemory = max(maxCores, w.Cores), max(maxMemory, w.MemoryMiB)
		if w.Cores >= minCores && w.MemoryMiB >= a.MemoryPerExecutorMiB {
			fits = true
		}
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
