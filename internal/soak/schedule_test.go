package soak

import (
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestTheScheduleComesFromTheSeedAlone(t *testing.T) {
	timing := NewTiming(10 * time.Minute)
	a, b := NewSchedule(7, ModeHA, timing), NewSchedule(7, ModeHA, timing)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("two schedules of seed 7 differ:\n%v\n%v", a, b)
	}
	if c := NewSchedule(8, ModeHA, timing); reflect.DeepEqual(a, c) {
		t.Fatalf("seeds 7 and 8 made the same schedule: %v", a)
	}
}

func TestScheduleFaultsFallInsideTheFaultPhaseAtTheirIntervals(t *testing.T) {
	for _, mode := range []Mode{ModeFile, ModeHA} {
		for _, total := range []time.Duration{time.Minute, 3 * time.Minute, 10 * time.Minute} {
			timing := NewTiming(total)
			s := NewSchedule(42, mode, timing)
			if len(s) == 0 {
				t.Fatalf("%s %s: no faults", mode, total)
			}
			last := time.Duration(0)
			roles := map[Role]int{}
			for _, f := range s {
				if gap := f.At - last; gap < timing.IntervalMin || gap > timing.IntervalMax {
					t.Errorf("%s %s: fault at %s comes %s after the one before; want %s–%s", mode, total, f.At, gap, timing.IntervalMin, timing.IntervalMax)
				}
				if f.At >= timing.FaultsEnd {
					t.Errorf("%s %s: fault at %s, after the faults' end %s", mode, total, f.At, timing.FaultsEnd)
				}
				lo, hi := restartMin, restartMax
				if f.Action == ActionStop {
					lo, hi = pauseMin, pauseMax
				}
				if f.Heal < lo || f.Heal > hi {
					t.Errorf("%s: %s healed after %s; want %s–%s", mode, f.Kind(mode), f.Heal, lo, hi)
				}
				if mode == ModeFile && (f.Role == RoleEtcd || (f.Role == RoleMaster && !f.Leader)) {
					t.Errorf("file mode scheduled %s", f.Kind(mode))
				}
				roles[f.Role]++
				last = f.At
			}
			if total == 10*time.Minute && (roles[RoleMaster] == 0 || roles[RoleWorker] == 0 || (mode == ModeHA && roles[RoleEtcd] == 0)) {
				t.Errorf("%s: ten minutes of faults hit only %v", mode, roles)
			}
		}
	}
}

func TestTimingScalesTheIntervalsDownForShortRuns(t *testing.T) {
	for _, c := range []struct {
		total                      time.Duration
		min, max, submit, deadline time.Duration
	}{
		{10 * time.Minute, 10 * time.Second, 30 * time.Second, 9 * time.Minute, 90 * time.Second},
		{time.Minute, 2500 * time.Millisecond, 7500 * time.Millisecond, 45 * time.Second, 30 * time.Second},
	} {
		got := NewTiming(c.total)
		if got.IntervalMin != c.min || got.IntervalMax != c.max || got.SubmitEnd != c.submit || got.Deadline != c.deadline {
			t.Errorf("NewTiming(%s) = %+v; want intervals %s–%s, submissions until %s, deadline %s", c.total, got, c.min, c.max, c.submit, c.deadline)
		}
		if got.FaultsEnd != got.SubmitEnd-10*time.Second {
			t.Errorf("NewTiming(%s): faults end at %s, want 10s before submissions (%s)", c.total, got.FaultsEnd, got.SubmitEnd)
		}
	}
}

// cluster3 is three masters (the second leads), three workers and three
// etcd members, with the ones named down.
func cluster3(down ...int) []Member {
	var ms []Member
	for i, r := range []Role{RoleMaster, RoleMaster, RoleMaster, RoleWorker, RoleWorker, RoleWorker, RoleEtcd, RoleEtcd, RoleEtcd} {
		ms = append(ms, Member{Role: r, Up: true, Leader: i == 1})
	}
	for _, i := range down {
		ms[i].Up = false
	}
	return ms
}

func TestTargetKeepsAWorkerAnEtcdMajorityAndAMaster(t *testing.T) {
	for _, c := range []struct {
		name    string
		fault   Fault
		members []Member
		want    int
	}{
		{"a worker", Fault{Role: RoleWorker, Pick: 4}, cluster3(), 4},
		{"a worker beside one down", Fault{Role: RoleWorker, Pick: 0}, cluster3(3), 4},
		{"not the last worker", Fault{Role: RoleWorker}, cluster3(3, 4), -1},
		{"an etcd member", Fault{Role: RoleEtcd, Pick: 2}, cluster3(), 8},
		{"not a second etcd member", Fault{Role: RoleEtcd}, cluster3(6), -1},
		{"the leader", Fault{Role: RoleMaster, Leader: true, Pick: 5}, cluster3(), 1},
		{"a standby", Fault{Role: RoleMaster, Pick: 1}, cluster3(), 2},
		{"not the last master", Fault{Role: RoleMaster, Leader: true}, cluster3(0, 2), -1},
		{"any master when none is known to lead", Fault{Role: RoleMaster, Leader: true, Pick: 1},
			[]Member{{Role: RoleMaster, Up: true}, {Role: RoleMaster, Up: true}, {Role: RoleMaster}}, 1},
		{"no standby up", Fault{Role: RoleMaster}, cluster3(0, 2), -1},
		{"the one master", Fault{Role: RoleMaster, Leader: true}, []Member{{Role: RoleMaster, Up: true}, {Role: RoleWorker, Up: true}}, 0},
		{"the one master, down", Fault{Role: RoleMaster, Leader: true}, []Member{{Role: RoleMaster}, {Role: RoleWorker, Up: true}}, -1},
	} {
		if got := Target(c.fault, c.members); got != c.want {
			t.Errorf("%s: Target = %d, want %d", c.name, got, c.want)
		}
	}
}

// TestTargetNeverTakesDownMoreThanARoleMayLose: whatever is down already,
// the process Target picks is up and of the fault's role, and taking it
// down leaves a worker, a master and a majority of etcd.
func TestTargetNeverTakesDownMoreThanARoleMayLose(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ms := cluster3()
		for i := range ms {
			ms[i].Up = rapid.Bool().Draw(t, "up")
			ms[i].Leader = ms[i].Role == RoleMaster && rapid.Bool().Draw(t, "leader")
		}
		f := Fault{Role: rapid.SampledFrom([]Role{RoleMaster, RoleWorker, RoleEtcd}).Draw(t, "role"),
			Leader: rapid.Bool().Draw(t, "leader fault"), Pick: rapid.IntRange(0, 1<<20).Draw(t, "pick")}
		i := Target(f, ms)
		if i < 0 {
			return
		}
		if !ms[i].Up || ms[i].Role != f.Role {
			t.Fatalf("Target picked %+v for %+v", ms[i], f)
		}
		ms[i].Up = false
		up := 0
		for _, m := range ms {
			if m.Up && m.Role == f.Role {
				up++
			}
		}
		if least := map[Role]int{RoleWorker: 1, RoleMaster: 1, RoleEtcd: 2}[f.Role]; up < least {
			t.Fatalf("after %+v, %d of the role up; want at least %d", f, up, least)
		}
	})
}
