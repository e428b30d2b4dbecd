package schedule

import (
	"math/rand/v2"
	"strconv"

	"github.com/glint-cluster/glint/pkg/resources"
)

// WorkerSlot is a worker as schedule sees it: its size and what is still free
// (never more than its size).
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

// WantsExecutors reports whether a may be given an executor.
func (a AppDemand) WantsExecutors() bool {
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

// Schedule is Spark's Master.schedule() as a pure function of a snapshot: waiting
// drivers first, each on the first worker (in shuffled round-robin order) with
// enough free cores and memory; then executors, FIFO over the waiting
// applications. rng shuffles the workers for drivers.
//
// Executors cost O(workers) once per pass, to note what every worker has
// free and order the workers by free cores, then O(log workers) for each
// worker an application takes or looks past: an application wanting a few
// executors does not look at the other workers.
func Schedule(s Snapshot, rng *rand.Rand) Plan {
	drivers, left := placeDrivers(s.Workers, s.Drivers, rng)
	plan := Plan{Drivers: drivers, Waiting: map[string]string{}}
	p := newPass(s.Workers, left)
	for _, a := range s.Apps {
		var reason string
		plan.Executors, reason = p.placeExecutors(plan.Executors, a, s.SpreadOut)
		if reason != "" {
			plan.Waiting[a.ID] = reason
		}
	}
	return plan
}

// room is what a worker has free during a pass.
type room struct {
	cores     int32
	memoryMiB int64
}

// placeDrivers places drivers on a shuffled order of workers, resuming the
// round robin where the previous driver's search stopped, and returns what
// each worker has left after them.
func placeDrivers(workers []WorkerSlot, drivers []DriverDemand, rng *rand.Rand) (out []DriverPlacement, left []room) {
	left = make([]room, len(workers))
	for i, w := range workers {
		left[i] = room{cores: w.CoresFree, memoryMiB: w.MemoryFreeMiB}
	}
	if len(workers) == 0 || len(drivers) == 0 {
		return nil, left
	}
	order := rng.Perm(len(workers))
	pos := 0
	for _, d := range drivers {
		for visited := 0; visited < len(order); visited++ {
			i := order[pos]
			pos = (pos + 1) % len(order)
			if w := &left[i]; w.cores >= d.Cores && w.memoryMiB >= d.MemoryMiB {
				w.cores -= d.Cores
				w.memoryMiB -= d.MemoryMiB
				out = append(out, DriverPlacement{DriverID: d.ID, WorkerID: workers[i].ID})
				break
			}
		}
	}
	return out, left
}

// pass is what one schedule pass places executors from: the workers, what
// each has left, the workers ordered as Spark orders usable ones, and what
// the workers' sizes allow, for the waiting reasons.
type pass struct {
	workers []WorkerSlot
	left    []room
	free    byFreeCores
	// The largest worker sizes, and by cores per executor the most memory of
	// a worker with at least that many cores.
	maxCores   int32
	maxMemory  int64
	mostMemory map[int32]int64
	// Scratch for one application: the workers it took from free and, of
	// those, the usable ones and what they can take.
	popped, usable []int
	capacity       []int64
}

// newPass orders workers by their free cores in left and notes the largest
// worker sizes.
func newPass(workers []WorkerSlot, left []room) *pass {
	p := &pass{workers: workers, left: left, free: make(byFreeCores, len(workers)), mostMemory: map[int32]int64{}}
	for i, w := range workers {
		p.maxCores, p.maxMemory = max(p.maxCores, w.Cores), max(p.maxMemory, w.MemoryMiB)
		p.free[i] = freeWorker{coresFree: left[i].cores, index: i}
	}
	p.free.init()
	return p
}

// placeExecutors is Spark's startExecutorsOnWorkers for one application:
// scheduleExecutorsOnWorkers decides how many cores each usable worker gives,
// allocateWorkerResourceToExecutors turns them into executors. It appends
// them to out, takes their resources from the workers, and says why the app
// got nothing, if it did not.
//
// Usable workers — enough free memory and cores for one executor — come from
// p.free, most free cores first, and only as many as get a unit: spread out,
// the first `units` of them; consolidated, each takes all it can until the
// units run out. So an application takes no more workers from p.free than it
// gets executors, plus those with the free cores but not the free memory for
// one, which it looks past and puts back. Those can make one application look
// at every worker with free cores, O(log workers) each, when memory, not
// cores, is what the cluster lacks; an application no worker is big enough
// for looks at none.
func (p *pass) placeExecutors(out []ExecutorPlacement, a AppDemand, spreadOut bool) ([]ExecutorPlacement, string) {
	minCores := max(a.CoresPerExecutor, 1)
	if a.CoresLeft < minCores {
		return out, ""
	}
	if a.ExecutorsLeft <= 0 {
		return out, "executor limit reached (dynamic allocation)"
	}
	if !p.fits(minCores, a.MemoryPerExecutorMiB) {
		return out, p.waitingReason(a, minCores)
	}

	oneExecutorPerWorker := a.CoresPerExecutor == 0
	// Cores are handed out in units of minCores. Spark hands them one unit at
	// a time; the same result is computed in bulk, so the work does not grow
	// with how many cores workers advertise. Counts are in 64 bits; units
	// beyond what the usable workers can take are left over.
	units := int64(a.CoresLeft / minCores)
	most := units // usable workers that can get a unit
	if oneExecutorPerWorker {
		// Every worker that gets cores starts one executor; the executor
		// limit lets only the first ExecutorsLeft start one.
		most = min(most, int64(a.ExecutorsLeft))
	} else {
		units = min(units, int64(a.ExecutorsLeft)) // each unit is an executor
		most = units
	}
	p.popped, p.usable, p.capacity = p.popped[:0], p.usable[:0], p.capacity[:0]
	var canTake int64
	for int64(len(p.usable)) < most && (spreadOut || canTake < units) {
		i, ok := p.free.pop(minCores)
		if !ok {
			break
		}
		p.popped = append(p.popped, i)
		w := p.left[i]
		if w.memoryMiB < a.MemoryPerExecutorMiB {
			continue
		}
		c := int64(w.cores / minCores)
		if !oneExecutorPerWorker && a.MemoryPerExecutorMiB > 0 {
			c = min(c, w.memoryMiB/a.MemoryPerExecutorMiB)
		}
		p.usable, p.capacity, canTake = append(p.usable, i), append(p.capacity, c), canTake+c
	}
	assigned := assignUnits(p.capacity, units, spreadOut)

	placed := len(out)
	for pos, i := range p.usable {
		w := &p.left[i]
		n, cores := int64(1), int32(assigned[pos])*minCores
		if !oneExecutorPerWorker {
			n, cores = assigned[pos], a.CoresPerExecutor
		}
		for range n {
			w.cores -= cores
			w.memoryMiB -= a.MemoryPerExecutorMiB
			out = append(out, ExecutorPlacement{AppID: a.ID, WorkerID: p.workers[i].ID, Cores: cores, MemoryMiB: a.MemoryPerExecutorMiB})
		}
	}
	for _, i := range p.popped {
		p.free.push(freeWorker{coresFree: p.left[i].cores, index: i})
	}
	if len(out) > placed {
		return out, ""
	}
	return out, p.waitingReason(a, minCores)
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

// fits reports whether some worker is big enough for one executor of cores
// cores and memoryMiB. Each distinct cores per executor costs one look at
// every worker per pass.
func (p *pass) fits(cores int32, memoryMiB int64) bool {
	most, ok := p.mostMemory[cores]
	if !ok {
		most = -1
		for _, w := range p.workers {
			if w.Cores >= cores {
				most = max(most, w.MemoryMiB)
			}
		}
		p.mostMemory[cores] = most
	}
	return most >= memoryMiB
}

// waitingReason explains why an application got no executor: either no worker is
// big enough for one executor (it will wait forever unless a bigger worker joins),
// or the workers that are big enough are busy.
// Like resources.FormatMiB it formats without fmt, so that its allocations
// can be counted under -race.
func (p *pass) waitingReason(a AppDemand, minCores int32) string {
	need := formatCores(minCores) + " and " + resources.FormatMiB(a.MemoryPerExecutorMiB) + " per executor"
	switch {
	case len(p.workers) == 0:
		return "no alive workers"
	case !p.fits(minCores, a.MemoryPerExecutorMiB):
		return "requires more resources than any worker has: " + need +
			"; workers have at most " + formatCores(p.maxCores) + " and " + resources.FormatMiB(p.maxMemory)
	default:
		return "waiting for free resources: " + need
	}
}

// formatCores renders n cores as the waiting reasons do: "4 core(s)".
func formatCores(n int32) string { return strconv.FormatInt(int64(n), 10) + " core(s)" }

// freeWorker is a worker in byFreeCores: its free cores and its index in the
// snapshot.
type freeWorker struct {
	coresFree int32
	index     int
}

// before is Spark's order of usable workers: most free cores first, and,
// as its stable sort leaves them, in snapshot order among equals.
func (w freeWorker) before(o freeWorker) bool {
	return w.coresFree > o.coresFree || w.coresFree == o.coresFree && w.index < o.index
}

// byFreeCores is a binary heap of workers in the order of before.
type byFreeCores []freeWorker

// init makes h a heap.
func (h byFreeCores) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

// pop removes and returns the index of the first worker if it has at least
// cores free cores.
func (h *byFreeCores) pop(cores int32) (int, bool) {
	q := *h
	if len(q) == 0 || q[0].coresFree < cores {
		return 0, false
	}
	first, last := q[0], len(q)-1
	q[0] = q[last]
	*h = q[:last]
	h.down(0)
	return first.index, true
}

// push adds w.
func (h *byFreeCores) push(w freeWorker) {
	*h = append(*h, w)
	q := *h
	for i := len(q) - 1; i > 0; {
		parent := (i - 1) / 2
		if !q[i].before(q[parent]) {
			break
		}
		q[i], q[parent] = q[parent], q[i]
		i = parent
	}
}

// down moves the worker at i down to its place.
func (h byFreeCores) down(i int) {
	for {
		first := i
		for _, child := range [2]int{2*i + 1, 2*i + 2} {
			if child < len(h) && h[child].before(h[first]) {
				first = child
			}
		}
		if first == i {
			return
		}
		h[i], h[first] = h[first], h[i]
		i = first
	}
}
