package dashboards

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"

	"github.com/glint-cluster/glint/internal/tooltest"
)

// exportedMetrics are the metrics Glint's processes export (README.md,
// "Metrics, service discovery and profiles") and the spanmetrics connector's
// metrics (namespace traces.span.metrics, histogram unit seconds), each with
// the labels its series carry.
var exportedMetrics = map[string][]string{
	"glint_master_workers":                            {"state"},
	"glint_master_worker_cores":                       {"worker", "state"},
	"glint_master_worker_memory_bytes":                {"worker", "state"},
	"glint_master_cores":                              {"state"},
	"glint_master_memory_bytes":                       {"state"},
	"glint_master_worker_heartbeat_age_seconds":       {"worker"},
	"glint_master_worker_timeouts_total":              nil,
	"glint_master_apps":                               {"state"},
	"glint_master_drivers":                            {"state"},
	"glint_master_executors":                          {"state"},
	"glint_master_executor_launches_total":            {"result"},
	"glint_master_executor_ends_total":                {"state", "reason"},
	"glint_master_executor_launch_failures_total":     {"step"},
	"glint_master_apps_ended_total":                   {"state"},
	"glint_master_drivers_ended_total":                {"state"},
	"glint_master_worker_timeout_seconds":             nil,
	"glint_master_worker_timed_out_timestamp_seconds": {"worker"},
	"glint_worker_cores":                              {"state"},
	"glint_worker_memory_bytes":                       {"state"},
	"glint_worker_executors":                          {"state"},
	"glint_worker_master_connected":                   nil,
	"glint_worker_heartbeat_failures_total":           nil,
	"glint_worker_children_cpu_seconds_total":         {"process"},
	"glint_worker_children_memory_bytes":              {"process", "kind"},
	"glint_driver_executors_registered":               nil,
	"glint_driver_tasks_total":                        {"state"},
	"glint_executor_tasks_running":                    nil,
	"glint_executor_tasks_total":                      {"state"},
	"traces_span_metrics_calls_total":                 spanLabels,
}

// exportedHistograms are the histograms among them, which Prometheus stores
// as _bucket (with le), _sum and _count series.
var exportedHistograms = map[string][]string{
	"glint_master_schedule_duration_seconds": nil,
	"glint_master_executor_start_seconds":    nil,
	"glint_worker_process_start_seconds":     nil,
	"glint_driver_executor_launch_seconds":   {"phase"},
	"glint_driver_task_duration_seconds":     nil,
	"traces_span_metrics_duration_seconds":   spanLabels,
}

// recordedSeries are the series Prometheus' recording rules make
// (deploy/prometheus/rules/glint.yml), each with its labels: the
// executor-start objective and its error ratios keep the master's target
// labels; the objective itself has none.
var recordedSeries = map[string][]string{
	"glint:executor_starts_good:total":          targetLabels,
	"glint:executor_starts:total":               targetLabels,
	"glint:executor_start_objective:ratio":      {},
	"glint:executor_start_errors:ratio_rate5m":  targetLabels,
	"glint:executor_start_errors:ratio_rate30m": targetLabels,
	"glint:executor_start_errors:ratio_rate1h":  targetLabels,
	"glint:executor_start_errors:ratio_rate6h":  targetLabels,
	"glint:executor_start_errors:ratio_rate30d": targetLabels,
}

// spanLabels are the spanmetrics connector's default dimensions.
var spanLabels = []string{"service_name", "span_name", "span_kind", "status_code"}

// targetLabels are the labels Prometheus adds to every series it scrapes
// through the master's /sd.
var targetLabels = []string{"job", "instance", "role", "worker", "app"}

// seriesLabels returns the labels of a series name Prometheus can hold, and
// whether Glint (or the spanmetrics connector) exports it or a recording rule
// records it.
func seriesLabels(name string) ([]string, bool) {
	if l, ok := recordedSeries[name]; ok {
		return slices.Clone(l), true
	}
	if l, ok := exportedMetrics[name]; ok {
		return append(slices.Clone(l), targetLabels...), true
	}
	for h, l := range exportedHistograms {
		switch name {
		case h + "_bucket":
			return append(append(slices.Clone(l), "le"), targetLabels...), true
		case h + "_sum", h + "_count":
			return append(slices.Clone(l), targetLabels...), true
		}
	}
	return nil, false
}

// checkPromQL parses expr with Prometheus' parser and checks that it selects
// only exported series, matches only labels they carry and aggregates only by
// such labels. It returns the metric names selected.
func checkPromQL(expr string) ([]string, error) {
	ast, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	var names []string
	var problems []string
	parser.Inspect(ast, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			labels, ok := seriesLabels(n.Name)
			if !ok {
				problems = append(problems, fmt.Sprintf("selects %q, which no Glint process exports", n.Name))
				return nil
			}
			names = append(names, n.Name)
			for _, m := range n.LabelMatchers {
				if m.Name != "__name__" && !slices.Contains(labels, m.Name) {
					problems = append(problems, fmt.Sprintf("matches label %q, which %s does not have", m.Name, n.Name))
				}
			}
		case *parser.AggregateExpr:
			var labels []string
			parser.Inspect(n.Expr, func(inner parser.Node, _ []parser.Node) error {
				if vs, ok := inner.(*parser.VectorSelector); ok {
					l, _ := seriesLabels(vs.Name)
					labels = append(labels, l...)
				}
				return nil
			})
			for _, g := range n.Grouping {
				if !slices.Contains(labels, g) {
					problems = append(problems, fmt.Sprintf("aggregates by %q, which the series below it do not have", g))
				}
			}
		}
		return nil
	})
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("selects no metric")
	}
	return names, nil
}

func TestCheckPromQLRejectsWhatGlintDoesNotExport(t *testing.T) {
	for _, tc := range []struct {
		name, expr string
		ok         bool
	}{
		{"gauge with its label", `sum by (worker) (glint_master_worker_cores{state="used"})`, true},
		{"histogram buckets with le and phase", `histogram_quantile(0.5, sum by (le, phase) (rate(glint_driver_executor_launch_seconds_bucket[1m])))`, true},
		{"spanmetrics calls", `rate(traces_span_metrics_calls_total{status_code="STATUS_CODE_ERROR"}[1m])`, true},
		{"unknown metric", `up`, false},
		{"histogram without suffix", `glint_driver_task_duration_seconds`, false},
		{"label the metric lacks", `glint_master_apps{phase="x"}`, false},
		{"grouping by a label the metric lacks", `sum by (phase) (glint_master_apps)`, false},
		{"Grafana variable left in", `rate(glint_driver_tasks_total[$__rate_interval])`, false},
		{"no metric at all", `vector(1)`, false},
		{"recorded series", `glint:executor_start_errors:ratio_rate1h / (1 - scalar(glint:executor_start_objective:ratio))`, true},
		{"label a recorded series lacks", `glint:executor_start_objective:ratio{instance="x"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := checkPromQL(tc.expr)
			if (err == nil) != tc.ok {
				t.Errorf("checkPromQL(%q) = %v, want ok=%v", tc.expr, err, tc.ok)
			}
		})
	}
}

func TestExportedMetricsAreTheREADMEs(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []map[string][]string{exportedMetrics, exportedHistograms} {
		for name := range m {
			if strings.HasPrefix(name, "traces_span_metrics_") {
				continue // the collector's, not Glint's
			}
			if !strings.Contains(string(readme), "`"+name) {
				t.Errorf("README.md does not list %s", name)
			}
		}
	}
}

// recordingRules returns the recording rules of deploy/prometheus/rules/glint.yml,
// name to expression.
func recordingRules(t *testing.T) map[string]string {
	t.Helper()
	var file struct {
		Groups []struct {
			Rules []struct{ Record, Expr string }
		}
	}
	tooltest.ReadYAML(t, "../deploy/prometheus/rules/glint.yml", &file)
	out := map[string]string{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				out[r.Record] = r.Expr
			}
		}
	}
	return out
}

func TestRecordedSeriesAreTheRecordingRules(t *testing.T) {
	rules := recordingRules(t)
	if got, want := slices.Sorted(maps.Keys(recordedSeries)), slices.Sorted(maps.Keys(rules)); !slices.Equal(got, want) {
		t.Errorf("recordedSeries %v, the rules file records %v", got, want)
	}
	for name, expr := range rules {
		// The objective is a constant: it selects no metric.
		if _, err := checkPromQL(expr); err != nil && name != "glint:executor_start_objective:ratio" {
			t.Errorf("recording rule %s: %s: %v", name, expr, err)
		}
	}
}
