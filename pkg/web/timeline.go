package web

import (
	"fmt"
	"math"
	"time"
)

// Phases are the bars of an executor's launch, in order: each ends at the
// step it is named after and starts where the one before ended, the first
// at the executor's request (its application's registration, its driver
// asking for more, or the end of the executor it replaces). "executor boot"
// is the executor process's own start, from the worker's fork to its main;
// a prestarted executor booted before its launch and has none. They are the
// phases of `glint trace`.
var Phases = [...]string{"schedule", "LaunchExecutor", "process start", "executor boot", "RetrieveSparkProps", "RegisterExecutor", "first task"}

// Launch is one executor's launch: At[0] is when it was asked for, At[i]
// when phase Phases[i-1] ended. Zero times are not (yet) known.
type Launch struct {
	Executor int32
	// Cause is why it was asked for: "initial", "dynamic allocation",
	// "replacement"; "" when not known.
	Cause string
	At    [len(Phases) + 1]time.Time
	// Failed, when not empty, is why the launch failed: the executor ended,
	// at Ended, before its first task. The phase it was in is marked.
	Failed string
	Ended  time.Time
}

// Timeline is the drawing of some launches, each row on its own time axis
// from its request, all to one scale, in SVG units.
type Timeline struct {
	Width, Height int
	Rows          []TimelineRow
	Ticks         []TimelineTick
	// Total is the time the axis spans: the longest launch, rounded up to
	// its last tick.
	Total time.Duration
}

// TimelineRow is one executor's row, and its line of the numbers table.
type TimelineRow struct {
	Executor int32
	Cause    string
	// TextY is the baseline of the row's label.
	TextY int
	Bars  []TimelineBar
	// Durations are each phase's duration, "" where it is not known; Total
	// is the launch's, from its request to its last known step.
	Durations [len(Phases)]string
	Total     string
	// Failed is why the launch failed, FailedIn the phase it failed in.
	Failed, FailedIn string
}

// TimelineBar is one phase of one launch; Title is shown on hover. A failed
// bar is the phase a launch failed in, up to its end.
type TimelineBar struct {
	Phase  string
	Index  int
	X, W   float64
	Y      int
	Title  string
	Failed bool
}

// TimelineTick is a mark on the time axis.
type TimelineTick struct {
	X     float64
	Label string
}

// Geometry of the drawing: a label column, then the plot.
const (
	timelineLabel  = 164
	timelinePlot   = 600
	timelineRow    = 22
	timelineBar    = 14
	timelineAxis   = 20
	timelineMinBar = 1.5
	timelineTicks  = 5 // at most, besides 0
)

// NewTimeline lays launches out: one row each, a bar for each phase whose
// start and end are known, measured from the launch's own request. Times
// come from several hosts' clocks: a phase that seems to end before it
// starts is drawn at its start with the least width.
func NewTimeline(launches []Launch) Timeline {
	var longest time.Duration
	starts := make([]time.Time, len(launches))
	for i, l := range launches {
		start, last := span(l)
		starts[i] = start
		longest = max(longest, last.Sub(start))
	}
	// Times no clock of the cluster holds (a year 9999) draw no axis longer
	// than maxSpan, whose round end cannot overflow.
	longest = min(longest, maxSpan)
	step := tickStep(longest)
	total := step * time.Duration(max(1, int(math.Ceil(float64(longest)/float64(step)))))
	x := func(d time.Duration) float64 {
		// A tenth of a unit is finer than any screen shows, and keeps the page small.
		return math.Round((timelineLabel+float64(d)/float64(total)*timelinePlot)*10) / 10
	}
	// The right margin leaves room for the last tick's label.
	tl := Timeline{Width: timelineLabel + timelinePlot + 40, Height: timelineAxis + timelineRow*len(launches) + 4, Total: total}
	for d := time.Duration(0); d <= total; d += step {
		tl.Ticks = append(tl.Ticks, TimelineTick{X: x(d), Label: FormatDuration(d)})
	}
	for i, l := range launches {
		y := timelineAxis + i*timelineRow
		row := TimelineRow{Executor: l.Executor, Cause: l.Cause, TextY: y + 15, Failed: l.Failed}
		start, last := starts[i], starts[i]
		bar := func(p int, from, to time.Time, failed bool) TimelineBar {
			what := Phases[p]
			if failed {
				what += " (failed: " + l.Failed + ")"
			}
			x0, x1 := x(from.Sub(start)), x(to.Sub(start))
			return TimelineBar{
				Phase: Phases[p], Index: p, X: x0, W: max(math.Round((x1-x0)*10)/10, timelineMinBar), Y: y + (timelineRow-timelineBar)/2, Failed: failed,
				Title: fmt.Sprintf("executor %d %s: %s → %s (%s)", l.Executor, what,
					from.UTC().Format("15:04:05.000000"), to.UTC().Format("15:04:05.000000"), FormatDuration(to.Sub(from))),
			}
		}
		// Each phase starts where the last known one before it ended: a
		// launch without a boot goes from its process' start to its
		// RetrieveSparkProps.
		from := l.At[0]
		for p := range Phases {
			to := l.At[p+1]
			if to.IsZero() {
				continue
			}
			if !from.IsZero() {
				row.Bars = append(row.Bars, bar(p, from, to, false))
				row.Durations[p] = FormatDuration(to.Sub(from))
				last = later(last, to)
			}
			from = to
		}
		// A failed launch failed in the phase after its last known step.
		if p := lastKnown(l); l.Failed != "" && p < len(Phases) && !l.At[p].IsZero() {
			end := later(l.Ended, l.At[p])
			row.FailedIn = Phases[p]
			row.Bars = append(row.Bars, bar(p, l.At[p], end, true))
			last = later(last, end)
		}
		row.Total = FormatDuration(last.Sub(start))
		tl.Rows = append(tl.Rows, row)
	}
	return tl
}

// span is the first and last known times of l, its failure's end included.
func span(l Launch) (first, last time.Time) {
	for _, t := range append(l.At[:], l.Ended) {
		if t.IsZero() {
			continue
		}
		if first.IsZero() || t.Before(first) {
			first = t
		}
		last = later(last, t)
	}
	return first, last
}

// lastKnown is the index in l.At of its last known step after which none
// is known: the phase Phases[i] is the one it was in.
func lastKnown(l Launch) int {
	i := 0
	for j, t := range l.At {
		if !t.IsZero() {
			i = j
		}
	}
	return i
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// tickStep is the step of the axis' ticks for a span of d, at most maxSpan:
// 1, 2 or 5 times a power of ten (of a microsecond at least), so that at
// most timelineTicks steps cover d.
func tickStep(d time.Duration) time.Duration {
	for step := time.Microsecond; ; step *= 10 {
		for _, m := range []time.Duration{1, 2, 5} {
			if d <= m*step*timelineTicks {
				return m * step
			}
		}
	}
}

// maxSpan bounds the axis: far beyond any launch, far below where the ticks'
// products overflow.
const maxSpan = 1e5 * time.Hour
