package soak

import (
	"math/rand/v2"
	"time"
)

// Mode is a shape of cluster the soak runs.
type Mode string

const (
	// ModeFile is one master in --recovery-mode file and three workers.
	ModeFile Mode = "file"
	// ModeHA is three masters in --recovery-mode etcd on a three-member
	// etcd, and three workers given every master's URL.
	ModeHA Mode = "ha"
)

// Role is the kind of process a fault hits.
type Role string

const (
	RoleMaster Role = "master"
	RoleWorker Role = "worker"
	RoleEtcd   Role = "etcd"
)

// Action is what a fault does to its process.
type Action string

const (
	// ActionKill is SIGKILL; the process is started again after the
	// fault's Heal.
	ActionKill Action = "kill"
	// ActionStop is SIGSTOP; SIGCONT follows after the fault's Heal.
	ActionStop Action = "stop"
)

// Fault is one entry of the chaos schedule. Which process it hits is
// decided when it is due (Target), from the cluster as it is then; the
// schedule itself depends on the seed alone.
type Fault struct {
	// At is the fault's time from the start of the run.
	At     time.Duration
	Action Action
	Role   Role
	// Leader says, for a master in HA mode, whether the fault hits the
	// leader (else a standby).
	Leader bool
	// Pick chooses among the candidates: the one at Pick modulo their count.
	Pick int
	// Heal is the time until a killed process is started again or a
	// stopped one continued.
	Heal time.Duration
}

// Kind names the fault as the summary counts it: "kill worker", "stop
// leader", …
func (f Fault) Kind(mode Mode) string {
	target := string(f.Role)
	if f.Role == RoleMaster && mode == ModeHA {
		target = "standby"
		if f.Leader {
			target = "leader"
		}
	}
	return string(f.Action) + " " + target
}

// Timing is when the phases of a run end, measured from its start, and how
// far apart its faults are.
type Timing struct {
	// Total is the run's length (SOAK_MINUTES).
	Total time.Duration
	// FaultsEnd: no fault is injected after it, and every process is
	// brought back.
	FaultsEnd time.Duration
	// SubmitEnd: no submission starts after it; those in flight have until
	// their deadline.
	SubmitEnd time.Duration
	// IntervalMin and IntervalMax bound the time between two faults: 10–30 s
	// for a run of ten minutes or more, scaled down for shorter runs.
	IntervalMin, IntervalMax time.Duration
	// Deadline is how long one submission may take before it is stopped
	// and counted as hung.
	Deadline time.Duration
}

// NewTiming returns the phases of a run of length total: faults end ten
// seconds before submissions do, and submissions a sixth of the run (15 s
// to a minute) before its end.
func NewTiming(total time.Duration) Timing {
	scale := clamp(total.Minutes()/10, 0.25, 1)
	drain := clampDuration(total/6, 15*time.Second, time.Minute)
	submitEnd := max(total-drain, 0)
	return Timing{
		Total:       total,
		SubmitEnd:   submitEnd,
		FaultsEnd:   max(submitEnd-10*time.Second, 0),
		IntervalMin: time.Duration(scale * float64(10*time.Second)),
		IntervalMax: time.Duration(scale * float64(30*time.Second)),
		Deadline:    clampDuration(total/4, 30*time.Second, 90*time.Second),
	}
}

// Heal bounds: a killed process is started again after 1–5 s, a stopped one
// continued after 1–8 s (longer than the worker timeout's 6 s at times, so
// a paused worker is sometimes declared dead and comes back).
const (
	restartMin, restartMax = time.Second, 5 * time.Second
	pauseMin, pauseMax     = time.Second, 8 * time.Second
)

// NewSchedule returns the faults of a run of mode with timing t, from seed
// alone: the same seed gives the same schedule. The first fault comes one
// interval after the start; the last before t.FaultsEnd.
func NewSchedule(seed uint64, mode Mode, t Timing) []Fault {
	rng := rand.New(rand.NewPCG(seed, 1))
	var out []Fault
	at := time.Duration(0)
	for {
		at += between(rng, t.IntervalMin, t.IntervalMax)
		if at >= t.FaultsEnd {
			return out
		}
		f := Fault{At: at, Action: ActionKill, Pick: rng.IntN(1 << 30)}
		if rng.IntN(2) == 0 {
			f.Action = ActionStop
		}
		switch r := rng.IntN(100); {
		case mode == ModeHA && r < 25:
			f.Role = RoleEtcd
		case r < 60:
			f.Role = RoleMaster
			f.Leader = mode == ModeFile || rng.IntN(3) > 0
		default:
			f.Role = RoleWorker
		}
		if f.Action == ActionKill {
			f.Heal = between(rng, restartMin, restartMax)
		} else {
			f.Heal = between(rng, pauseMin, pauseMax)
		}
		out = append(out, f)
	}
}

// Member is a process of the cluster as a due fault sees it.
type Member struct {
	Role Role
	// Up: running and not stopped.
	Up bool
	// Leader: the master that leads.
	Leader bool
}

// Target returns the index in members of the process f hits, or -1 when
// none may be hit. Candidates are the processes of f's role that are up —
// for an HA master the leader or the standbys, as f says (any master that is
// up when no leader is known). A fault never takes down the last worker (one
// with room always stays), more than a minority of etcd (a majority always
// stays), or, of several masters, the last one.
func Target(f Fault, members []Member) int {
	var candidates []int
	total, down := 0, 0
	leaderKnown := false
	for i, m := range members {
		if m.Role != f.Role {
			continue
		}
		total++
		if !m.Up {
			down++
			continue
		}
		if m.Leader {
			leaderKnown = true
		}
		candidates = append(candidates, i)
	}
	if down+1 > maxDown(f.Role, total) {
		return -1
	}
	if f.Role == RoleMaster && total > 1 {
		var chosen []int
		for _, i := range candidates {
			if members[i].Leader == f.Leader || (f.Leader && !leaderKnown) {
				chosen = append(chosen, i)
			}
		}
		candidates = chosen
	}
	if len(candidates) == 0 {
		return -1
	}
	return candidates[f.Pick%len(candidates)]
}

// maxDown is how many of total processes of role may be down at once.
func maxDown(role Role, total int) int {
	switch role {
	case RoleEtcd:
		return (total - 1) / 2
	case RoleMaster:
		return max(1, total-1)
	default:
		return total - 1
	}
}

// between is uniform in [lo, hi].
func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

func clamp(v, lo, hi float64) float64 { return min(max(v, lo), hi) }

func clampDuration(v, lo, hi time.Duration) time.Duration { return min(max(v, lo), hi) }
