package schedule

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// newRNG is the fixed-seed generator the example tests shuffle workers with.
func newRNG() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }

// idleWorkers returns n workers named w1…wn with all their cores and memory free.
func idleWorkers(n int, cores int32, memoryMiB int64) []WorkerSlot {
	ws := make([]WorkerSlot, n)
	for i := range ws {
		ws[i] = WorkerSlot{ID: fmt.Sprintf("w%d", i+1), Cores: cores, MemoryMiB: memoryMiB, CoresFree: cores, MemoryFreeMiB: memoryMiB}
	}
	return ws
}

// executorShape says how an application's executors landed without naming the
// workers (Spark breaks ties between equally free workers in no fixed order):
// one entry per worker listing its executors' cores, such as "[4 4]", sorted.
func executorShape(p Plan, appID string) []string {
	byWorker := map[string][]int32{}
	for _, e := range p.Executors {
		if e.AppID == appID {
			byWorker[e.WorkerID] = append(byWorker[e.WorkerID], e.Cores)
		}
	}
	shape := make([]string, 0, len(byWorker))
	for _, cores := range byWorker {
		shape = append(shape, fmt.Sprint(cores))
	}
	slices.Sort(shape)
	return shape
}

// sortedShape is want sorted like executorShape's result.
func sortedShape(want ...string) []string {
	s := slices.Clone(want)
	slices.Sort(s)
	return s
}

// checkWaiting fails t unless the plan's waiting reason for appID contains
// want, or, when want is empty, the app has no waiting reason.
func checkWaiting(t *testing.T, plan Plan, appID, want string) {
	t.Helper()
	got, ok := plan.Waiting[appID]
	if want == "" && ok || !strings.Contains(got, want) {
		t.Errorf("Waiting[%s] = %q, want %q", appID, got, want)
	}
}

func TestScheduleExecutorPlacement(t *testing.T) {
	tests := []struct {
		name      string
		workers   []WorkerSlot
		app       AppDemand
		spreadOut bool
		want      []string
	}{
		{
			name:      "spread out gives one block per worker per pass",
			workers:   idleWorkers(3, 8, 8192),
			app:       AppDemand{CoresLeft: 12, MemoryPerExecutorMiB: 1024, ExecutorsLeft: math.MaxInt},
			spreadOut: true,
			want:      sortedShape("[4]", "[4]", "[4]"),
		},
		{
			name:    "consolidate fills a worker before the next",
			workers: idleWorkers(3, 8, 8192),
			app:     AppDemand{CoresLeft: 12, MemoryPerExecutorMiB: 1024, ExecutorsLeft: math.MaxInt},
			want:    sortedShape("[8]", "[4]"),
		},
		{
			name:      "spread out deals whole blocks of cores per executor round robin",
			workers:   idleWorkers(3, 8, 8192),
			app:       AppDemand{CoresLeft: 12, CoresPerExecutor: 2, MemoryPerExecutorMiB: 1024, ExecutorsLeft: math.MaxInt},
			spreadOut: true,
			want:      sortedShape("[2 2]", "[2 2]", "[2 2]"),
		},
		{
			name:    "consolidate packs blocks of cores per executor onto the first worker",
			workers: idleWorkers(3, 8, 8192),
			app:     AppDemand{CoresLeft: 12, CoresPerExecutor: 2, MemoryPerExecutorMiB: 1024, ExecutorsLeft: math.MaxInt},
			want:    sortedShape("[2 2 2 2]", "[2 2]"),
		},
		{
			name:      "cores per executor set launches several executors per worker and leaves cores below a block unused",
			workers:   idleWorkers(2, 10, 8192),
			app:       AppDemand{CoresLeft: math.MaxInt32, CoresPerExecutor: 4, MemoryPerExecutorMiB: 1024, ExecutorsLeft: math.MaxInt},
			spreadOut: true,
			want:      sortedShape("[4 4]", "[4 4]"),
		},
		{
			name:      "cores per executor unset launches one executor per worker taking all its assigned cores",
			workers:   idleWorkers(2, 6, 8192),
			app:       AppDemand{CoresLeft: math.MaxInt32, MemoryPerExecutorMiB: 1024, ExecutorsLeft: math.MaxInt},
			spreadOut: true,
			want:      sortedShape("[6]", "[6]"),
		},
		{
			name:      "worker memory bounds the number of executors it holds",
			workers:   idleWorkers(1, 16, 4096),
			app:       AppDemand{CoresLeft: math.MaxInt32, CoresPerExecutor: 2, MemoryPerExecutorMiB: 1024, ExecutorsLeft: math.MaxInt},
			spreadOut: true,
			want:      sortedShape("[2 2 2 2]"),
		},
		{
			name:      "memory is needed once per executor, not per core, when cores per executor is unset",
			workers:   idleWorkers(1, 8, 1024),
			app:       AppDemand{CoresLeft: math.MaxInt32, MemoryPerExecutorMiB: 1024, ExecutorsLeft: math.MaxInt},
			spreadOut: true,
			want:      sortedShape("[8]"),
		},
		{
			name:      "max cores caps the cores granted",
			workers:   idleWorkers(2, 16, 8192),
			app:       AppDemand{CoresLeft: 5, MemoryPerExecutorMiB: 1024, ExecutorsLeft: math.MaxInt},
			spreadOut: true,
			want:      sortedShape("[3]", "[2]"),
		},
		{
			name:      "cores left below one block grants nothing",
			workers:   idleWorkers(2, 16, 8192),
			app:       AppDemand{CoresLeft: 3, CoresPerExecutor: 4, MemoryPerExecutorMiB: 1024, ExecutorsLeft: math.MaxInt},
			spreadOut: true,
			want:      sortedShape(),
		},
		{
			name:      "executor limit caps the number of executors",
			workers:   idleWorkers(4, 8, 8192),
			app:       AppDemand{CoresLeft: math.MaxInt32, CoresPerExecutor: 2, MemoryPerExecutorMiB: 1024, ExecutorsLeft: 3},
			spreadOut: true,
			want:      sortedShape("[2]", "[2]", "[2]"),
		},
		{
			name:      "executor limit still lets an executor without cores per executor grow",
			workers:   idleWorkers(3, 8, 8192),
			app:       AppDemand{CoresLeft: math.MaxInt32, MemoryPerExecutorMiB: 1024, ExecutorsLeft: 1},
			spreadOut: true,
			want:      sortedShape("[8]"),
		},
		{
			name: "workers without room for one executor are skipped",
			workers: []WorkerSlot{
				{ID: "few-cores", Cores: 8, MemoryMiB: 8192, CoresFree: 1, MemoryFreeMiB: 8192},
				{ID: "little-memory", Cores: 8, MemoryMiB: 8192, CoresFree: 8, MemoryFreeMiB: 512},
				{ID: "roomy", Cores: 8, MemoryMiB: 8192, CoresFree: 4, MemoryFreeMiB: 8192},
			},
			app:       AppDemand{CoresLeft: math.MaxInt32, CoresPerExecutor: 2, MemoryPerExecutorMiB: 1024, ExecutorsLeft: math.MaxInt},
			spreadOut: true,
			want:      sortedShape("[2 2]"),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.app.ID = "app"
			plan := Schedule(Snapshot{Workers: tc.workers, Apps: []AppDemand{tc.app}, SpreadOut: tc.spreadOut}, newRNG())
			if got := executorShape(plan, "app"); !slices.Equal(got, tc.want) {
				t.Errorf("executor cores per worker = %v, want %v", got, tc.want)
			}
			for _, e := range plan.Executors {
				if e.MemoryMiB != tc.app.MemoryPerExecutorMiB {
					t.Errorf("executor on %s has %d MiB, want %d", e.WorkerID, e.MemoryMiB, tc.app.MemoryPerExecutorMiB)
				}
			}
			checkWaiting(t, plan, "app", "")
		})
	}
}

func TestScheduleFillsWorkersWithMostFreeCoresFirst(t *testing.T) {
	workers := []WorkerSlot{
		{ID: "two-free", Cores: 8, MemoryMiB: 8192, CoresFree: 2, MemoryFreeMiB: 8192},
		{ID: "eight-free", Cores: 8, MemoryMiB: 8192, CoresFree: 8, MemoryFreeMiB: 8192},
		{ID: "four-free", Cores: 8, MemoryMiB: 8192, CoresFree: 4, MemoryFreeMiB: 8192},
	}
	app := AppDemand{ID: "app", CoresLeft: 10, MemoryPerExecutorMiB: 1024, ExecutorsLeft: math.MaxInt}
	plan := Schedule(Snapshot{Workers: workers, Apps: []AppDemand{app}}, newRNG())
	want := []ExecutorPlacement{
		{AppID: "app", WorkerID: "eight-free", Cores: 8, MemoryMiB: 1024},
		{AppID: "app", WorkerID: "four-free", Cores: 2, MemoryMiB: 1024},
	}
	if !slices.Equal(plan.Executors, want) {
		t.Errorf("executors = %+v, want %+v", plan.Executors, want)
	}
}

func TestScheduleServesAppsFIFO(t *testing.T) {
	capped := AppDemand{ID: "capped", CoresLeft: 10, MemoryPerExecutorMiB: 1024, ExecutorsLeft: math.MaxInt}
	greedy := AppDemand{ID: "greedy", CoresLeft: math.MaxInt32, MemoryPerExecutorMiB: 1024, ExecutorsLeft: math.MaxInt}
	tests := []struct {
		name      string
		apps      []AppDemand
		wantShape map[string][]string
		waiting   map[string]string
	}{
		{
			name:      "the first app takes its cores and the next app gets the rest",
			apps:      []AppDemand{capped, greedy},
			wantShape: map[string][]string{"capped": sortedShape("[5]", "[5]"), "greedy": sortedShape("[3]", "[3]")},
		},
		{
			name:      "an app without max cores takes every core from the apps behind it",
			apps:      []AppDemand{greedy, capped},
			wantShape: map[string][]string{"greedy": sortedShape("[8]", "[8]"), "capped": sortedShape()},
			waiting:   map[string]string{"capped": "waiting for free resources"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plan := Schedule(Snapshot{Workers: idleWorkers(2, 8, 8192), Apps: tc.apps, SpreadOut: true}, newRNG())
			for app, want := range tc.wantShape {
				if got := executorShape(plan, app); !slices.Equal(got, want) {
					t.Errorf("%s: executor cores per worker = %v, want %v", app, got, want)
				}
			}
			if len(plan.Executors) == 0 || plan.Executors[0].AppID != tc.apps[0].ID {
				t.Errorf("executors = %+v, want %s's first", plan.Executors, tc.apps[0].ID)
			}
			for _, a := range tc.apps {
				checkWaiting(t, plan, a.ID, tc.waiting[a.ID])
			}
		})
	}
}

func TestSchedulePlacesDriversBeforeExecutors(t *testing.T) {
	tests := []struct {
		name        string
		worker      WorkerSlot
		driver      DriverDemand
		app         AppDemand
		wantShape   []string
		wantWaiting string
	}{
		{
			name:      "the driver's cores are gone before the executor takes the rest",
			worker:    idleWorkers(1, 8, 8192)[0],
			driver:    DriverDemand{ID: "driver", Cores: 2, MemoryMiB: 2048},
			app:       AppDemand{ID: "app", CoresLeft: math.MaxInt32, MemoryPerExecutorMiB: 1024, ExecutorsLeft: math.MaxInt},
			wantShape: sortedShape("[6]"),
		},
		{
			name:        "the driver's memory is gone and the app waits",
			worker:      idleWorkers(1, 8, 4096)[0],
			driver:      DriverDemand{ID: "driver", Cores: 1, MemoryMiB: 3072},
			app:         AppDemand{ID: "app", CoresLeft: math.MaxInt32, MemoryPerExecutorMiB: 2048, ExecutorsLeft: math.MaxInt},
			wantShape:   sortedShape(),
			wantWaiting: "waiting for free resources",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Snapshot{Workers: []WorkerSlot{tc.worker}, Apps: []AppDemand{tc.app}, Drivers: []DriverDemand{tc.driver}, SpreadOut: true}
			plan := Schedule(s, newRNG())
			wantDrivers := []DriverPlacement{{DriverID: tc.driver.ID, WorkerID: tc.worker.ID}}
			if !slices.Equal(plan.Drivers, wantDrivers) {
				t.Errorf("drivers = %+v, want %+v", plan.Drivers, wantDrivers)
			}
			if got := executorShape(plan, tc.app.ID); !slices.Equal(got, tc.wantShape) {
				t.Errorf("executor cores per worker = %v, want %v", got, tc.wantShape)
			}
			checkWaiting(t, plan, tc.app.ID, tc.wantWaiting)
		})
	}
}

func TestScheduleLeavesDriversThatFitNowhereUnplaced(t *testing.T) {
	tests := []struct {
		name    string
		workers []WorkerSlot
		drivers []DriverDemand
		want    []string
	}{
		{
			name:    "drivers larger than every worker in cores or memory",
			workers: idleWorkers(2, 4, 4096),
			drivers: []DriverDemand{{ID: "many-cores", Cores: 8, MemoryMiB: 1024}, {ID: "much-memory", Cores: 1, MemoryMiB: 8192}, {ID: "small", Cores: 1, MemoryMiB: 1024}},
			want:    []string{"small"},
		},
		{
			name:    "a driver behind others that used up the worker",
			workers: idleWorkers(1, 2, 4096),
			drivers: []DriverDemand{{ID: "d1", Cores: 1, MemoryMiB: 512}, {ID: "d2", Cores: 1, MemoryMiB: 512}, {ID: "d3", Cores: 1, MemoryMiB: 512}},
			want:    []string{"d1", "d2"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plan := Schedule(Snapshot{Workers: tc.workers, Drivers: tc.drivers}, newRNG())
			var got []string
			for _, d := range plan.Drivers {
				got = append(got, d.DriverID)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("placed drivers = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestScheduleDealsDriversRoundRobin(t *testing.T) {
	drivers := []DriverDemand{{ID: "d1", Cores: 1, MemoryMiB: 512}, {ID: "d2", Cores: 1, MemoryMiB: 512}, {ID: "d3", Cores: 1, MemoryMiB: 512}}
	plan := Schedule(Snapshot{Workers: idleWorkers(3, 4, 4096), Drivers: drivers}, newRNG())
	perWorker := map[string]int{}
	for _, d := range plan.Drivers {
		perWorker[d.WorkerID]++
	}
	if len(plan.Drivers) != 3 || len(perWorker) != 3 {
		t.Errorf("drivers = %+v, want one on each of the 3 workers", plan.Drivers)
	}
}

func TestScheduleWaitingReasons(t *testing.T) {
	busy := idleWorkers(1, 8, 8192)[0]
	busy.CoresFree = 0
	tests := []struct {
		name    string
		workers []WorkerSlot
		app     AppDemand
		want    string
	}{
		{
			name:    "more cores per executor than any worker has",
			workers: idleWorkers(2, 4, 8192),
			app:     AppDemand{CoresLeft: math.MaxInt32, CoresPerExecutor: 8, MemoryPerExecutorMiB: 1024, ExecutorsLeft: math.MaxInt},
			want:    "requires more resources than any worker",
		},
		{
			name:    "more memory per executor than any worker has",
			workers: idleWorkers(2, 4, 8192),
			app:     AppDemand{CoresLeft: math.MaxInt32, MemoryPerExecutorMiB: 16384, ExecutorsLeft: math.MaxInt},
			want:    "requires more resources than any worker",
		},
		{
			name: "no single worker has both the cores and the memory",
			workers: []WorkerSlot{
				{ID: "cores", Cores: 8, MemoryMiB: 1024, CoresFree: 8, MemoryFreeMiB: 1024},
				{ID: "memory", Cores: 2, MemoryMiB: 16384, CoresFree: 2, MemoryFreeMiB: 16384},
			},
			app:  AppDemand{CoresLeft: math.MaxInt32, CoresPerExecutor: 4, MemoryPerExecutorMiB: 4096, ExecutorsLeft: math.MaxInt},
			want: "requires more resources than any worker",
		},
		{
			name:    "workers big enough but busy",
			workers: []WorkerSlot{busy},
			app:     AppDemand{CoresLeft: math.MaxInt32, MemoryPerExecutorMiB: 1024, ExecutorsLeft: math.MaxInt},
			want:    "waiting for free resources",
		},
		{
			name: "no workers",
			app:  AppDemand{CoresLeft: math.MaxInt32, MemoryPerExecutorMiB: 1024, ExecutorsLeft: math.MaxInt},
			want: "no alive workers",
		},
		{
			name:    "executor limit reached",
			workers: idleWorkers(2, 4, 8192),
			app:     AppDemand{CoresLeft: math.MaxInt32, MemoryPerExecutorMiB: 1024},
			want:    "executor limit reached",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.app.ID = "app"
			plan := Schedule(Snapshot{Workers: tc.workers, Apps: []AppDemand{tc.app}, SpreadOut: true}, newRNG())
			if len(plan.Executors) != 0 {
				t.Errorf("executors = %+v, want none", plan.Executors)
			}
			checkWaiting(t, plan, "app", tc.want)
		})
	}
}

// snapshotGen draws clusters as the property test needs them: 0–20 workers
// with some resources in use, 0–10 apps with and without limits, 0–5 drivers.
func snapshotGen() *rapid.Generator[Snapshot] {
	return rapid.Custom(func(t *rapid.T) Snapshot {
		s := Snapshot{SpreadOut: rapid.Bool().Draw(t, "spreadOut")}
		for i := range rapid.IntRange(0, 20).Draw(t, "workers") {
			cores := rapid.Int32Range(1, 64).Draw(t, "cores")
			memory := rapid.Int64Range(512, 65536).Draw(t, "memory")
			s.Workers = append(s.Workers, WorkerSlot{
				ID:            fmt.Sprintf("w%d", i),
				Cores:         cores,
				MemoryMiB:     memory,
				CoresFree:     rapid.Int32Range(0, cores).Draw(t, "coresFree"),
				MemoryFreeMiB: rapid.Int64Range(0, memory).Draw(t, "memoryFree"),
			})
		}
		for i := range rapid.IntRange(0, 10).Draw(t, "apps") {
			s.Apps = append(s.Apps, AppDemand{
				ID:                   fmt.Sprintf("app%d", i),
				CoresLeft:            rapid.OneOf(rapid.Int32Range(1, 200), rapid.Just[int32](math.MaxInt32)).Draw(t, "coresLeft"),
				CoresPerExecutor:     rapid.Int32Range(0, 8).Draw(t, "coresPerExecutor"),
				MemoryPerExecutorMiB: rapid.Int64Range(128, 8192).Draw(t, "memoryPerExecutor"),
				ExecutorsLeft:        rapid.OneOf(rapid.IntRange(0, 50), rapid.Just(math.MaxInt)).Draw(t, "executorsLeft"),
			})
		}
		for i := range rapid.IntRange(0, 5).Draw(t, "drivers") {
			s.Drivers = append(s.Drivers, DriverDemand{
				ID:        fmt.Sprintf("d%d", i),
				Cores:     rapid.Int32Range(1, 8).Draw(t, "driverCores"),
				MemoryMiB: rapid.Int64Range(256, 8192).Draw(t, "driverMemory"),
			})
		}
		return s
	})
}

func TestScheduleKeepsInvariants(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := snapshotGen().Draw(t, "snapshot")
		before := Snapshot{Workers: slices.Clone(s.Workers), Apps: slices.Clone(s.Apps), Drivers: slices.Clone(s.Drivers)}
		rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed1"), rapid.Uint64().Draw(t, "seed2")))

		plan := Schedule(s, rng)

		if !slices.Equal(s.Workers, before.Workers) || !slices.Equal(s.Apps, before.Apps) || !slices.Equal(s.Drivers, before.Drivers) {
			t.Fatalf("schedule modified its input: %+v, was %+v", s, before)
		}
		workers := map[string]WorkerSlot{}
		for _, w := range s.Workers {
			workers[w.ID] = w
		}
		coresUsed, memoryUsed := map[string]int64{}, map[string]int64{}

		drivers := map[string]DriverDemand{}
		for _, d := range s.Drivers {
			drivers[d.ID] = d
		}
		placedDrivers := map[string]bool{}
		for _, p := range plan.Drivers {
			d, ok := drivers[p.DriverID]
			if !ok || placedDrivers[p.DriverID] {
				t.Fatalf("driver %q placed twice or unknown", p.DriverID)
			}
			placedDrivers[p.DriverID] = true
			coresUsed[p.WorkerID] += int64(d.Cores)
			memoryUsed[p.WorkerID] += d.MemoryMiB
		}

		apps := map[string]AppDemand{}
		for _, a := range s.Apps {
			apps[a.ID] = a
		}
		appCores, appExecutors := map[string]int64{}, map[string]int{}
		appOnWorker := map[[2]string]int{}
		for _, e := range plan.Executors {
			a, ok := apps[e.AppID]
			if !ok {
				t.Fatalf("executor for unknown app %q", e.AppID)
			}
			if e.Cores < 1 || e.MemoryMiB != a.MemoryPerExecutorMiB {
				t.Fatalf("executor %+v: want cores ≥ 1 and %d MiB", e, a.MemoryPerExecutorMiB)
			}
			if a.CoresPerExecutor > 0 && e.Cores != a.CoresPerExecutor {
				t.Fatalf("executor %+v: want exactly %d cores", e, a.CoresPerExecutor)
			}
			appCores[e.AppID] += int64(e.Cores)
			appExecutors[e.AppID]++
			appOnWorker[[2]string{e.AppID, e.WorkerID}]++
			coresUsed[e.WorkerID] += int64(e.Cores)
			memoryUsed[e.WorkerID] += e.MemoryMiB
		}

		for id := range coresUsed {
			w, ok := workers[id]
			if !ok {
				t.Fatalf("placement on unknown worker %q", id)
			}
			if coresUsed[id] > int64(w.CoresFree) || memoryUsed[id] > w.MemoryFreeMiB {
				t.Fatalf("worker %+v over-allocated: %d cores, %d MiB placed", w, coresUsed[id], memoryUsed[id])
			}
		}
		for _, a := range s.Apps {
			if appCores[a.ID] > int64(a.CoresLeft) || appExecutors[a.ID] > a.ExecutorsLeft {
				t.Fatalf("app %+v got %d cores in %d executors", a, appCores[a.ID], appExecutors[a.ID])
			}
			if _, waiting := plan.Waiting[a.ID]; waiting && appExecutors[a.ID] > 0 {
				t.Fatalf("app %s got executors but is waiting: %q", a.ID, plan.Waiting[a.ID])
			}
		}
		for key, n := range appOnWorker {
			if apps[key[0]].CoresPerExecutor == 0 && n > 1 {
				t.Fatalf("app %s without cores per executor got %d executors on worker %s", key[0], n, key[1])
			}
		}
	})
}

func TestDriversArePlacedOnShuffledWorkers(t *testing.T) {
	first := map[string]bool{}
	for seed := range uint64(40) {
		plan := Schedule(Snapshot{Workers: idleWorkers(8, 4, 4096), Drivers: []DriverDemand{{ID: "d", Cores: 1, MemoryMiB: 1}}},
			rand.New(rand.NewPCG(seed, seed)))
		first[plan.Drivers[0].WorkerID] = true
	}
	if len(first) < 4 {
		t.Fatalf("over 40 seeds the one driver landed on %v only; want the workers shuffled", first)
	}
}
