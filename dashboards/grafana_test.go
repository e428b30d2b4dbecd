package dashboards

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/glint-cluster/glint/internal/tooltest"
)

// grafanaDir is deploy/grafana, which the compose file mounts into Grafana.
const grafanaDir = "../deploy/grafana"

// exprDatasourceUID is the uid Grafana gives its server-side expressions.
const exprDatasourceUID = "__expr__"

// readINI reads grafana.ini into section → key → value. Keys before any
// section are in section "".
func readINI(t *testing.T, name string) map[string]map[string]string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	ini := map[string]map[string]string{"": {}}
	section := ""
	s := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; s.Scan(); n++ {
		line := strings.TrimSpace(s.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.TrimSpace(line[1 : len(line)-1])
			if ini[section] == nil {
				ini[section] = map[string]string{}
			}
		default:
			key, value, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("%s:%d: %q is neither a section, a key = value nor a comment", name, n, line)
			}
			ini[section][strings.TrimSpace(key)] = strings.TrimSpace(value)
		}
	}
	return ini
}

// decodeYAML reads a provisioning file into v, failing on any field v does
// not declare, so a misspelt key cannot pass unnoticed.
func decodeYAML(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// datasourcesFile is provisioning/datasources/*.yaml.
type datasourcesFile struct {
	APIVersion  int `yaml:"apiVersion"`
	Datasources []struct {
		Name      string `yaml:"name"`
		Type      string `yaml:"type"`
		UID       string `yaml:"uid"`
		Access    string `yaml:"access"`
		URL       string `yaml:"url"`
		IsDefault bool   `yaml:"isDefault"`
		Editable  bool   `yaml:"editable"`
		JSONData  struct {
			HTTPMethod                  string `yaml:"httpMethod"`
			ExemplarTraceIDDestinations []struct {
				Name            string `yaml:"name"`
				DatasourceUID   string `yaml:"datasourceUid"`
				URL             string `yaml:"url"`
				URLDisplayLabel string `yaml:"urlDisplayLabel"`
			} `yaml:"exemplarTraceIdDestinations"`
		} `yaml:"jsonData"`
	} `yaml:"datasources"`
}

// dashboardsFile is provisioning/dashboards/*.yaml.
type dashboardsFile struct {
	APIVersion int `yaml:"apiVersion"`
	Providers  []struct {
		Name                  string `yaml:"name"`
		OrgID                 int    `yaml:"orgId"`
		Folder                string `yaml:"folder"`
		Type                  string `yaml:"type"`
		DisableDeletion       bool   `yaml:"disableDeletion"`
		AllowUIUpdates        bool   `yaml:"allowUiUpdates"`
		UpdateIntervalSeconds int    `yaml:"updateIntervalSeconds"`
		Options               struct {
			Path                      string `yaml:"path"`
			FoldersFromFilesStructure bool   `yaml:"foldersFromFilesStructure"`
		} `yaml:"options"`
	} `yaml:"providers"`
}

// alertingFile is any file in provisioning/alerting: rule groups, contact
// points and notification policies, as Grafana's file provisioning reads them.
type alertingFile struct {
	APIVersion    int            `yaml:"apiVersion"`
	Groups        []ruleGroup    `yaml:"groups"`
	ContactPoints []contactPoint `yaml:"contactPoints"`
	Policies      []policy       `yaml:"policies"`
}

type ruleGroup struct {
	OrgID    int         `yaml:"orgId"`
	Name     string      `yaml:"name"`
	Folder   string      `yaml:"folder"`
	Interval string      `yaml:"interval"`
	Rules    []alertRule `yaml:"rules"`
}

type alertRule struct {
	UID          string            `yaml:"uid"`
	Title        string            `yaml:"title"`
	Condition    string            `yaml:"condition"`
	Data         []alertQuery      `yaml:"data"`
	DashboardUID string            `yaml:"dashboardUid"`
	PanelID      int               `yaml:"panelId"`
	NoDataState  string            `yaml:"noDataState"`
	ExecErrState string            `yaml:"execErrState"`
	For          string            `yaml:"for"`
	Labels       map[string]string `yaml:"labels"`
	Annotations  map[string]string `yaml:"annotations"`
	IsPaused     bool              `yaml:"isPaused"`
}

type alertQuery struct {
	RefID             string `yaml:"refId"`
	RelativeTimeRange struct {
		From int `yaml:"from"`
		To   int `yaml:"to"`
	} `yaml:"relativeTimeRange"`
	DatasourceUID string `yaml:"datasourceUid"`
	Model         struct {
		RefID         string        `yaml:"refId"`
		Datasource    datasourceRef `yaml:"datasource"`
		Expr          string        `yaml:"expr"`
		Instant       bool          `yaml:"instant"`
		Range         bool          `yaml:"range"`
		IntervalMs    int           `yaml:"intervalMs"`
		MaxDataPoints int           `yaml:"maxDataPoints"`
		Type          string        `yaml:"type"`
		Expression    string        `yaml:"expression"`
		Reducer       string        `yaml:"reducer"`
		Settings      struct {
			Mode string `yaml:"mode"`
		} `yaml:"settings"`
		Conditions []struct {
			Evaluator struct {
				Type   string    `yaml:"type"`
				Params []float64 `yaml:"params"`
			} `yaml:"evaluator"`
		} `yaml:"conditions"`
	} `yaml:"model"`
}

type contactPoint struct {
	OrgID     int    `yaml:"orgId"`
	Name      string `yaml:"name"`
	Receivers []struct {
		UID                   string            `yaml:"uid"`
		Type                  string            `yaml:"type"`
		DisableResolveMessage bool              `yaml:"disableResolveMessage"`
		Settings              map[string]string `yaml:"settings"`
	} `yaml:"receivers"`
}

type policy struct {
	OrgID          int      `yaml:"orgId"`
	Receiver       string   `yaml:"receiver"`
	GroupBy        []string `yaml:"group_by"`
	GroupWait      string   `yaml:"group_wait"`
	GroupInterval  string   `yaml:"group_interval"`
	RepeatInterval string   `yaml:"repeat_interval"`
}

// provisioningFiles returns the YAML files of one provisioning directory.
func provisioningFiles(t *testing.T, kind string) []string {
	t.Helper()
	var files []string
	for _, ext := range []string{"*.yaml", "*.yml"} {
		m, err := filepath.Glob(filepath.Join(grafanaDir, "provisioning", kind, ext))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) == 0 {
		t.Fatalf("no provisioning files in %s", filepath.Join(grafanaDir, "provisioning", kind))
	}
	return files
}

// provisionedDatasources reads every datasource file: uid → type.
func provisionedDatasources(t *testing.T) map[string]string {
	t.Helper()
	uids := map[string]string{}
	for _, name := range provisioningFiles(t, "datasources") {
		var f datasourcesFile
		decodeYAML(t, name, &f)
		for _, ds := range f.Datasources {
			uids[ds.UID] = ds.Type
		}
	}
	return uids
}

// alerting reads every file of provisioning/alerting into one.
func alerting(t *testing.T) alertingFile {
	t.Helper()
	var all alertingFile
	for _, name := range provisioningFiles(t, "alerting") {
		var f alertingFile
		decodeYAML(t, name, &f)
		if f.APIVersion != 1 {
			t.Errorf("%s: apiVersion %d, want 1", name, f.APIVersion)
		}
		all.Groups = append(all.Groups, f.Groups...)
		all.ContactPoints = append(all.ContactPoints, f.ContactPoints...)
		all.Policies = append(all.Policies, f.Policies...)
	}
	return all
}

func TestGrafanaINIGivesAnonymousViewersTheClusterDashboardAndAlerting(t *testing.T) {
	ini := readINI(t, filepath.Join(grafanaDir, "grafana.ini"))
	for _, tc := range []struct{ section, key, want string }{
		{"auth.anonymous", "enabled", "true"},
		{"auth.anonymous", "org_role", "Viewer"},
		{"dashboards", "default_home_dashboard_path", "/var/lib/grafana/dashboards/" + ClusterUID + ".json"},
		{"unified_alerting", "enabled", "true"},
		{"paths", "provisioning", "/etc/grafana/provisioning"},
	} {
		if got := ini[tc.section][tc.key]; got != tc.want {
			t.Errorf("[%s] %s = %q, want %q", tc.section, tc.key, got, tc.want)
		}
	}
}

func TestDatasourcesAreProvisionedWithUIDTypeAndURL(t *testing.T) {
	want := map[string]struct{ typ, url string }{
		"prometheus": {"prometheus", "http://prometheus:9090"},
		"jaeger":     {"jaeger", "http://jaeger:16686"},
		"pyroscope":  {"grafana-pyroscope-datasource", "http://pyroscope:4040"},
	}
	seen := map[string]bool{}
	var defaults []string
	for _, name := range provisioningFiles(t, "datasources") {
		var f datasourcesFile
		decodeYAML(t, name, &f)
		if f.APIVersion != 1 {
			t.Errorf("%s: apiVersion %d, want 1", name, f.APIVersion)
		}
		for _, ds := range f.Datasources {
			if ds.Name == "" || ds.UID == "" || ds.Type == "" || ds.URL == "" {
				t.Errorf("%s: datasource %+v lacks a name, uid, type or url", name, ds)
			}
			if seen[ds.UID] {
				t.Errorf("%s: uid %s provisioned twice", name, ds.UID)
			}
			seen[ds.UID] = true
			if w, ok := want[ds.UID]; ok && (ds.Type != w.typ || ds.URL != w.url) {
				t.Errorf("datasource %s: type %s url %s, want %s %s", ds.UID, ds.Type, ds.URL, w.typ, w.url)
			}
			if ds.IsDefault {
				defaults = append(defaults, ds.UID)
			}
		}
	}
	for uid := range want {
		if !seen[uid] {
			t.Errorf("datasource %s is not provisioned", uid)
		}
	}
	if !slices.Equal(defaults, []string{PrometheusUID}) {
		t.Errorf("default datasources %v, want [%s]", defaults, PrometheusUID)
	}
}

func TestExemplarTraceIDsLinkToAProvisionedJaeger(t *testing.T) {
	uids := provisionedDatasources(t)
	links := 0
	for _, name := range provisioningFiles(t, "datasources") {
		var f datasourcesFile
		decodeYAML(t, name, &f)
		for _, ds := range f.Datasources {
			for _, d := range ds.JSONData.ExemplarTraceIDDestinations {
				links++
				if ds.Type != "prometheus" {
					t.Errorf("%s: exemplar destinations on a %s datasource", ds.UID, ds.Type)
				}
				if d.Name != "trace_id" {
					t.Errorf("%s: exemplar label %q, want trace_id (Glint's exemplar label)", ds.UID, d.Name)
				}
				if uids[d.DatasourceUID] != "jaeger" {
					t.Errorf("%s: exemplars link to datasource %q, which is not a provisioned Jaeger", ds.UID, d.DatasourceUID)
				}
			}
		}
	}
	if links == 0 {
		t.Error("no exemplar trace-id destination is provisioned")
	}
}

func TestDashboardProviderReadsWhereTheHomeDashboardIs(t *testing.T) {
	home := readINI(t, filepath.Join(grafanaDir, "grafana.ini"))["dashboards"]["default_home_dashboard_path"]
	var paths []string
	for _, name := range provisioningFiles(t, "dashboards") {
		var f dashboardsFile
		decodeYAML(t, name, &f)
		if f.APIVersion != 1 {
			t.Errorf("%s: apiVersion %d, want 1", name, f.APIVersion)
		}
		for _, p := range f.Providers {
			if p.Name == "" || p.Type != "file" || p.Options.Path == "" {
				t.Errorf("%s: provider %+v is not a named file provider with a path", name, p)
			}
			paths = append(paths, p.Options.Path)
		}
	}
	if !slices.Contains(paths, path.Dir(home)) {
		t.Errorf("home dashboard %s is in none of the providers' paths %v", home, paths)
	}
	// The compose file mounts this directory at the providers' path.
	if d := readRendered(t, path.Base(home)); d.UID != ClusterUID {
		t.Errorf("home dashboard %s has uid %q, want %q", home, d.UID, ClusterUID)
	}
}

// datasourceUIDs collects the uid of every "datasource" object in a JSON
// document: panels, queries, variables, annotations.
func datasourceUIDs(v any, out map[string]bool) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if ds, ok := e.(map[string]any); ok && k == "datasource" {
				if uid, ok := ds["uid"].(string); ok {
					out[uid] = true
				}
			}
			datasourceUIDs(e, out)
		}
	case []any:
		for _, e := range v {
			datasourceUIDs(e, out)
		}
	}
}

func TestDashboardsReferOnlyToProvisionedDatasources(t *testing.T) {
	provisioned := provisionedDatasources(t)
	for _, uid := range []string{ClusterUID, LaunchUID} {
		b, err := os.ReadFile(uid + ".json")
		if err != nil {
			t.Fatal(err)
		}
		var doc any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		refs := map[string]bool{}
		datasourceUIDs(doc, refs)
		if len(refs) == 0 {
			t.Errorf("%s refers to no datasource", uid)
		}
		for ref := range refs {
			if _, ok := provisioned[ref]; !ok {
				t.Errorf("%s refers to datasource %q, which is not provisioned", uid, ref)
			}
		}
	}
}

// mathRef is a query a Grafana math expression reads: $A or ${A}.
var mathRef = regexp.MustCompile(`\$\{?([A-Za-z][A-Za-z0-9_]*)\}?`)

// The burn-rate alerts are Prometheus' (deploy/prometheus/rules/glint.yml):
// the same windows and burn rates, read from the same recording rules, which
// the launch dashboard's burn-rate panel graphs with the same thresholds.
func TestBurnRateAlertsAreThePrometheusRules(t *testing.T) {
	a := alerting(t)
	var prom struct {
		Groups []struct {
			Rules []struct{ Alert, Record, Expr string }
		}
	}
	tooltest.ReadYAML(t, "../deploy/prometheus/rules/glint.yml", &prom)
	promExpr := map[string]string{}
	for _, g := range prom.Groups {
		for _, r := range g.Rules {
			promExpr[r.Alert+r.Record] = r.Expr
		}
	}
	if good := promExpr["glint:executor_starts_good:total"]; !strings.Contains(good, `le="`+startThreshold+`"`) {
		t.Errorf("glint:executor_starts_good:total is %q, want le=%q as the dashboard says", good, startThreshold)
	}
	if target := promExpr[startTarget]; target != fmt.Sprintf("vector(%v)", startObjective) {
		t.Errorf("%s is %q, want vector(%v) as the dashboard says", startTarget, target, startObjective)
	}
	for _, tc := range []struct {
		title       string
		long, short string
		rate        float64
	}{
		{"GlintExecutorStartBudgetBurnFast", "1h", "5m", pageBurnRate},
		{"GlintExecutorStartBudgetBurnSlow", "6h", "30m", ticketBurnRate},
	} {
		t.Run(tc.title, func(t *testing.T) {
			// Prometheus: both windows' error ratios over rate × the budget.
			for _, w := range []string{tc.long, tc.short} {
				want := fmt.Sprintf("%s%s > %v * (1 - scalar(%s))", startErrorRatio, w, tc.rate, startTarget)
				if !strings.Contains(promExpr[tc.title], want) {
					t.Errorf("Prometheus' %s is %q, want it to hold %q", tc.title, promExpr[tc.title], want)
				}
			}
			// Grafana: each window's burn rate, reduced, both over rate.
			var rule *alertRule
			for _, g := range a.Groups {
				for i, r := range g.Rules {
					if r.Title == tc.title {
						rule = &g.Rules[i]
					}
				}
			}
			if rule == nil {
				t.Fatalf("Grafana has no rule %s", tc.title)
			}
			queries := map[string]alertQuery{}
			for _, q := range rule.Data {
				queries[q.RefID] = q
			}
			cond := queries[rule.Condition]
			if cond.Model.Type != "math" {
				t.Fatalf("condition %s is %q, want math", rule.Condition, cond.Model.Type)
			}
			refs := mathRef.FindAllStringSubmatch(cond.Model.Expression, -1)
			if len(refs) != 2 || cond.Model.Expression != fmt.Sprintf("$%s > %v && $%s > %v", refs[0][1], tc.rate, refs[1][1], tc.rate) {
				t.Fatalf("condition %q, want both reductions over %v", cond.Model.Expression, tc.rate)
			}
			for i, w := range []string{tc.long, tc.short} {
				reduced := queries[refs[i][1]]
				if reduced.Model.Type != "reduce" || reduced.Model.Reducer != "last" {
					t.Errorf("$%s is %s %s, want reduce last", refs[i][1], reduced.Model.Type, reduced.Model.Reducer)
				}
				if got, want := queries[reduced.Model.Expression].Model.Expr, burnRate(w); got != want {
					t.Errorf("$%s reduces %q, want %q", refs[i][1], got, want)
				}
			}
			if rule.For != "0s" {
				t.Errorf("for %q, want 0s: the short window ends the alert, none delays it", rule.For)
			}
		})
	}
	launch, err := Launch()
	if err != nil {
		t.Fatal(err)
	}
	p := findPanel(t, launch, "Error-budget burn rate")
	var values []float64
	for _, s := range p.FieldConfig.Defaults.Thresholds.Steps {
		if s.Value != nil {
			values = append(values, *s.Value)
		}
	}
	if !slices.Equal(values, []float64{ticketBurnRate, pageBurnRate}) {
		t.Errorf("burn-rate panel thresholds %v, want [%v %v]", values, ticketBurnRate, pageBurnRate)
	}
}

// The Grafana rules alert on what Prometheus' do (glint.yml): the timeout
// per worker for 5 minutes, heartbeats late past half the master's own
// timeout, failed applications, executors failing to start over one a minute.
func TestAlertRulesAreTheGlintAlerts(t *testing.T) {
	a := alerting(t)
	for _, tc := range []struct {
		title     string
		expr      string
		op        string
		threshold float64
		forTime   time.Duration
	}{
		{"GlintWorkerTimedOut", `time() - max by (worker) (max_over_time(glint_master_worker_timed_out_timestamp_seconds[5m]))`, "lt", 300, 0},
		{"GlintWorkerHeartbeatLate", `max by (worker) (glint_master_worker_heartbeat_age_seconds) / scalar(max(glint_master_worker_timeout_seconds))`, "gt", 0.5, 0},
		{"GlintAppsWaiting", `glint_master_apps{state="waiting"}`, "gt", 0, 5 * time.Minute},
		{"GlintExecutorLaunchSlow", `histogram_quantile(0.95, sum by (le) (rate(glint_master_executor_start_seconds_bucket[5m])))`, "gt", 5, 10 * time.Minute},
		{"GlintApplicationFailed", `sum(increase(glint_master_apps_ended_total{state="failed"}[5m]))`, "gt", 0, 0},
		{"GlintExecutorsFailingToStart", `sum(rate(glint_master_executor_launch_failures_total[5m])) * 60`, "gt", 1, 5 * time.Minute},
	} {
		t.Run(tc.title, func(t *testing.T) {
			var rules []alertRule
			for _, g := range a.Groups {
				for _, r := range g.Rules {
					if r.Title == tc.title {
						rules = append(rules, r)
						if g.Folder != "Glint" {
							t.Errorf("in folder %q, want Glint", g.Folder)
						}
					}
				}
			}
			if len(rules) != 1 {
				t.Fatalf("%d rules titled %s, want 1", len(rules), tc.title)
			}
			r := rules[0]
			queries := map[string]alertQuery{}
			for _, q := range r.Data {
				queries[q.RefID] = q
			}
			var expr string
			for _, q := range r.Data {
				if q.DatasourceUID == PrometheusUID {
					expr = q.Model.Expr
				}
			}
			if expr != tc.expr {
				t.Errorf("query %q, want %q", expr, tc.expr)
			}
			// The condition is a threshold on a reduction of the query.
			cond := queries[r.Condition]
			if cond.Model.Type != "threshold" || len(cond.Model.Conditions) != 1 {
				t.Fatalf("condition %s is %q with %d conditions, want one threshold", r.Condition, cond.Model.Type, len(cond.Model.Conditions))
			}
			ev := cond.Model.Conditions[0].Evaluator
			if ev.Type != tc.op || !slices.Equal(ev.Params, []float64{tc.threshold}) {
				t.Errorf("threshold %s %v, want %s [%v]", ev.Type, ev.Params, tc.op, tc.threshold)
			}
			if reduced := queries[cond.Model.Expression]; reduced.Model.Type != "reduce" || queries[reduced.Model.Expression].Model.Expr != tc.expr {
				t.Errorf("threshold compares %s (%s), want a reduction of the Prometheus query", cond.Model.Expression, reduced.Model.Type)
			}
			if d, err := model.ParseDuration(r.For); err != nil || time.Duration(d) != tc.forTime {
				t.Errorf("for %q, want %v", r.For, tc.forTime)
			}
		})
	}
}

func TestAlertRulesAreWellFormed(t *testing.T) {
	a := alerting(t)
	provisioned := provisionedDatasources(t)
	panels := map[string]map[int]renderedPanel{}
	for _, uid := range []string{ClusterUID, LaunchUID} {
		panels[uid] = map[int]renderedPanel{}
		for _, p := range readRendered(t, uid+".json").Panels {
			panels[uid][p.ID] = p
		}
	}
	uids := map[string]bool{}
	for _, g := range a.Groups {
		if g.Name == "" || g.Folder == "" {
			t.Errorf("group %+v lacks a name or folder", g)
		}
		if d, err := model.ParseDuration(g.Interval); err != nil || time.Duration(d)%(10*time.Second) != 0 {
			t.Errorf("group %s: interval %q is not a multiple of 10s", g.Name, g.Interval)
		}
		for _, r := range g.Rules {
			t.Run(r.Title, func(t *testing.T) {
				if r.UID == "" || len(r.UID) > 40 || uids[r.UID] {
					t.Errorf("uid %q is empty, longer than 40 or repeated", r.UID)
				}
				uids[r.UID] = true
				for _, a := range []string{"summary", "description"} {
					if strings.TrimSpace(r.Annotations[a]) == "" {
						t.Errorf("no %s annotation", a)
					}
				}
				if !slices.Contains([]string{"OK", "NoData", "Alerting", "KeepLast"}, r.NoDataState) ||
					!slices.Contains([]string{"OK", "Error", "Alerting", "KeepLast"}, r.ExecErrState) {
					t.Errorf("noDataState %q, execErrState %q", r.NoDataState, r.ExecErrState)
				}
				if _, err := model.ParseDuration(r.For); err != nil {
					t.Errorf("for %q: %v", r.For, err)
				}
				refs := map[string]bool{}
				var metrics []string
				for _, q := range r.Data {
					if q.RefID == "" || q.Model.RefID != q.RefID || refs[q.RefID] {
						t.Errorf("query refId %q (model %q) is empty, mismatched or repeated", q.RefID, q.Model.RefID)
					}
					switch {
					case q.DatasourceUID == exprDatasourceUID:
						if !slices.Contains([]string{"reduce", "threshold", "math", "resample", "classic_conditions"}, q.Model.Type) {
							t.Errorf("expression %s has type %q", q.RefID, q.Model.Type)
						}
						// A math expression reads $A, $B, …; the others name one query.
						reads := []string{q.Model.Expression}
						if q.Model.Type == "math" {
							reads = nil
							for _, m := range mathRef.FindAllStringSubmatch(q.Model.Expression, -1) {
								reads = append(reads, m[1])
							}
						}
						if len(reads) == 0 {
							t.Errorf("expression %s reads no query: %q", q.RefID, q.Model.Expression)
						}
						for _, ref := range reads {
							if !refs[ref] {
								t.Errorf("expression %s reads %q, which no earlier query defines", q.RefID, ref)
							}
						}
					case provisioned[q.DatasourceUID] == "prometheus":
						if q.Model.Datasource.UID != q.DatasourceUID {
							t.Errorf("query %s: model datasource %q, want %q", q.RefID, q.Model.Datasource.UID, q.DatasourceUID)
						}
						m, err := checkPromQL(q.Model.Expr)
						if err != nil {
							t.Errorf("query %s: %s: %v", q.RefID, q.Model.Expr, err)
						}
						metrics = append(metrics, m...)
					default:
						t.Errorf("query %s: datasource %q is neither a provisioned Prometheus nor %s", q.RefID, q.DatasourceUID, exprDatasourceUID)
					}
					refs[q.RefID] = true
				}
				if !refs[r.Condition] {
					t.Errorf("condition %q is none of the queries", r.Condition)
				}
				if len(metrics) == 0 {
					t.Error("no Prometheus query")
				}
				// The rule's state shows on a panel graphing what it alerts on.
				p, ok := panels[r.DashboardUID][r.PanelID]
				if !ok || p.Type != "timeseries" {
					t.Fatalf("dashboard %q panel %d is not a time series panel", r.DashboardUID, r.PanelID)
				}
				shown := false
				for _, q := range p.Targets {
					for _, m := range metrics {
						shown = shown || strings.Contains(q.Expr, m)
					}
				}
				if !shown {
					t.Errorf("panel %q does not query %v", p.Title, metrics)
				}
			})
		}
	}
}

func TestAlertsGoToAWebhookFromTheEnvironment(t *testing.T) {
	a := alerting(t)
	receivers := map[string]bool{}
	for _, cp := range a.ContactPoints {
		for _, r := range cp.Receivers {
			if r.UID == "" || r.Type != "webhook" {
				t.Errorf("contact point %s: receiver uid %q type %q, want a webhook", cp.Name, r.UID, r.Type)
			}
			// Grafana expands $NAME and ${NAME} in contact point settings as
			// os.Expand does; $$ is a literal $.
			url := os.Expand(strings.ReplaceAll(r.Settings["url"], "$$", "\x00"), func(name string) string {
				if name == "GLINT_ALERT_WEBHOOK_URL" {
					return "http://hooks.example/glint"
				}
				t.Errorf("contact point %s: url reads environment variable %q", cp.Name, name)
				return ""
			})
			if url != "http://hooks.example/glint" {
				t.Errorf("contact point %s: url %q does not come from GLINT_ALERT_WEBHOOK_URL", cp.Name, r.Settings["url"])
			}
		}
		receivers[cp.Name] = true
	}
	if len(a.Policies) != 1 {
		t.Fatalf("%d notification policies, want 1", len(a.Policies))
	}
	if p := a.Policies[0]; !receivers[p.Receiver] {
		t.Errorf("policy routes to %q, which is no provisioned contact point", p.Receiver)
	}
}
