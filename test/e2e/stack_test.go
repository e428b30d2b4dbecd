package e2e

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"

	"github.com/glint-cluster/glint/dashboards"
	"github.com/glint-cluster/glint/internal/tooltest"
)

// spanMetricPrefix marks the metrics the OpenTelemetry Collector's spanmetrics
// connector makes from Glint's spans; Glint itself does not export them.
const spanMetricPrefix = "traces_span_metrics_"

// stackQueries returns every PromQL expression of the stack — the dashboards,
// Grafana's alert rules, Prometheus' alert and recording rules — and the
// names the recording rules record.
func stackQueries(t testing.TB) (queries map[string]string, recorded map[string]bool) {
	t.Helper()
	queries, recorded = map[string]string{}, map[string]bool{}
	dash, err := dashboards.PrometheusQueries()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range dash {
		queries[q] = "dashboards"
	}
	var grafana struct {
		Groups []struct {
			Rules []struct {
				Title string `yaml:"title"`
				Data  []struct {
					DatasourceUID string `yaml:"datasourceUid"`
					Model         struct {
						Expr string `yaml:"expr"`
					} `yaml:"model"`
				} `yaml:"data"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	tooltest.ReadYAML(t, "../../deploy/grafana/provisioning/alerting/rules.yaml", &grafana)
	for _, g := range grafana.Groups {
		for _, r := range g.Rules {
			for _, d := range r.Data {
				if d.DatasourceUID == "prometheus" {
					queries[d.Model.Expr] = "grafana alert " + r.Title
				}
			}
		}
	}
	var prom struct {
		Groups []struct {
			Rules []struct {
				Alert  string `yaml:"alert"`
				Record string `yaml:"record"`
				Expr   string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	tooltest.ReadYAML(t, "../../deploy/prometheus/rules/glint.yml", &prom)
	for _, g := range prom.Groups {
		for _, r := range g.Rules {
			queries[r.Expr] = "prometheus rule " + r.Alert + r.Record
			if r.Record != "" {
				recorded[r.Record] = true
			}
		}
	}
	if len(queries) < 10 {
		t.Fatalf("only %d queries found in the stack's files", len(queries))
	}
	return queries, recorded
}

// metricNames returns the metric names an expression selects.
func metricNames(t testing.TB, expr string) []string {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		t.Fatalf("parse %q: %v", expr, err)
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok && vs.Name != "" {
			names = append(names, vs.Name)
		}
		return nil
	})
	return names
}

// exportedNames returns the names of the series on a /metrics page.
func exportedNames(page string) map[string]bool {
	names := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(page))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names
}

func TestEveryMetricTheDashboardsAndAlertsNameIsExported(t *testing.T) {
	t.Parallel()
	queries, recorded := stackQueries(t)
	c := startCluster(t, 2)
	// The executors hold their tasks until they were scraped.
	release := filepath.Join(t.TempDir(), "release")
	wait := runInBackground(t, nil, "submit", "--master", c.master.url, "--executor-cores", "1",
		"--executor-memory", "256m", "--total-executor-cores", "2", "--log-level", "warn", "hold", release, "2")
	c.waitFor(t, "executors running", func(s masterJSON) bool {
		return len(s.ActiveApps) == 1 && len(s.ActiveApps[0].Executors) == 2 &&
			s.ActiveApps[0].Executors[0].State == "RUNNING" && s.ActiveApps[0].Executors[1].State == "RUNNING"
	})
	// What Prometheus would scrape: the master, and every target of /sd.
	exported := exportedNames(scrape(t, c.master.url))
	roles := map[string]bool{}
	for _, g := range discover(t, c.master.url) {
		roles[g.Labels["role"]] = true
		for name := range exportedNames(scrape(t, "http://"+g.Targets[0])) {
			exported[name] = true
		}
	}
	if !roles["worker"] || !roles["driver"] || !roles["executor"] {
		t.Fatalf("scraped roles %v, want worker, driver and executor", roles)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}

	var excepted []string
	for expr, where := range queries {
		for _, name := range metricNames(t, expr) {
			switch {
			case strings.HasPrefix(name, spanMetricPrefix):
				excepted = append(excepted, name)
			case recorded[name]:
				// A recording rule's own expression is among the queries,
				// so what it reads is checked there.
			case name == "glint_master_worker_timed_out_timestamp_seconds":
				// Only while a timed-out worker is listed DEAD; the master's
				// tests scrape it after a timeout.
			case !exported[name]:
				t.Errorf("%s uses %s, which no Glint process exports (query %q)", where, name, expr)
			}
		}
	}
	slices.Sort(excepted)
	t.Logf("made by the collector's spanmetrics connector, not by Glint: %v", slices.Compact(excepted))
}
