// Package dashboards builds Glint's Grafana dashboards in Go: the cluster
// dashboard (workers, capacity, applications, executors) and the launch-latency
// dashboard (executor start, launch phases, schedule and process start, tasks,
// span RED metrics).
//
// The JSON files beside this package are generated from these builders by
// `go run ./dashboards/generate -dir dashboards` and provisioned into Grafana
// from deploy/grafana.
package dashboards

//go:generate go run ./generate -dir .

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
)

// Dashboard uids, which are also the base names of the generated JSON files.
const (
	ClusterUID = "glint-cluster"
	LaunchUID  = "glint-launch"
)

// PrometheusUID is the uid of the Prometheus datasource every query uses, as
// provisioned in deploy/grafana/provisioning/datasources/datasources.yaml.
const PrometheusUID = "prometheus"

// Files returns the JSON of every dashboard, keyed by file name: the
// dashboard's uid plus ".json".
func Files() (map[string][]byte, error) {
	files := map[string][]byte{}
	for _, build := range []func() (dashboard.Dashboard, error){Cluster, Launch} {
		d, err := build()
		if err != nil {
			return nil, err
		}
		b, err := Marshal(d)
		if err != nil {
			return nil, fmt.Errorf("marshal dashboard %s: %w", *d.Uid, err)
		}
		files[*d.Uid+".json"] = b
	}
	return files, nil
}

// Marshal renders a dashboard as the indented JSON Grafana provisions, ending
// in a newline.
func Marshal(d dashboard.Dashboard) ([]byte, error) {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// sampleVariables replaces Grafana's variables with the values
// PrometheusQueries documents. strings.Replacer tries the names in argument
// order, so a name must come before any name it is a prefix of.
var sampleVariables = strings.NewReplacer(
	"$__rate_interval", "1m",
	"$__range", "1h",
	"$service", ".*",
	"$worker", ".*",
)

// PrometheusQueries returns every PromQL expression of both dashboards' panels,
// in panel order and without duplicates, as Grafana would send them to
// Prometheus for a one-hour range with every worker and service selected:
// $__rate_interval becomes 1m, $__range 1h, $worker and $service .* (see
// ExpandVariables).
func PrometheusQueries() ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, build := range []func() (dashboard.Dashboard, error){Cluster, Launch} {
		d, err := build()
		if err != nil {
			return nil, err
		}
		for _, q := range Targets(d) {
			expr := ExpandVariables(q.Expr)
			if !seen[expr] {
				seen[expr] = true
				out = append(out, expr)
			}
		}
	}
	return out, nil
}

// ExpandVariables replaces the Grafana variables the dashboards use in expr
// with the sample values PrometheusQueries documents; any other $name is left
// as it is.
func ExpandVariables(expr string) string { return sampleVariables.Replace(expr) }

// Panels returns a dashboard's panels in order, those inside collapsed rows
// included; rows themselves are left out.
func Panels(d dashboard.Dashboard) []dashboard.Panel {
	var out []dashboard.Panel
	for _, p := range d.Panels {
		switch {
		case p.Panel != nil:
			out = append(out, *p.Panel)
		case p.RowPanel != nil:
			out = append(out, p.RowPanel.Panels...)
		}
	}
	return out
}

// Targets returns the Prometheus queries of every panel of a dashboard, built
// (values) or unmarshaled by the SDK (pointers).
func Targets(d dashboard.Dashboard) []prometheus.Dataquery {
	var out []prometheus.Dataquery
	for _, p := range Panels(d) {
		for _, t := range p.Targets {
			switch q := t.(type) {
			case prometheus.Dataquery:
				out = append(out, q)
			case *prometheus.Dataquery:
				out = append(out, *q)
			}
		}
	}
	return out
}

// prometheusDatasource is the reference every panel, query and variable uses.
func prometheusDatasource() common.DataSourceRef {
	return common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr(PrometheusUID)}
}

// query is a Prometheus range query with a legend.
func query(expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().
		Datasource(prometheusDatasource()).
		Expr(expr).
		LegendFormat(legend).
		Range()
}

// withRefIDs names the queries of one panel A, B, C, … in order.
func withRefIDs(queries []*prometheus.DataqueryBuilder) []cog.Builder[variants.Dataquery] {
	out := make([]cog.Builder[variants.Dataquery], len(queries))
	for i, q := range queries {
		out[i] = q.RefId(string(rune('A' + i)))
	}
	return out
}

// quantileExpr is the q-quantile of a histogram's buckets (a selector such as
// name_bucket{…}) over the rate window, per the by labels.
func quantileExpr(q, buckets string, by ...string) string {
	return fmt.Sprintf("histogram_quantile(%s, sum by (%s) (rate(%s[$__rate_interval])))",
		q, strings.Join(append([]string{"le"}, by...), ", "), buckets)
}

// quantileQueries are p50, p95 and p99 of a histogram over all its series,
// legends p50, p95, p99; the p99 query asks for exemplars, so each point links
// to the trace it measured.
func quantileQueries(buckets string) []*prometheus.DataqueryBuilder {
	return []*prometheus.DataqueryBuilder{
		query(quantileExpr("0.5", buckets), "p50"),
		query(quantileExpr("0.95", buckets), "p95"),
		query(quantileExpr("0.99", buckets), "p99").Exemplar(true),
	}
}

// finish builds a dashboard and numbers its panels and rows 1, 2, … in order,
// so panel ids (which alert rules and links refer to) are stable.
func finish(b *dashboard.DashboardBuilder) (dashboard.Dashboard, error) {
	d, err := b.Build()
	if err != nil {
		return dashboard.Dashboard{}, err
	}
	var id uint32
	for _, p := range d.Panels {
		id++
		switch {
		case p.Panel != nil:
			p.Panel.Id = cog.ToPtr(id)
		case p.RowPanel != nil:
			p.RowPanel.Id = id
			for i := range p.RowPanel.Panels {
				id++
				p.RowPanel.Panels[i].Id = cog.ToPtr(id)
			}
		}
	}
	return d, nil
}

// newDashboard is a read-only, shared-crosshair dashboard tagged glint, with a
// link to the other Glint dashboards.
func newDashboard(uid, title, description, refresh string) *dashboard.DashboardBuilder {
	return dashboard.NewDashboardBuilder(title).
		Uid(uid).
		Description(description).
		Tags([]string{"glint"}).
		Readonly().
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Time("now-1h", "now").
		Refresh(refresh).
		Timezone(common.TimeZoneBrowser).
		Link(dashboard.NewDashboardLinkBuilder("Glint").
			Type(dashboard.DashboardLinkTypeDashboards).
			Tags([]string{"glint"}).
			AsDropdown(true).
			IncludeVars(false).
			KeepTime(true))
}

// multiVariable is a multi-value template variable over a label's values, with
// "All" meaning any value.
func multiVariable(name, label, metric, labelName string) *dashboard.QueryVariableBuilder {
	q := fmt.Sprintf("label_values(%s, %s)", metric, labelName)
	return dashboard.NewQueryVariableBuilder(name).
		Label(label).
		Datasource(prometheusDatasource()).
		Query(dashboard.StringOrMap{String: cog.ToPtr(q)}).
		Definition(q).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortNaturalAsc).
		Multi(true).
		IncludeAll(true).
		AllValue(".*").
		Current(dashboard.VariableOption{
			Selected: cog.ToPtr(true),
			Text:     dashboard.StringOrArrayOfString{ArrayOfString: []string{"All"}},
			Value:    dashboard.StringOrArrayOfString{ArrayOfString: []string{"$__all"}},
		})
}

// thresholds are absolute thresholds: the base color below the first step.
func thresholds(base string, steps ...dashboard.Threshold) *dashboard.ThresholdsConfigBuilder {
	return dashboard.NewThresholdsConfigBuilder().
		Mode(dashboard.ThresholdsModeAbsolute).
		Steps(append([]dashboard.Threshold{{Color: base}}, steps...))
}

// at is a threshold step: color from value up.
func at(value float64, color string) dashboard.Threshold {
	return dashboard.Threshold{Value: cog.ToPtr(value), Color: color}
}
