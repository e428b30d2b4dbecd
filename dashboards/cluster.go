package dashboards

import (
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// Cluster builds the "Glint cluster" dashboard (uid glint-cluster) from the
// master's metrics: workers alive and dead, each worker's cores and memory used
// and free (and, from the workers' metrics, used as measured beside granted), heartbeat ages and timeouts, applications, drivers and executors by
// state, and executor launches by result. The worker variable narrows the
// per-worker panels.
func Cluster() (dashboard.Dashboard, error) {
	b := newDashboard(ClusterUID, "Glint cluster",
		"Workers, capacity, applications and executors of a Glint standalone cluster, from the master's /metrics.",
		"10s").
		WithVariable(multiVariable("worker", "Worker", "glint_master_worker_cores", "worker")).
		WithRow(dashboard.NewRowBuilder("Overview")).
		WithPanel(single("Alive workers",
			"Workers registered with the master and heartbeating (state ALIVE).",
			query(`sum(glint_master_workers{state="alive"})`, "alive"),
			thresholds("red", at(1, "green")))).
		WithPanel(single("Dead workers",
			"Workers the master declared DEAD after a missed worker timeout; they stay listed for (15+1) × the timeout.",
			query(`sum(glint_master_workers{state="dead"})`, "dead"),
			thresholds("green", at(1, "red")))).
		WithPanel(single("Waiting applications",
			"Applications registered but given no executors yet (state WAITING).",
			query(`sum(glint_master_apps{state="waiting"})`, "waiting"),
			thresholds("green", at(1, "orange")))).
		WithPanel(single("Running applications",
			"Applications with executors (state RUNNING).",
			query(`sum(glint_master_apps{state="running"})`, "running"),
			thresholds("blue"))).
		WithPanel(single("Worker timeouts",
			"Workers declared DEAD over the dashboard's time range because no heartbeat arrived within the worker timeout.",
			query(`sum(increase(glint_master_worker_timeouts_total[$__range]))`, "timeouts").Instant(),
			thresholds("green", at(0.5, "red"))).
			GraphMode(common.BigValueGraphModeNone)).
		WithPanel(single("Cores in use",
			"Share of the ALIVE workers' cores given to executors and drivers.",
			query(`sum(glint_master_cores{state="used"}) / sum(glint_master_cores)`, "used"),
			thresholds("green", at(0.9, "orange"))).
			Unit("percentunit").
			Decimals(1)).
		WithRow(dashboard.NewRowBuilder("Capacity by worker")).
		WithPanel(stacked(graph("Cores by worker",
			"Each live worker's cores, used by executors and drivers or free, stacked: the top is the cluster's capacity.",
			"short", halfWidth,
			query(`sum by (worker, state) (glint_master_worker_cores{worker=~"$worker"})`, "{{worker}} {{state}}"))).
			Decimals(0)).
		WithPanel(stacked(graph("Memory by worker",
			"Each live worker's memory, used by executors and drivers or free, stacked: the top is the cluster's capacity.",
			"bytes", halfWidth,
			query(`sum by (worker, state) (glint_master_worker_memory_bytes{worker=~"$worker"})`, "{{worker}} {{state}}")))).
		WithRow(dashboard.NewRowBuilder("Workers")).
		WithPanel(graph("Workers by state",
			"Registered workers by state: ALIVE, DEAD (timed out), DECOMMISSIONED, UNKNOWN.",
			"short", thirdWidth,
			query(`sum by (state) (glint_master_workers)`, "{{state}}")).
			Decimals(0).
			OverrideByName("alive", fixedColor("green")).
			OverrideByName("dead", fixedColor("red"))).
		WithPanel(heartbeatAge()).
		WithPanel(graph("Worker timeouts",
			"Workers declared DEAD, counted over each point's rate window.",
			"short", thirdWidth,
			query(`sum(increase(glint_master_worker_timeouts_total[$__rate_interval]))`, "timeouts")).
			DrawStyle(common.GraphDrawStyleBars).
			FillOpacity(80).
			Decimals(0).
			ColorScheme(dashboard.NewFieldColorBuilder().Mode(dashboard.FieldColorModeIdFixed).FixedColor("red"))).
		WithRow(dashboard.NewRowBuilder("Applications and executors")).
		WithPanel(graph("Applications and drivers by state",
			"Active applications (WAITING, RUNNING) and cluster-mode drivers (SUBMITTED, RUNNING).",
			"short", thirdWidth,
			query(`sum by (state) (glint_master_apps)`, "app {{state}}"),
			query(`sum by (state) (glint_master_drivers)`, "driver {{state}}")).
			Decimals(0)).
		WithPanel(stacked(graph("Executors by state",
			"Executors of active applications by state, stacked.",
			"short", thirdWidth,
			query(`sum by (state) (glint_master_executors)`, "{{state}}"))).
			Decimals(0)).
		WithPanel(graph("Executor launches by result",
			"LaunchExecutor commands the master sent to workers per second: ok if the worker accepted, error if it rejected or could not be reached.",
			"ops", thirdWidth,
			query(`sum by (result) (rate(glint_master_executor_launches_total[$__rate_interval]))`, "{{result}}")).
			OverrideByName("ok", fixedColor("green")).
			OverrideByName("error", fixedColor("red"))).
		WithRow(dashboard.NewRowBuilder("Used and granted by worker")).
		WithPanel(graph("CPU used and granted by worker",
			"Cores each live worker's executors and drivers use, measured from their processes, beside the cores granted to them.",
			"short", halfWidth,
			query(`sum by (worker) (rate(glint_worker_children_cpu_seconds_total{worker=~"$worker"}[$__rate_interval]))`, "{{worker}} used"),
			query(`sum by (worker) (glint_master_worker_cores{worker=~"$worker", state="used"})`, "{{worker}} granted"))).
		WithPanel(graph("Memory used and granted by worker",
			"Resident memory of each live worker's executors and drivers, measured from their processes, beside the memory granted to them.",
			"bytes", halfWidth,
			query(`sum by (worker) (glint_worker_children_memory_bytes{worker=~"$worker", kind="current"})`, "{{worker}} used"),
			query(`sum by (worker) (glint_master_worker_memory_bytes{worker=~"$worker", state="used"})`, "{{worker}} granted"))).
		WithRow(dashboard.NewRowBuilder("Failures")).
		WithPanel(graph("Applications and drivers ended by state",
			"Applications and cluster-mode drivers that ended, by final state, counted over each point's rate window. GlintApplicationFailed fires on a FAILED application.",
			"short", halfWidth,
			query(`sum by (state) (increase(glint_master_apps_ended_total[$__rate_interval]))`, "app {{state}}"),
			query(`sum by (state) (increase(glint_master_drivers_ended_total[$__rate_interval]))`, "driver {{state}}")).
			DrawStyle(common.GraphDrawStyleBars).
			Decimals(0).
			OverrideByName("app failed", fixedColor("red")).
			OverrideByName("app finished", fixedColor("green"))).
		WithPanel(graph("Executor launch failures by step",
			"Executors a minute that failed before they ran, by the launch step that failed (request: the worker did not take the launch). GlintExecutorsFailingToStart fires past one a minute for 5 minutes.",
			"short", halfWidth,
			query(`sum by (step) (rate(glint_master_executor_launch_failures_total[$__rate_interval])) * 60`, "{{step}}"))).
		WithPanel(graph("Executor ends by reason",
			"Executors that ended, by final state and reason (exited, killed, lost_worker, launch_failed, oom), counted over each point's rate window.",
			"short", halfWidth,
			query(`sum by (state, reason) (increase(glint_master_executor_ends_total[$__rate_interval]))`, "{{state}} {{reason}}")).
			DrawStyle(common.GraphDrawStyleBars).
			Decimals(0)).
		WithPanel(graph("Time since each worker timed out",
			"For each worker the master lists DEAD after its timeout, how long ago it was declared so. GlintWorkerTimedOut fires for 5 minutes after.",
			"s", halfWidth,
			query(`time() - max by (worker) (glint_master_worker_timed_out_timestamp_seconds{worker=~"$worker"})`, "{{worker}}")))
	return finish(b)
}

// heartbeatAge is the per-worker heartbeat age beside the master's worker
// timeout and half of it, where the alert fires, drawn dashed.
func heartbeatAge() *timeseries.PanelBuilder {
	dashed := []dashboard.DynamicConfigValue{{Id: "custom.lineStyle", Value: map[string]any{"fill": "dash", "dash": []int{10, 10}}}}
	return graph("Heartbeat age by worker",
		"Seconds since each live worker's last heartbeat, beside the master's worker timeout and half of it. Workers heartbeat every timeout/4; past half the timeout GlintWorkerHeartbeatLate fires, past the timeout the master declares the worker DEAD.",
		"s", thirdWidth,
		query(`max by (worker) (glint_master_worker_heartbeat_age_seconds{worker=~"$worker"})`, "{{worker}}"),
		query(`max(glint_master_worker_timeout_seconds)`, "timeout"),
		query(`max(glint_master_worker_timeout_seconds) / 2`, "late")).
		OverrideByName("timeout", append(fixedColor("red"), dashed...)).
		OverrideByName("late", append(fixedColor("orange"), dashed...))
}

// fixedColor is the override giving a series one color.
func fixedColor(color string) []dashboard.DynamicConfigValue {
	return []dashboard.DynamicConfigValue{{
		Id:    "color",
		Value: map[string]any{"mode": "fixed", "fixedColor": color},
	}}
}
