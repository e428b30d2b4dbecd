package dashboards

import (
	"fmt"
	"math"
	"strconv"

	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// Metric selectors of the launch dashboard.
const (
	// startBuckets is the master's executor start time, scheduled → process
	// running. The master is always scraped, unlike drivers, which often end
	// before Prometheus' next scrape.
	startBuckets  = "glint_master_executor_start_seconds_bucket"
	launchBuckets = "glint_driver_executor_launch_seconds_bucket"
	// spanCalls and spanBuckets are what the OpenTelemetry Collector's
	// spanmetrics connector exports with namespace traces.span.metrics and
	// histogram unit seconds.
	spanCalls   = `traces_span_metrics_calls_total{service_name=~"$service"}`
	spanErrors  = `traces_span_metrics_calls_total{service_name=~"$service", status_code="STATUS_CODE_ERROR"}`
	spanBuckets = `traces_span_metrics_duration_seconds_bucket{service_name=~"$service"}`
)

// The executor-start objective, as deploy/prometheus/rules/glint.yml records it
// (group glint-executor-start-slo): a start is good within startThreshold
// seconds (a bucket boundary of glint_master_executor_start_seconds, the one
// nearest 2 s), and startObjective of the starts must be good. The burn rates
// are the alerts' (a test checks that the rules agree):
// GlintExecutorStartBudgetBurnFast pages at pageBurnRate over 1 h and 5 m,
// GlintExecutorStartBudgetBurnSlow files a ticket at ticketBurnRate over 6 h
// and 30 m.
const (
	startThreshold = "2.048"
	startObjective = 0.99
	pageBurnRate   = 14.4
	ticketBurnRate = 6
)

// Recording rules of the objective.
const (
	startErrorRatio = "glint:executor_start_errors:ratio_rate" // + window
	startTarget     = "glint:executor_start_objective:ratio"
)

// burnRate is how fast the error budget burns over a window: the share of
// slow starts as a multiple of the share the objective allows.
func burnRate(window string) string {
	return startErrorRatio + window + " / (1 - scalar(" + startTarget + "))"
}

// driverScrapeNote ends the description of every panel of the driver's
// launch phases: they show the breakdown only for drivers that live long
// enough to be scraped.
const driverScrapeNote = " Drivers serve this histogram only while they run, and Prometheus finds and scrapes them through the master's /sd every 15 s in the compose stack, so a short application (a pi run lasts seconds) rarely shows here; the master's executor start time above covers every executor."

// Launch builds the "Glint launch latency" dashboard (uid glint-launch): the
// executor-start objective (target, good starts over the last hour and 30
// days, error budget left, burn rates, which the burn-rate alerts link to); the
// master's executor start time (scheduled → running) as p50/p95/p99, which
// the GlintExecutorLaunchSlow alert links to, and as a heatmap with exemplars
// (each links to the application's trace); the driver's executor-launch phases
// the same way; the master's schedule pass, the worker's process start, task
// durations, and RED panels per service and span from the spanmetrics
// connector. The service variable narrows the span panels.
func Launch() (dashboard.Dashboard, error) {
	b := newDashboard(LaunchUID, "Glint launch latency",
		"How long executors take to start, from the master scheduling them to their process running, and where a launch spends its time, from schedule to first task, with exemplars linking to traces in Jaeger.",
		"30s").
		WithVariable(multiVariable("service", "Service", "traces_span_metrics_calls_total", "service_name")).
		WithRow(dashboard.NewRowBuilder("Executor-start objective: " + percent(startObjective) + " of starts within " + startThreshold + " s")).
		WithPanel(objectiveStat("Objective",
			"The share of executor starts (scheduled to running, as the master measures it) that must take at most "+startThreshold+" s, the bucket boundary of glint_master_executor_start_seconds nearest 2 s. Set in deploy/prometheus/rules/glint.yml, group glint-executor-start-slo.",
			startTarget, thresholds("blue"))).
		WithPanel(objectiveStat("Good starts, last hour",
			"The share of the executors started in the last hour that were running within "+startThreshold+" s of being scheduled.",
			"1 - "+startErrorRatio+"1h", thresholds("red", at(startObjective, "green")))).
		WithPanel(objectiveStat("Good starts, 30 days",
			"The share of the executors started over the objective's 30 days (or as far back as Prometheus keeps data: 7 days in the compose stack) that were running within "+startThreshold+" s of being scheduled.",
			"1 - "+startErrorRatio+"30d", thresholds("red", at(startObjective, "green")))).
		WithPanel(objectiveStat("Error budget left, 30 days",
			"The share of the 30-day error budget (the "+percent(1-startObjective)+" of starts allowed to be slow) not yet spent; below 0 the objective is missed.",
			"1 - "+burnRate("30d"), thresholds("red", at(0.25, "orange"), at(0.5, "green")))).
		WithPanel(graph("Error-budget burn rate",
			fmt.Sprintf("How fast slow starts spend the error budget, per window: 1 spends exactly the 30-day budget in 30 days. GlintExecutorStartBudgetBurnFast pages when both the 1 h and 5 m rates are above %v (the dashed red line); GlintExecutorStartBudgetBurnSlow files a ticket when both the 6 h and 30 m rates are above %v (orange).", pageBurnRate, ticketBurnRate),
			"short", thirdWidth,
			query(burnRate("5m"), "5m"),
			query(burnRate("30m"), "30m"),
			query(burnRate("1h"), "1h"),
			query(burnRate("6h"), "6h")).
			Thresholds(thresholds("green", at(ticketBurnRate, "orange"), at(pageBurnRate, "red"))).
			ThresholdsStyle(common.NewGraphThresholdsStyleConfigBuilder().Mode(common.GraphThresholdsStyleModeDashed))).
		WithRow(dashboard.NewRowBuilder("Executor start, scheduled to running (master)")).
		WithPanel(graph("Executor start time",
			"Time from the master scheduling an executor to its worker reporting the executor's process running, p50/p95/p99 over every executor. GlintExecutorLaunchSlow fires when the p95 over 5 minutes stays above 5 s for 10 minutes. The p99's exemplars link to the applications' traces.",
			"s", fullWidth,
			quantileQueries(startBuckets)...)).
		WithPanel(bucketHeatmap("Executor start time, scheduled to running",
			"Executors by time from the master scheduling them to their process running, per second in each bucket. Exemplars mark single executors: hover one for its application's trace id and open the trace in Jaeger.",
			query(`sum by (le) (rate(`+startBuckets+`[$__rate_interval]))`, "{{le}}"))).
		WithRow(dashboard.NewRowBuilder("Executor launch, by phase (driver)")).
		WithPanel(launchPhases("p50", "0.5", false)).
		WithPanel(launchPhases("p95", "0.95", false)).
		WithPanel(launchPhases("p99", "0.99", true)).
		WithPanel(bucketHeatmap("Launch time, schedule to first task",
			"Executor launches by total time from schedule to first task (phase total), per second in each bucket. Exemplars mark single launches: hover one for its trace id and open the trace in Jaeger."+driverScrapeNote,
			query(`sum by (le) (rate(glint_driver_executor_launch_seconds_bucket{phase="total"}[$__rate_interval]))`, "{{le}}"))).
		WithRow(dashboard.NewRowBuilder("Master and worker")).
		WithPanel(graph("Schedule pass duration",
			"Time one schedule() pass of the master took to place drivers and executors.",
			"s", halfWidth,
			quantileQueries("glint_master_schedule_duration_seconds_bucket")...)).
		WithPanel(graph("Worker process start",
			"Time from a worker receiving LaunchExecutor to the executor's process running: work dir, command, logs, fork/exec.",
			"s", halfWidth,
			quantileQueries("glint_worker_process_start_seconds_bucket")...)).
		WithRow(dashboard.NewRowBuilder("Tasks (driver)")).
		WithPanel(graph("Task duration",
			"Time from a task's launch to its status update.",
			"s", halfWidth,
			quantileQueries("glint_driver_task_duration_seconds_bucket")...)).
		WithPanel(graph("Tasks ended by state",
			"Tasks that ended per second: finished, failed, killed, lost.",
			"ops", halfWidth,
			query(`sum by (state) (rate(glint_driver_tasks_total[$__rate_interval]))`, "{{state}}")).
			OverrideByName("finished", fixedColor("green")).
			OverrideByName("failed", fixedColor("red"))).
		WithRow(dashboard.NewRowBuilder("Spans (OpenTelemetry Collector spanmetrics)")).
		WithPanel(graph("Span rate",
			"Spans per second by service and span name: the R of RED.",
			"reqps", halfWidth,
			query(`sum by (service_name, span_name) (rate(`+spanCalls+`[$__rate_interval]))`, "{{service_name}} {{span_name}}"))).
		WithPanel(graph("Span errors",
			"Spans with status Error per second by service and span name: the E of RED.",
			"reqps", halfWidth,
			query(`sum by (service_name, span_name) (rate(`+spanErrors+`[$__rate_interval]))`, "{{service_name}} {{span_name}}"))).
		WithPanel(spanDuration("p50", "0.5", false)).
		WithPanel(spanDuration("p95", "0.95", false)).
		WithPanel(spanDuration("p99", "0.99", true))
	return finish(b)
}

// launchPhases is one quantile of every launch phase's duration; with
// exemplars, its points link to the traces of single launches.
func launchPhases(name, q string, exemplars bool) *timeseries.PanelBuilder {
	target := query(quantileExpr(q, launchBuckets, "phase"), "{{phase}}")
	if exemplars {
		target.Exemplar(true)
	}
	return graph(fmt.Sprintf("Launch %s by phase", name),
		fmt.Sprintf("The %s of each executor-launch phase the driver measured: schedule (app registered → scheduled), launch (→ worker received), process_start, retrieve_props, register, first_task, and total (scheduled → first task).", name)+driverScrapeNote,
		"s", thirdWidth, target)
}

// spanDuration is one quantile of span durations per service and span: the D
// of RED. With exemplars, its points link to the traces of single spans (the
// connector records a trace id per bucket).
func spanDuration(name, q string, exemplars bool) *timeseries.PanelBuilder {
	target := query(quantileExpr(q, spanBuckets, "service_name", "span_name"), "{{service_name}} {{span_name}}")
	if exemplars {
		target.Exemplar(true)
	}
	return graph(fmt.Sprintf("Span duration %s", name),
		fmt.Sprintf("The %s of span durations by service and span name: the D of RED.", name),
		"s", thirdWidth, target)
}

// objectiveStat is a stat panel of one expression of the objective's recording
// rules, as a percentage, as tall as the burn-rate graph beside it.
func objectiveStat(title, description, expr string, th *dashboard.ThresholdsConfigBuilder) *stat.PanelBuilder {
	return single(title, description, query(expr, title), th).
		Unit("percentunit").
		Decimals(2).
		Height(graphHeight)
}

// percent formats a ratio as a percentage to two decimals at most: 0.99 is
// "99%".
func percent(ratio float64) string {
	return strconv.FormatFloat(math.Round(ratio*10000)/100, 'f', -1, 64) + "%"
}
