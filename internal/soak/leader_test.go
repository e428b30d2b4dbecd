package soak

import (
	"slices"
	"testing"
	"time"
)

const (
	mA, mB, mC = "http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"
)

func alive(url string) MasterAnswer {
	return MasterAnswer{URL: url, Ready: 200, Status: "ALIVE", Epoch: 5}
}
func standby(url string) MasterAnswer {
	return MasterAnswer{URL: url, Ready: 503, Status: "STANDBY"}
}
func silent(url string) MasterAnswer { return MasterAnswer{URL: url} }

func kinds(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Kind)
	}
	return out
}

func TestCheckRoundAllowsOneLeaderThatEtcdElected(t *testing.T) {
	for _, c := range []struct {
		name  string
		round Round
		want  []string
	}{
		{"one leader, elected", Round{HA: true, EtcdKnown: true, EtcdBefore: mA, EtcdAfter: mA,
			Masters: []MasterAnswer{alive(mA), standby(mB), silent(mC)}}, nil},
		{"no leader", Round{HA: true, EtcdKnown: true, Masters: []MasterAnswer{standby(mA), standby(mB), silent(mC)}}, nil},
		{"elected while the round was asked", Round{HA: true, EtcdKnown: true, EtcdBefore: "", EtcdAfter: mB,
			Masters: []MasterAnswer{standby(mA), alive(mB)}}, nil},
		{"the one master of file mode", Round{Masters: []MasterAnswer{alive(mA)}}, nil},
		{"two ALIVE", Round{HA: true, EtcdKnown: true, EtcdBefore: mB, EtcdAfter: mB,
			Masters: []MasterAnswer{alive(mA), alive(mB), standby(mC)}}, []string{TwoLeaders, ReadyNotElected}},
		{"two leading, one by /readyz alone", Round{HA: true, Masters: []MasterAnswer{alive(mA), {URL: mB, Ready: 200, Status: "RECOVERING"}}},
			[]string{TwoLeaders}},
		{"ready, not elected", Round{HA: true, EtcdKnown: true, EtcdBefore: mB, EtcdAfter: mB,
			Masters: []MasterAnswer{alive(mA), silent(mB)}}, []string{ReadyNotElected}},
		{"ready while etcd elected no one", Round{HA: true, EtcdKnown: true, Masters: []MasterAnswer{alive(mA)}}, []string{ReadyNotElected}},
		{"ready, etcd unread", Round{HA: true, EtcdKnown: false, EtcdBefore: mB, EtcdAfter: mB, Masters: []MasterAnswer{alive(mA)}}, nil},
	} {
		if got := kinds(CheckRound(c.round)); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestEpisodesReportAViolationOnceUntilItClears(t *testing.T) {
	var e Episodes
	two := []Violation{{Kind: TwoLeaders}}
	var got []int
	for _, round := range [][]Violation{two, two, nil, two, append(two, Violation{Kind: ReadyNotElected}), two} {
		got = append(got, len(e.Next(round)))
	}
	if want := []int{1, 0, 0, 1, 1, 0}; !slices.Equal(got, want) {
		t.Fatalf("reported per round %v, want %v", got, want)
	}
}

// samples makes a sample every 250 ms from t0 with presence by pattern:
// '+' present, '-' absent.
func samples(t0 time.Time, pattern string) []Sample {
	var out []Sample
	for i, c := range pattern {
		out = append(out, Sample{At: t0.Add(time.Duration(i) * 250 * time.Millisecond), Present: c == '+'})
	}
	return out
}

func TestNoLeaderSpansReportsStretchesOverTheLimit(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		pattern string
		want    int
	}{
		{"++++++++", 0},
		{"++----++", 0},     // 1 s without a leader
		{"+---------++", 1}, // 2.25 s
		{"++-------", 1},    // still open at the end: 1.5 s
		{"+-------+-------", 2},
	} {
		if got := NoLeaderSpans(samples(t0, c.pattern), time.Second+100*time.Millisecond); len(got) != c.want {
			t.Errorf("%s: %d violations %v, want %d", c.pattern, len(got), got, c.want)
		}
	}
}

func TestFailoversTimeTheFaultsThatLostTheLeadership(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	s := samples(t0, "++++----++++++++++++++++--------+++")
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * 250 * time.Millisecond) }
	faults := []FaultEvent{
		{At: at(3), Target: "master-0", Leadership: true},  // lost at 4, back at 8: 1.25 s
		{At: at(10), Target: "worker-1"},                   // not a leadership fault
		{At: at(12), Target: "master-1", Leadership: true}, // nothing lost within the window
		{At: at(21), Target: "worker-2"},                   // not one, though an outage follows
		{At: at(22), Target: "etcd-0", Leadership: true},   // lost at 24, back at 32: 2.5 s
	}
	got := Failovers(faults, s, time.Second)
	if want := []time.Duration{1250 * time.Millisecond, 2500 * time.Millisecond}; !slices.Equal(got, want) {
		t.Fatalf("failovers %v, want %v", got, want)
	}
	if p := Percentile(got, 50); p != 1250*time.Millisecond {
		t.Errorf("p50 %s", p)
	}
	if p := Percentile(got, 100); p != 2500*time.Millisecond {
		t.Errorf("max %s", p)
	}
	if p := Percentile(nil, 50); p != 0 {
		t.Errorf("p50 of none %s", p)
	}
}
