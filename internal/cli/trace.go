package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/glint-cluster/glint/internal/jaeger"
	"github.com/glint-cluster/glint/pkg/ids"
	"github.com/glint-cluster/glint/pkg/telemetry"
)

func newTraceCommand(g *globals) *cobra.Command {
	var jaegerURL string
	var all bool
	cmd := &cobra.Command{
		Use:   "trace APP_ID",
		Short: "Show an application's launch from its trace in Jaeger: each executor's launch steps, the slowest marked",
		Long: "Show an application's launch from its trace in Jaeger: for each executor, how long each step of its\n" +
			"launch took, the slowest marked, and a line on the traces of its tasks; --all adds every span.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := ids.ValidateApp(args[0]); err != nil {
				return err
			}
			client := &jaeger.Client{URL: jaegerURL}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			appTag := map[string]string{string(telemetry.AppID): args[0]}
			id, err := client.Find(ctx, telemetry.ServiceMaster, appTag)
			if errors.Is(err, jaeger.ErrNoTrace) {
				return fmt.Errorf("find the trace of %s: %w. Either it ran untraced (no OTEL_EXPORTER_OTLP_ENDPOINT), its trace "+
					"was sampled out or is older than Jaeger keeps, or it started moments ago and its first spans are still on "+
					"their way (they are sent in batches every few seconds)", args[0], err)
			}
			if err != nil {
				return fmt.Errorf("find the trace of %s: %w", args[0], err)
			}
			t, err := client.Trace(ctx, id)
			if err != nil {
				return err
			}
			tasks, err := client.Search(ctx, telemetry.ServiceDriver, "makeOffers", appTag, taskTraceLimit)
			if err != nil {
				return fmt.Errorf("find the task traces of %s: %w", args[0], err)
			}
			tree := newSpanTree(t)
			fmt.Fprintf(g.Stdout, "Trace %s of %s: %d spans, %d deep\n", t.TraceID, args[0], len(t.Spans), tree.depth())
			if all {
				fmt.Fprintln(g.Stdout)
				printWaterfall(g.Stdout, tree)
			}
			printLaunches(g.Stdout, tree)
			printFailures(g.Stdout, tree)
			printTaskTraces(g.Stdout, t.TraceID, tasks)
			return nil
		},
	}
	cmd.Flags().StringVar(&jaegerURL, "jaeger", "http://localhost:16686", "Jaeger query URL")
	cmd.Flags().BoolVar(&all, "all", false, "also print every span of the trace as a waterfall")
	return cmd
}

// taskTraceLimit bounds how many task traces glint trace reads.
const taskTraceLimit = 1000

// printTaskTraces summarises the traces of an application's task batches
// (every trace but its own with a makeOffers span of the application) in
// one line.
func printTaskTraces(out io.Writer, app string, traces []jaeger.Trace) {
	n, tasks, spans := 0, 0, 0
	for _, t := range traces {
		if t.TraceID == app {
			continue
		}
		n++
		spans += len(t.Spans)
		for _, s := range t.Spans {
			if v, ok := s.Tag("glint.tasks"); ok && s.OperationName == "makeOffers" {
				k, _ := strconv.Atoi(v)
				tasks += k
			}
		}
	}
	if n == 0 {
		fmt.Fprintln(out, "\nTasks: no task traces (spark.glint.trace.taskSampleRatio traces a share of the task batches after each executor's first task)")
		return
	}
	fmt.Fprintf(out, "\nTasks: %d task traces sampled (%d tasks, %d spans), each linked to its task set's runTasks span\n", n, tasks, spans)
}

// spanTree indexes a trace's spans by id and by parent.
type spanTree struct {
	start    int64
	byID     map[string]*jaeger.Span
	children map[string][]*jaeger.Span
	roots    []*jaeger.Span
}

func newSpanTree(t *jaeger.Trace) *spanTree {
	tree := &spanTree{byID: map[string]*jaeger.Span{}, children: map[string][]*jaeger.Span{}}
	for i := range t.Spans {
		s := &t.Spans[i]
		tree.byID[s.SpanID] = s
		if tree.start == 0 || s.StartTime < tree.start {
			tree.start = s.StartTime
		}
	}
	for _, s := range tree.byID {
		if p := s.Parent(); p != "" && tree.byID[p] != nil {
			tree.children[p] = append(tree.children[p], s)
		} else {
			tree.roots = append(tree.roots, s)
		}
	}
	byStart := func(a, b *jaeger.Span) int { return cmp.Compare(a.StartTime, b.StartTime) }
	slices.SortFunc(tree.roots, byStart)
	for _, c := range tree.children {
		slices.SortFunc(c, byStart)
	}
	return tree
}

// offset is a span's start in milliseconds after the trace's first span.
func (tree *spanTree) offset(s *jaeger.Span) string {
	return fmt.Sprintf("%.1f", float64(s.StartTime-tree.start)/1000)
}

// depth is the number of spans on the trace's longest root-to-leaf path.
func (tree *spanTree) depth() int {
	var walk func(s *jaeger.Span) int
	walk = func(s *jaeger.Span) int {
		d := 0
		for _, c := range tree.children[s.SpanID] {
			d = max(d, walk(c))
		}
		return d + 1
	}
	d := 0
	for _, r := range tree.roots {
		d = max(d, walk(r))
	}
	return d
}

func printWaterfall(out io.Writer, tree *spanTree) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "START ms\tDURATION ms\tSERVICE\tSPAN")
	var walk func(s *jaeger.Span, depth int)
	walk = func(s *jaeger.Span, depth int) {
		mark := ""
		if s.Failed() {
			mark = "  ✗ ERROR"
			if msg, ok := s.Tag("otel.status_description"); ok {
				mark += ": " + msg
			}
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%s\t%s%s%s\n", tree.offset(s), float64(s.Duration)/1000, s.Service,
			strings.Repeat("  ", depth), s.OperationName, mark)
		for _, c := range tree.children[s.SpanID] {
			walk(c, depth+1)
		}
	}
	for _, r := range tree.roots {
		walk(r, 0)
	}
	tw.Flush()
}

// launchPhases name the phases of an executor's launch, each up to the
// start of one step of the trace from the start of the one before: from the
// master's span of the executor (its placement) to the worker's
// LaunchExecutor, its process.start, the executor's main (the end of its
// executor.boot, which starts at the fork), its RetrieveSparkProps and
// RegisterExecutor calls, and the first task it received.
var launchPhases = []string{"LAUNCH EXECUTOR", "PROCESS START", "BOOT", "RETRIEVE PROPS", "REGISTER", "FIRST TASK"}

// printLaunches shows, per executor, how long each phase of its launch took
// (ms), the slowest marked with *, and the total from its placement to its
// first task.
func printLaunches(out io.Writer, tree *spanTree) {
	type row struct {
		executor, worker string
		// at is when each step was reached (µs), 0 if it is not in the
		// trace: one more than there are phases.
		at [7]int64
	}
	start := func(s *jaeger.Span) int64 {
		if s == nil {
			return 0
		}
		return s.StartTime
	}
	var rows []row
	for _, s := range tree.byID {
		exec, ok := s.Tag(string(telemetry.ExecutorID))
		if s.Service != telemetry.ServiceMaster || !ok || s.OperationName != "executor "+exec {
			continue
		}
		r := row{executor: exec}
		r.worker, _ = s.Tag(string(telemetry.WorkerID))
		r.at[0] = s.StartTime
		r.at[1] = start(tree.firstBelow(s, "/LaunchExecutor", telemetry.ServiceWorker))
		r.at[2] = start(tree.firstBelow(s, "process.start", telemetry.ServiceWorker))
		if boot := tree.firstBelow(s, "executor.boot", telemetry.ServiceExecutor); boot != nil {
			r.at[3] = boot.StartTime + boot.Duration
		}
		r.at[4] = start(tree.firstBelow(s, "/RetrieveSparkProps", telemetry.ServiceExecutor))
		r.at[5] = start(tree.firstBelow(s, "/RegisterExecutor", telemetry.ServiceExecutor))
		r.at[6] = start(tree.first(func(x *jaeger.Span) bool {
			e, _ := x.Tag(string(telemetry.ExecutorID))
			return x.Service == telemetry.ServiceExecutor && strings.HasSuffix(x.OperationName, "/LaunchTask") && e == exec
		}))
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		fmt.Fprintln(out, "\nNo executor launches in this trace.")
		return
	}
	slices.SortFunc(rows, func(a, b row) int { return cmp.Compare(a.executor, b.executor) })
	fmt.Fprintln(out, "\nExecutor launches (ms in each phase, the slowest marked *; total is placement to first task)")
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EXECUTOR\tWORKER\t"+strings.Join(launchPhases, "\t")+"\tTOTAL")
	for _, r := range rows {
		cells := []string{r.executor, r.worker}
		phases := make([]int64, len(launchPhases))
		slowest := -1
		for i := range phases {
			from, to := r.at[i], r.at[i+1]
			if from == 0 || to == 0 {
				phases[i] = -1
				continue
			}
			phases[i] = to - from
			if slowest < 0 || phases[i] > phases[slowest] {
				slowest = i
			}
		}
		for i, p := range phases {
			switch {
			case p < 0:
				cells = append(cells, "-")
			case i == slowest:
				cells = append(cells, fmt.Sprintf("%.1f*", float64(p)/1000))
			default:
				cells = append(cells, fmt.Sprintf("%.1f", float64(p)/1000))
			}
		}
		total := "-"
		if last := r.at[len(r.at)-1]; r.at[0] != 0 && last != 0 {
			total = fmt.Sprintf("%.1f", float64(last-r.at[0])/1000)
		}
		fmt.Fprintln(tw, strings.Join(append(cells, total), "\t"))
	}
	tw.Flush()
}

// maxFailuresShown bounds how many failed spans printFailures lists.
const maxFailuresShown = 20

// printFailures lists the trace's failed spans, earliest first, each with
// the executor whose launch it belongs to ("-": none) and its error, so a
// failing launch says why without --all.
func printFailures(out io.Writer, tree *spanTree) {
	var failed []*jaeger.Span
	for _, s := range tree.byID {
		if s.Failed() {
			failed = append(failed, s)
		}
	}
	if len(failed) == 0 {
		return
	}
	slices.SortFunc(failed, func(a, b *jaeger.Span) int { return cmp.Compare(a.StartTime, b.StartTime) })
	fmt.Fprintf(out, "\nFailed steps (%d)\n", len(failed))
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "START ms\tEXECUTOR\tSERVICE\tSTEP\tERROR")
	for _, s := range failed[:min(len(failed), maxFailuresShown)] {
		exec := "-"
		for x := s; x != nil; x = tree.byID[x.Parent()] {
			if e, ok := x.Tag(string(telemetry.ExecutorID)); ok {
				exec = e
				break
			}
		}
		msg, _ := s.Tag("otel.status_description")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", tree.offset(s), exec, s.Service, s.OperationName, msg)
	}
	tw.Flush()
	if len(failed) > maxFailuresShown {
		fmt.Fprintf(out, "and %d more (--all shows every span)\n", len(failed)-maxFailuresShown)
	}
}

// firstBelow returns the earliest descendant of s of service whose operation ends with suffix.
func (tree *spanTree) firstBelow(s *jaeger.Span, suffix, service string) *jaeger.Span {
	var found *jaeger.Span
	var walk func(*jaeger.Span)
	walk = func(x *jaeger.Span) {
		for _, c := range tree.children[x.SpanID] {
			if c.Service == service && strings.HasSuffix(c.OperationName, suffix) && (found == nil || c.StartTime < found.StartTime) {
				found = c
			}
			walk(c)
		}
	}
	walk(s)
	return found
}

// first returns the earliest span for which match holds.
func (tree *spanTree) first(match func(*jaeger.Span) bool) *jaeger.Span {
	var found *jaeger.Span
	for _, s := range tree.byID {
		if match(s) && (found == nil || s.StartTime < found.StartTime) {
			found = s
		}
	}
	return found
}
