package soak

import (
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Summary is what one run of one mode found.
type Summary struct {
	Mode        Mode
	Seed        uint64
	Duration    time.Duration
	Interrupted bool
	// Error is why the run could not go on (the cluster did not start).
	Error string
	// Outcomes counts the submissions by cause.
	Outcomes   map[Cause]int
	Violations map[string]int
	Faults     map[string]int
	// Skipped counts faults that found no process they could hit.
	Skipped int
	// StepDowns counts HA masters that left the leadership and exited, as
	// they should, and were started again as standbys.
	StepDowns int
	// Executors counts the executors the workers' work dirs show launched;
	// Drivers the cluster-mode drivers.
	Executors, Drivers int
	Failovers          []time.Duration
	// Details say what each failure not the job's own and each violation
	// was, in the order found.
	Details []string
}

// NewSummary returns an empty summary of a run.
func NewSummary(mode Mode, seed uint64, d time.Duration) *Summary {
	return &Summary{Mode: mode, Seed: seed, Duration: d, Outcomes: map[Cause]int{}, Violations: map[string]int{}, Faults: map[string]int{}}
}

// AddViolation counts v and keeps its detail.
func (s *Summary) AddViolation(v Violation) {
	s.Violations[v.Kind]++
	s.Details = append(s.Details, fmt.Sprintf("violation: %s: %s", v.Kind, v.Detail))
}

// AddOutcome counts a submission's outcome, keeping the detail of a cause
// that is not its own.
func (s *Summary) AddOutcome(name string, c Cause, detail string) {
	s.Outcomes[c]++
	if !c.Own() {
		s.Details = append(s.Details, fmt.Sprintf("failure: %s: %s: %s", name, c, detail))
	}
}

// Submissions is how many submissions finished.
func (s *Summary) Submissions() int {
	n := 0
	for _, v := range s.Outcomes {
		n += v
	}
	return n
}

// Failures is how many submissions failed for a reason not their own.
func (s *Summary) Failures() int {
	n := 0
	for c, v := range s.Outcomes {
		if !c.Own() {
			n += v
		}
	}
	return n
}

// Passed reports whether the run found nothing: no violation, no failure
// that was not the job's own, not cut short, and at least one submission.
func (s *Summary) Passed() bool {
	total := 0
	for _, v := range s.Violations {
		total += v
	}
	return !s.Interrupted && s.Error == "" && total == 0 && s.Failures() == 0 && s.Submissions() > 0
}

// Table is the summary as text: counts per row, then the details.
func (s *Summary) Table() string {
	var b strings.Builder
	verdict := "PASS"
	if !s.Passed() {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "soak mode=%s seed=%d duration=%s: %s\n", s.Mode, s.Seed, s.Duration, verdict)
	if s.Error != "" {
		fmt.Fprintf(&b, "  error: %s\n", s.Error)
	}
	if s.Interrupted {
		b.WriteString("  interrupted before the end\n")
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	row := func(label string, n int) { fmt.Fprintf(tw, "  %s\t%d\n", label, n) }
	row("submissions", s.Submissions())
	row("  succeeded with the right answer", s.Outcomes[CauseOK])
	row("  failed as meant (their own reason)", s.Outcomes[CauseOwn])
	row("  unsupervised drivers lost with their worker (Spark's rule)", s.Outcomes[CauseUnsupervised])
	row("  failed, not their own", s.Failures())
	for _, c := range sortedCauses(s.Outcomes) {
		if !c.Own() {
			row("    "+string(c), s.Outcomes[c])
		}
	}
	total := 0
	for _, v := range s.Violations {
		total += v
	}
	row("violations", total)
	for _, k := range sortedKeys(s.Violations) {
		row("  "+k, s.Violations[k])
	}
	faults := 0
	for _, v := range s.Faults {
		faults += v
	}
	row("faults", faults)
	for _, k := range sortedKeys(s.Faults) {
		row("  "+k, s.Faults[k])
	}
	row("faults skipped (no process could be hit)", s.Skipped)
	row("masters that stepped down (restarted)", s.StepDowns)
	row("executors launched (work dirs)", s.Executors)
	row("cluster-mode drivers launched (work dirs)", s.Drivers)
	fmt.Fprintf(tw, "  failovers (fault → a master leads)\tn=%d p50=%s max=%s\n", len(s.Failovers),
		Percentile(s.Failovers, 50).Round(10*time.Millisecond), Percentile(s.Failovers, 100).Round(10*time.Millisecond))
	tw.Flush()
	for _, d := range s.Details {
		fmt.Fprintf(&b, "  - %s\n", d)
	}
	return b.String()
}

func sortedCauses(m map[Cause]int) []Cause {
	var out []Cause
	for c := range m {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
