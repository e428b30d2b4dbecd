package driver

import (
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// executors lists n busy executors (ids from 0), and idle ones with
// the idle times given.
func executors(busy int, idle ...time.Time) []allocated {
	var out []allocated
	for i := range busy {
		out = append(out, allocated{id: int32(i)})
	}
	for i, since := range idle {
		out = append(out, allocated{id: int32(busy + i), idleSince: since})
	}
	return out
}

func allocSettings(min, max, initial int) allocationSettings {
	return allocationSettings{enabled: true, min: min, max: max, initial: initial,
		idleTimeout: time.Minute, backlogTimeout: time.Second, sustainedBacklog: time.Second}
}

func TestAllocatorRampsUpOneTwoFourPerBacklogIntervalWithinMaxAndNeed(t *testing.T) {
	a := newAllocator(allocSettings(0, 10, 1))
	var targets []int
	have := 1
	for s := range 7 {
		target, release := a.update(t0.Add(time.Duration(s)*time.Second), demand{pending: 100, running: have, tasksPerExecutor: 1, executors: executors(have)})
		if len(release) > 0 {
			t.Fatalf("second %d: released %v while busy", s, release)
		}
		if target >= 0 {
			targets = append(targets, target)
			have = target
		}
	}
	// 1 → 2 (+1) → 4 (+2) → 8 (+4) → 10 (the max, +2 of 8) and no more.
	if want := []int{2, 4, 8, 10}; !slices.Equal(targets, want) {
		t.Errorf("targets %v, want %v", targets, want)
	}
	// Never more than the tasks can use: 3 tasks of 2 per executor need 2.
	b := newAllocator(allocSettings(0, 10, 0))
	b.update(t0, demand{pending: 3, tasksPerExecutor: 2})
	for s := 1; s < 5; s++ {
		b.update(t0.Add(time.Duration(s)*time.Second), demand{pending: 3, tasksPerExecutor: 2, executors: executors(b.target)})
	}
	if b.target != 2 {
		t.Errorf("target %d for 3 tasks of 2 per executor, want 2", b.target)
	}
}

func TestAllocatorWaitsForTheBacklogTimeoutsBeforeEachRaise(t *testing.T) {
	st := allocSettings(0, 10, 0)
	st.sustainedBacklog = 5 * time.Second
	a := newAllocator(st)
	raisedAt := map[time.Duration]int{}
	for ms := time.Duration(0); ms <= 12*time.Second; ms += 100 * time.Millisecond {
		if target, _ := a.update(t0.Add(ms), demand{pending: 100, tasksPerExecutor: 1, executors: executors(a.target)}); target >= 0 {
			raisedAt[ms] = target
		}
	}
	// The first raise after schedulerBacklogTimeout, the next ones every
	// sustainedSchedulerBacklogTimeout.
	want := map[time.Duration]int{time.Second: 1, 6 * time.Second: 3, 11 * time.Second: 7}
	if len(raisedAt) != len(want) {
		t.Fatalf("raised %v, want %v", raisedAt, want)
	}
	for at, target := range want {
		if raisedAt[at] != target {
			t.Errorf("raised %v, want %v", raisedAt, want)
		}
	}
	// The backlog clears: the growth starts over.
	a.update(t0.Add(13*time.Second), demand{running: 7, tasksPerExecutor: 1, executors: executors(7)})
	if !a.addAt.IsZero() || a.toAdd != 1 {
		t.Errorf("after the backlog cleared: next raise at %v adding %d; want none, then 1", a.addAt, a.toAdd)
	}
}

func TestAllocatorLowersTheTargetAndReleasesIdleExecutorsAfterTheTimeout(t *testing.T) {
	a := newAllocator(allocSettings(1, 10, 4))
	a.initializing = false
	idle := t0
	// Two of four executors run the only two tasks; two idle since t0.
	target, release := a.update(t0.Add(59*time.Second), demand{running: 2, tasksPerExecutor: 1, executors: executors(2, idle, idle)})
	if target != 2 || len(release) != 0 {
		t.Errorf("before the idle timeout: target %d, release %v; want 2 and none", target, release)
	}
	target, release = a.update(t0.Add(60*time.Second), demand{running: 2, tasksPerExecutor: 1, executors: executors(2, idle, idle)})
	if target != -1 || !slices.Equal(release, []int32{2, 3}) {
		t.Errorf("at the idle timeout: target %d, release %v; want unchanged and [2 3]", target, release)
	}
	// Idle executors beyond the target go, not those the target keeps.
	b := newAllocator(allocSettings(0, 10, 2))
	b.initializing = false
	_, release = b.update(t0.Add(time.Minute), demand{pending: 1, running: 1, tasksPerExecutor: 1, executors: executors(1, idle, idle)})
	if !slices.Equal(release, []int32{1}) {
		t.Errorf("target 2 with three executors, two idle: release %v, want one, [1]", release)
	}
	// Nothing runs: the target falls to min, and the last executor stays.
	target, release = a.update(t0.Add(2*time.Minute), demand{tasksPerExecutor: 1, executors: executors(0, idle, idle)})
	if target != 1 || !slices.Equal(release, []int32{0}) {
		t.Errorf("all idle: target %d, release %v; want min 1 and one of the two", target, release)
	}
}

func TestAllocatorKeepsInitialExecutorsUntilTheFirstJobOrAnIdleTimeout(t *testing.T) {
	a := newAllocator(allocSettings(0, 10, 3))
	if target, release := a.update(t0, demand{tasksPerExecutor: 1, executors: executors(0, t0, t0, t0)}); target != -1 || release != nil {
		t.Errorf("initializing: target %d, release %v; want the initial 3 kept", target, release)
	}
	// An idle timeout ends the initial period; the target falls at once and
	// the idle executors go.
	a.update(t0.Add(time.Minute), demand{tasksPerExecutor: 1, executors: executors(0, t0, t0, t0)})
	target, release := a.update(t0.Add(time.Minute+100*time.Millisecond), demand{tasksPerExecutor: 1, executors: executors(0, t0, t0, t0)})
	if target != 0 || len(release) != 3 {
		t.Errorf("after an idle timeout: target %d, release %v; want 0 and all three", target, release)
	}
}

func TestBadDynamicAllocationPropertiesAreRejected(t *testing.T) {
	for _, conf := range []map[string]string{
		{confDynamicAllocation: "yes please"},
		{confMinExecutors: "-1"},
		{confMaxExecutors: "0"},
		{confMinExecutors: "5", confMaxExecutors: "2"},
		{confInitialExecutors: "9", confMaxExecutors: "2"},
		{confIdleTimeout: "soon"},
		{confBacklogTimeout: "-1s"},
	} {
		if _, err := parseAllocation(conf); err == nil || !strings.Contains(err.Error(), "--conf spark.dynamicAllocation.") {
			t.Errorf("%v: got %v, want a --conf error", conf, err)
		}
	}
	st, err := parseAllocation(map[string]string{confDynamicAllocation: "true", confMinExecutors: "2", confBacklogTimeout: "3"})
	if err != nil || !st.enabled || st.initial != 2 || st.idleTimeout != time.Minute || st.sustainedBacklog != 3*time.Second {
		t.Errorf("got %+v, %v; want enabled, initial = min, Spark's idle timeout, sustained = backlog", st, err)
	}
}
