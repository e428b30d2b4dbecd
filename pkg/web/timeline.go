package web

import (
	"fmt"
	"math"
	"time"
)

// Phases are the bars of an executor's launch, in order: each ends at the
// step it is named after and starts where the one before ended (the first
// at the application's registration). They are the phases of the driver's
// glint_driver_executor_launch_seconds and of `glint trace`.
var Phases = [...]string{"schedule", "LaunchExecutor", "process start", "RetrieveSparkProps", "RegisterExecutor", "first task"}

// Launch is one executor's launch: At[0] is when its application registered,
// At[i] when phase Phases[i-1] ended. Zero times are not (yet) known.
type Launch struct {
	Executor int32
	At       [len(Phases) + 1]time.Time
}

// Timeline is the drawing of some launches on one time axis, in SVG units.
type Timeline struct {
	Width, Height int
	Rows          []TimelineRow
	Ticks         []TimelineTick
	// Total is the time the axis spans.
	Total time.Duration
}

// TimelineRow is one executor's row.
type TimelineRow struct {
	Executor int32
	// TextY is the baseline of the row's label.
	TextY int
	Bars  []TimelineBar
}

// TimelineBar is one phase of one launch; Title is shown on hover.
type TimelineBar struct {
	Phase string
	Index int
	X, W  float64
	Y     int
	Title string
}

// TimelineTick is a mark on the time axis.
type TimelineTick struct {
	X     float64
	Label string
}

// Geometry of the drawing: a label column, then the plot.
const (
	timelineLabel  = 56
	timelinePlot   = 640
	timelineRow    = 22
	timelineBar    = 14
	timelineAxis   = 20
	timelineMinBar = 1.5
)

// NewTimeline lays launches out: one row each, a bar for each phase whose
// start and end are known, all on the axis from the earliest start to the
// latest end. Times come from several hosts' clocks: a phase that seems to
// end before it starts is drawn at its start with the least width.
func NewTimeline(launches []Launch) Timeline {
	var first, last time.Time
	for _, l := range launches {
		for _, t := range l.At {
			if t.IsZero() {
				continue
			}
			if first.IsZero() || t.Before(first) {
				first = t
			}
			if t.After(last) {
				last = t
			}
		}
	}
	total := last.Sub(first)
	x := func(t time.Time) float64 {
		if total <= 0 {
			return timelineLabel
		}
		// A tenth of a unit is finer than any screen shows, and keeps the page small.
		return math.Round((timelineLabel+float64(t.Sub(first))/float64(total)*timelinePlot)*10) / 10
	}
	// The right margin leaves room for the last tick's label.
	tl := Timeline{Width: timelineLabel + timelinePlot + 32, Height: timelineAxis + timelineRow*len(launches) + 4, Total: total}
	for i := range 5 {
		d := total * time.Duration(i) / 4
		tl.Ticks = append(tl.Ticks, TimelineTick{X: x(first.Add(d)), Label: FormatDuration(d)})
	}
	for i, l := range launches {
		y := timelineAxis + i*timelineRow
		row := TimelineRow{Executor: l.Executor, TextY: y + 15}
		for p, phase := range Phases {
			from, to := l.At[p], l.At[p+1]
			if from.IsZero() || to.IsZero() {
				continue
			}
			row.Bars = append(row.Bars, TimelineBar{
				Phase: phase, Index: p, X: x(from), W: max(math.Round((x(to)-x(from))*10)/10, timelineMinBar), Y: y + (timelineRow-timelineBar)/2,
				Title: fmt.Sprintf("executor %d %s: %s → %s (%s)", l.Executor, phase,
					from.UTC().Format("15:04:05.000000"), to.UTC().Format("15:04:05.000000"), FormatDuration(to.Sub(from))),
			})
		}
		tl.Rows = append(tl.Rows, row)
	}
	return tl
}
