package dashboards

import (
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
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

// driverScrapeNote ends the description of every panel of the driver's
// launch phases: they show the breakdown only for drivers that live long
// enough to be scraped.
const driverScrapeNote = " Drivers serve this histogram only while they run, and Prometheus finds and scrapes them through the master's /sd every 15 s in the compose stack, so a short application (a pi run lasts seconds) rarely shows here; the master's executor start time above covers every executor."

// Launch builds the "Glint launch latency" dashboard (uid glint-launch): the
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
