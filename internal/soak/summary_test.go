package soak

import (
	"strings"
	"testing"
	"time"
)

func TestSummaryPassesOnlyWhenNothingWasFound(t *testing.T) {
	clean := func() *Summary {
		s := NewSummary(ModeFile, 1, time.Minute)
		s.AddOutcome("a", CauseOK, "")
		s.AddOutcome("b", CauseOwn, "")
		return s
	}
	if s := clean(); !s.Passed() {
		t.Fatalf("a clean run failed:\n%s", s.Table())
	}
	for name, spoil := range map[string]func(*Summary){
		"a violation":              func(s *Summary) { s.AddViolation(Violation{TwoLeaders, "a and b"}) },
		"a failure not its own":    func(s *Summary) { s.AddOutcome("c", CauseClientGave, "unavailable") },
		"a wrong answer":           func(s *Summary) { s.AddOutcome("c", CauseWrongAnswer, "3.0") },
		"interrupted":              func(s *Summary) { s.Interrupted = true },
		"a cluster that never ran": func(s *Summary) { s.Error = "the cluster did not start" },
		"no submission":            func(s *Summary) { s.Outcomes = map[Cause]int{} },
	} {
		s := clean()
		spoil(s)
		if s.Passed() {
			t.Errorf("%s: passed:\n%s", name, s.Table())
		}
	}
}

func TestSummaryTableShowsEveryCount(t *testing.T) {
	s := NewSummary(ModeHA, 77, 3*time.Minute)
	s.AddOutcome("soak-ha-0001-client-pi", CauseOK, "")
	s.AddOutcome("soak-ha-0002-cluster-pi", CauseClientGave, "exit 1: unavailable")
	s.AddViolation(Violation{ReadyNotElected, "http://127.0.0.1:1"})
	s.Faults["kill leader"] = 2
	s.Skipped = 1
	s.StepDowns = 1
	s.Executors, s.Drivers = 40, 9
	s.Failovers = []time.Duration{2 * time.Second, 5 * time.Second, 3 * time.Second}
	table := s.Table()
	// Columns are aligned by the longest label: compare words.
	flat := strings.Join(strings.Fields(table), " ")
	for _, want := range []string{
		"soak mode=ha seed=77 duration=3m0s: FAIL",
		"submissions 2",
		"succeeded with the right answer 1",
		"client gave up 1",
		"/readyz 200 from a master etcd has not elected 1",
		"kill leader 2",
		"faults skipped (no process could be hit) 1",
		"n=3 p50=3s max=5s",
		"executors launched (work dirs) 40",
		"cluster-mode drivers launched (work dirs) 9",
		"failure: soak-ha-0002-cluster-pi: client gave up: exit 1: unavailable",
		"violation: /readyz 200 from a master etcd has not elected: http://127.0.0.1:1",
	} {
		if !strings.Contains(flat, want) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}
}
