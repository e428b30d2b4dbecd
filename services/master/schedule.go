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
	assignedCores := make([]int32, len(usable))
	assignedExecutors := make([]int, len(usable))
	totalExecutors := 0
	var coresFree int32
	for _, i := range usable {
		coresFree += workers[i].CoresFree
	}
	coresToAssign := min(a.CoresLeft, coresFree)

	canLaunch := func(pos int) bool {
		w := workers[usable[pos]]
		keepScheduling := coresToAssign >= minCores
		enoughCores := w.CoresFree-assignedCores[pos] >= minCores
		if oneExecutorPerWorker && assignedExecutors[pos] > 0 {
			return keepScheduling && enoughCores
		}
		assignedMemory := int64(assignedExecutors[pos]) * a.MemoryPerExecutorMiB
		enoughMemory := w.MemoryFreeMiB-assignedMemory >= a.MemoryPerExecutorMiB
		underLimit := totalExecutors < a.ExecutorsLeft
		return keepScheduling && enoughCores && enoughMemory && underLimit
	}

	free := make([]int, 0, len(usable))
	for pos := range usable {
		if canLaunch(pos) {
			free = append(free, pos)
		}
	}
	for len(free) > 0 {
		for _, pos := range free {
			for canLaunch(pos) {
				coresToAssign -= minCores
				assignedCores[pos] += minCores
				if oneExecutorPerWorker {
					if assignedExecutors[pos] == 0 {
						totalExecutors++
					}
					assignedExecutors[pos] = 1
				} else {
					assignedExecutors[pos]++
					totalExecutors++
				}
				if spreadOut {
					break
				}
			}
		}
		kept := free[:0]
		for _, pos := range free {
			if canLaunch(pos) {
				kept = append(kept, pos)
			}
		}
		free = kept
	}

	var out []ExecutorPlacement
	for pos, i := range usable {
		if assignedCores[pos] == 0 {
			continue
		}
		w := &workers[i]
		n, cores := int32(1), assignedCores[pos]
		if !oneExecutorPerWorker {
			n, cores = assignedCores[pos]/a.CoresPerExecutor, a.CoresPerExecutor
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
