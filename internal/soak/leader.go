package soak

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"
)

// Violation is a broken invariant.
type Violation struct {
	Kind   string
	Detail string
}

// The kinds of violation.
const (
	TwoLeaders        = "two masters lead at once"
	ReadyNotElected   = "/readyz 200 from a master etcd has not elected"
	NoLeader          = "no master led for too long"
	AppTwice          = "application ran twice"
	DriverTwice       = "driver ran twice"
	FinishedRelaunch  = "finished driver relaunched"
	RanThoughFailed   = "driver ran though its submission failed"
	ExecutorTwice     = "executor ran twice"
	FinalStateChanged = "final state changed"
	LeftBehind        = "process left behind"
	ExitedByItself    = "process exited by itself"
)

// MasterAnswer is what one master said in a round of polls: its /readyz
// status code and its /json status and epoch (0 and "" when it did not
// answer).
type MasterAnswer struct {
	URL    string
	Ready  int
	Status string
	Epoch  int64
}

// Leads reports whether the master says it leads: /readyz 200 or ALIVE.
func (a MasterAnswer) Leads() bool { return a.Ready == http.StatusOK || a.Status == "ALIVE" }

// Round is one round of polls: every master asked at once and, in HA mode,
// etcd's elected master read just before and just after (EtcdKnown when
// both reads answered; "" when no master was elected).
type Round struct {
	At         time.Time
	Masters    []MasterAnswer
	EtcdKnown  bool
	EtcdBefore string
	EtcdAfter  string
	HA         bool
}

// Leaders are the masters that said they lead.
func (r Round) Leaders() []MasterAnswer {
	var out []MasterAnswer
	for _, m := range r.Masters {
		if m.Leads() {
			out = append(out, m)
		}
	}
	return out
}

// CheckRound returns the violations one round shows: more than one master
// that leads, and (HA) a master whose /readyz is 200 though etcd had elected
// another both before and after it answered.
func CheckRound(r Round) []Violation {
	var out []Violation
	if leaders := r.Leaders(); len(leaders) > 1 {
		var names []string
		for _, m := range leaders {
			names = append(names, fmt.Sprintf("%s (/readyz %d, %s, epoch %d)", m.URL, m.Ready, m.Status, m.Epoch))
		}
		out = append(out, Violation{TwoLeaders, strings.Join(names, " and ")})
	}
	if r.HA && r.EtcdKnown {
		for _, m := range r.Masters {
			if m.Ready == http.StatusOK && m.URL != r.EtcdBefore && m.URL != r.EtcdAfter {
				out = append(out, Violation{ReadyNotElected, fmt.Sprintf("%s (%s, epoch %d) while etcd elected %q, then %q",
					m.URL, m.Status, m.Epoch, r.EtcdBefore, r.EtcdAfter)})
			}
		}
	}
	return out
}

// Episodes turns violations found round after round into one per episode:
// a kind is reported again only after a round without it.
type Episodes struct {
	open map[string]bool
}

// Next returns the violations of this round whose kind was not already open.
func (e *Episodes) Next(vs []Violation) []Violation {
	now := map[string]bool{}
	var out []Violation
	for _, v := range vs {
		if !e.open[v.Kind] && !now[v.Kind] {
			out = append(out, v)
		}
		now[v.Kind] = true
	}
	e.open = now
	return out
}

// Sample is whether some master led at a time.
type Sample struct {
	At      time.Time
	Present bool
}

// NoLeaderSpans returns a violation for each stretch of samples longer than
// limit in which no master led (one still open at the last sample counts
// to it).
func NoLeaderSpans(samples []Sample, limit time.Duration) []Violation {
	var out []Violation
	var start time.Time
	absent := false
	check := func(end time.Time) {
		if absent && end.Sub(start) > limit {
			out = append(out, Violation{NoLeader, fmt.Sprintf("none for %s from %s (limit %s)",
				end.Sub(start).Round(100*time.Millisecond), start.Format("15:04:05.0"), limit)})
		}
	}
	for _, s := range samples {
		switch {
		case !s.Present && !absent:
			start, absent = s.At, true
		case s.Present && absent:
			check(s.At)
			absent = false
		}
	}
	if len(samples) > 0 {
		check(samples[len(samples)-1].At)
	}
	return out
}

// FaultEvent is a fault as it was injected.
type FaultEvent struct {
	At time.Time
	// Target names the process hit.
	Target string
	// Leadership: the fault could end the leadership (the leader, the
	// single master, or an etcd member).
	Leadership bool
}

// Failovers returns, for each leadership fault after which no master led
// within window, the time from the fault to a master leading again.
// Faults after which leadership was never lost are not failovers; those
// whose outage had not ended by the last sample are left out (NoLeaderSpans
// reports a long one).
func Failovers(faults []FaultEvent, samples []Sample, window time.Duration) []time.Duration {
	var out []time.Duration
	for _, f := range faults {
		if !f.Leadership {
			continue
		}
		i := sort.Search(len(samples), func(i int) bool { return !samples[i].At.Before(f.At) })
		lost := -1
		for ; i < len(samples) && samples[i].At.Sub(f.At) <= window; i++ {
			if !samples[i].Present {
				lost = i
				break
			}
		}
		if lost < 0 {
			continue
		}
		for j := lost; j < len(samples); j++ {
			if samples[j].Present {
				out = append(out, samples[j].At.Sub(f.At))
				break
			}
		}
	}
	return out
}

// Percentile is the p-th percentile (0–100) of ds by nearest rank; 0 for none.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(p/100*float64(len(s))+0.5) - 1
	return s[min(max(rank, 0), len(s)-1)]
}
