package dashboards

import (
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/heatmap"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// Panel sizes on Grafana's 24-column grid.
const (
	fullWidth     = 24
	halfWidth     = 12
	thirdWidth    = 8
	sixthWidth    = 4
	statHeight    = 4
	graphHeight   = 8
	heatmapHeight = 10
)

// graph is a time series panel of Prometheus queries, lines with light fill,
// legend as a list below, tooltip showing every series.
func graph(title, description, unit string, width uint32, queries ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	return timeseries.NewPanelBuilder().
		Title(title).
		Description(description).
		Datasource(prometheusDatasource()).
		Targets(withRefIDs(queries)).
		Unit(unit).
		Min(0).
		Span(width).
		Height(graphHeight).
		LineWidth(1).
		FillOpacity(10).
		ShowPoints(common.VisibilityModeNever).
		Legend(common.NewVizLegendOptionsBuilder().
			DisplayMode(common.LegendDisplayModeList).
			Placement(common.LegendPlacementBottom).
			ShowLegend(true)).
		Tooltip(common.NewVizTooltipOptionsBuilder().
			Mode(common.TooltipDisplayModeMulti).
			Sort(common.SortOrderDescending))
}

// stacked makes a graph stack its series, with a heavier fill.
func stacked(p *timeseries.PanelBuilder) *timeseries.PanelBuilder {
	return p.FillOpacity(40).Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal))
}

// single is a stat panel showing the last value of one Prometheus query, with a
// sparkline, colored by its thresholds.
func single(title, description string, q *prometheus.DataqueryBuilder, th *dashboard.ThresholdsConfigBuilder) *stat.PanelBuilder {
	return stat.NewPanelBuilder().
		Title(title).
		Description(description).
		Datasource(prometheusDatasource()).
		Targets(withRefIDs([]*prometheus.DataqueryBuilder{q})).
		Span(sixthWidth).
		Height(statHeight).
		Decimals(0).
		Thresholds(th).
		ColorMode(common.BigValueColorModeValue).
		Orientation(common.VizOrientationAuto).
		GraphMode(common.BigValueGraphModeArea).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}).Values(false))
}

// bucketHeatmap is a heatmap of a histogram's buckets as Prometheus returns
// them (format heatmap, one row per le), with the query's exemplars drawn on
// top, so a cell's outliers link to their traces.
func bucketHeatmap(title, description string, q *prometheus.DataqueryBuilder) *heatmap.PanelBuilder {
	return heatmap.NewPanelBuilder().
		Title(title).
		Description(description).
		Datasource(prometheusDatasource()).
		Targets(withRefIDs([]*prometheus.DataqueryBuilder{q.
			Format(prometheus.PromQueryFormatHeatmap).
			Exemplar(true)})).
		Span(fullWidth).
		Height(heatmapHeight).
		Calculate(false).
		RowsFrame(heatmap.NewRowsHeatmapOptionsBuilder().Layout(common.HeatmapCellLayoutLe)).
		YAxis(heatmap.NewYAxisConfigBuilder().Unit("s")).
		Color(heatmap.NewHeatmapColorOptionsBuilder().
			Mode(heatmap.HeatmapColorModeScheme).
			Scheme("Oranges").
			Fill("dark-orange").
			Scale(heatmap.HeatmapColorScaleExponential).
			Exponent(0.5).
			Steps(64)).
		CellGap(1).
		ShowValue(common.VisibilityModeNever).
		Tooltip(heatmap.NewHeatmapTooltipBuilder().Mode(common.TooltipDisplayModeSingle).YHistogram(true)).
		ExemplarsColor("rgba(255,0,255,0.7)")
}
