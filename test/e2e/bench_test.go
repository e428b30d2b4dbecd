package e2e

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/glint-cluster/glint/internal/benchtable"
	"github.com/glint-cluster/glint/internal/floor"
	"github.com/glint-cluster/glint/internal/servicetest"
	"github.com/glint-cluster/glint/internal/tooltest"
	"github.com/glint-cluster/glint/pkg/app"
	"github.com/glint-cluster/glint/pkg/builtin"
	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry"
	"github.com/glint-cluster/glint/pkg/telemetry/otlp"
	"github.com/glint-cluster/glint/services/driver"
)

// The rows of make bench measured on whole clusters (cmd/glint-bench runs
// them; BENCHMARKS.md says how). Each is a Test that skips unless the
// harness runs it, and reports ratios and rates measured in one run.

// benchCluster is a cluster of the launch rows with the CPU it used: this
// process's during the cluster's turns (it runs the drivers), and that of the
// cluster's processes since the row started (startCPU).
type benchCluster struct {
	*testCluster
	tp         trace.TracerProvider
	selfCPU    time.Duration
	cpuAtStart time.Duration
}

// benchGroup is identical clusters that take turns. One run's identical
// clusters differ from one another, whatever is measured on them (where the
// scheduler keeps their processes), by as much as a row's target allows, so
// rows that compare two kinds of cluster, or a cluster with the floor, take
// turns over several of each.
type benchGroup struct {
	clusters []*benchCluster
	turn     int
}

// groupOf starts n clusters with start.
func groupOf(n int, start func() *benchCluster) *benchGroup {
	g := &benchGroup{}
	for range n {
		g.clusters = append(g.clusters, start())
	}
	return g
}

// next is the cluster whose turn it is.
func (g *benchGroup) next() *benchCluster {
	c := g.clusters[g.turn%len(g.clusters)]
	g.turn++
	return c
}

// startCPU starts measuring the CPU of g's clusters' processes.
func (g *benchGroup) startCPU(t testing.TB) {
	for _, c := range g.clusters {
		c.cpuAtStart = c.procsCPU(t)
	}
}

// stopCPU ends g's row: it stops g's clusters and returns the CPU g used
// since startCPU. That is all its clusters' processes used until they
// exited — executors included, and the spans a traced process exports
// whenever its batch is due or as it exits — and this process's during the
// clusters' turns and while it flushes the spans of their drivers.
func (g *benchGroup) stopCPU(t testing.TB) time.Duration {
	var total time.Duration
	for _, c := range g.clusters {
		if tp, ok := c.tp.(interface{ ForceFlush(context.Context) error }); ok {
			c.measure(t, func() {
				if err := tp.ForceFlush(context.Background()); err != nil {
					t.Error(err)
				}
			})
		}
		total += c.selfCPU - c.cpuAtStart
		for _, p := range append(slices.Clone(c.workers), c.master) {
			p.stop(t)
			total += p.cmd.ProcessState.UserTime() + p.cmd.ProcessState.SystemTime() // and its reaped children's
		}
	}
	return total
}

// benchClusters is how many clusters of each kind a group has: one in quick
// mode.
func benchClusters(quick bool) int {
	if quick {
		return 1
	}
	return 3
}

// tracing is a real Jaeger and the tracer provider of the traced clusters'
// drivers, which rows start groups of clusters against (groups).
type tracing struct {
	otlp string
	tp   trace.TracerProvider
}

func startTracing(t testing.TB) tracing {
	j := startJaeger(t)
	return tracing{otlp: j.otlp, tp: tracedDrivers(t, j)}
}

// groups starts two groups of n identical two-worker clusters, one exporting
// every span to tr's Jaeger with the exporter's defaults, as deployed (and
// its drivers, in this process, too), and one with tracing off; workers have
// cores cores each.
func (tr tracing) groups(t testing.TB, n, cores int, workerArgs ...string) (off, on *benchGroup) {
	off = groupOf(n, func() *benchCluster {
		return &benchCluster{testCluster: startSizedCluster(t, nil, 2, cores, workerArgs), tp: noop.NewTracerProvider()}
	})
	on = groupOf(n, func() *benchCluster {
		return &benchCluster{testCluster: startSizedCluster(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + tr.otlp}, 2, cores, workerArgs), tp: tr.tp}
	})
	for _, c := range off.clusters {
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", c.master.cmd.Process.Pid))
		if err != nil || bytes.Contains(env, []byte("OTEL_EXPORTER_OTLP")) {
			t.Fatalf("an untraced cluster's master has OTEL_EXPORTER_OTLP… in its environment (%v)", err)
		}
	}
	return off, on
}

// tracedDrivers is the tracer provider of the traced clusters' drivers (in
// this process), made as every glint process makes its own: from the OTEL
// variables, set only while it is made, as the processes of every cluster
// inherit this process's environment — the untraced ones too. It exports
// only when flushed (stopCPU), so that its exports count as the traced
// clusters' CPU, whichever cluster's turn it is.
func tracedDrivers(t testing.TB, j *jaegerServer) trace.TracerProvider {
	env := map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": j.otlp, "OTEL_BSP_SCHEDULE_DELAY": "3600000",
		"OTEL_BSP_MAX_QUEUE_SIZE": "1000000", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "1000000",
	}
	for k, v := range env {
		os.Setenv(k, v)
	}
	tp, shutdown, err := telemetry.NewTracerProvider(context.Background(), telemetry.ServiceDriver, otlp.Exporter)
	for k := range env {
		os.Unsetenv(k)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = shutdown(context.Background()) })
	return tp
}

// measure runs f, adding the CPU this process used meanwhile to c.selfCPU.
func (c *benchCluster) measure(t testing.TB, f func()) {
	before := selfCPU(t)
	f()
	c.selfCPU += selfCPU(t) - before
}

// procsCPU is the CPU c's processes used so far: master, workers, the
// executors the workers reaped and those they run.
func (c *benchCluster) procsCPU(t testing.TB) time.Duration {
	var total time.Duration
	for _, p := range append([]*proc{c.master}, c.workers...) {
		cpu, err := procCPU(p.cmd.Process.Pid, true)
		if err != nil {
			t.Fatal(err)
		}
		total += cpu
	}
	for _, w := range c.workers {
		for _, pid := range childrenOf(w.cmd.Process.Pid) {
			if cpu, err := procCPU(pid, false); err == nil { // one that just ended is in its worker's
				total += cpu
			}
		}
	}
	return total
}

// procCPU is the user and system time of pid, and of the children it reaped
// if reaped.
func procCPU(pid int, reaped bool) (time.Duration, error) {
	fields, err := tooltest.ProcStat(pid)
	if err != nil {
		return 0, err
	}
	if len(fields) < 15 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the command name, want 15", pid, len(fields))
	}
	times := fields[11:13] // utime, stime
	if reaped {
		times = fields[11:15] // and cutime, cstime
	}
	var ticks int64
	for _, f := range times {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil // USER_HZ is 100 on Linux
}

func selfCPU(t testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runOnExecutors runs a with args in an in-process driver on n one-core
// executors of c, all registered before it starts, in a submit span of c's
// tracer provider, and returns the driver and when it started once c's
// cores are free again.
func runOnExecutors(t testing.TB, c *benchCluster, n int, a *app.App, args ...string) (*driver.Driver, time.Time) {
	t.Helper()
	d := benchDriver(t, c, n, a, args...)
	ctx, span := c.tp.Tracer("bench").Start(context.Background(), "submit")
	start := time.Now()
	err := d.Run(ctx)
	span.End()
	if err != nil {
		t.Fatal(err)
	}
	c.waitForCoresFree(t)
	return d, start
}

// benchDriver is an in-process driver of a with args on n one-core executors
// of c, which runs a once all registered.
func benchDriver(t testing.TB, c *benchCluster, n int, a *app.App, args ...string) *driver.Driver {
	t.Helper()
	var d *driver.Driver
	// The worker's launch times reach the driver with the master's
	// ExecutorUpdated, which may come after the executor registered.
	launched := &app.App{Name: a.Name, Tasks: a.Tasks, Run: func(ctx context.Context, ac app.Context, args []string) error {
		if !tooltest.Poll(30*time.Second, time.Millisecond, func() bool { return allLaunched(d.Timelines(), n) }) {
			return fmt.Errorf("no launch times from the master after 30 s: %+v", d.Timelines())
		}
		return a.Run(ctx, ac, args)
	}}
	d, err := servicetest.NewDriver(t, driver.Config{
		Masters: []string{c.master.url}, App: launched, Args: args, ExecutorCores: 1, MaxCores: int32(n), ExecutorMemoryMiB: 64,
		ExecutorCommand: child.ExecutorCommand(glintBin), SubmitToken: testToken, Instruments: telemetry.Instruments{TracerProvider: c.tp},
		Conf: map[string]string{"spark.scheduler.minRegisteredResourcesRatio": "1.0", "spark.scheduler.maxRegisteredResourcesWaitingTime": "10m"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// waitForCoresFree waits until c's master and workers have no core in use.
func (c *benchCluster) waitForCoresFree(t testing.TB) {
	t.Helper()
	c.waitFor(t, "cores free again", func(s masterJSON) bool {
		for _, w := range s.Workers {
			if w.CoresUsed != 0 {
				return false
			}
		}
		return len(s.ActiveApps) == 0
	})
	// The master frees an application's cores when it ends, the workers once
	// its executors exited: the next launch waits for both. Each look costs
	// the worker CPU that the rows count as the cluster's, and a traced
	// executor takes longer to exit (it exports its spans first): looking
	// every 20 ms keeps that cost small against the launch's.
	for _, w := range c.workers {
		if !tooltest.Poll(30*time.Second, 20*time.Millisecond, func() bool { return workerCoresUsed(t, c, w) == 0 }) {
			t.Fatalf("worker %s still has cores in use after 30 s", w.url)
		}
	}
}

func workerCoresUsed(t testing.TB, c *benchCluster, w *proc) int {
	resp := getPage(t, c.client, w.url+"/json")
	defer resp.Body.Close()
	var s struct {
		CoresUsed int `json:"coresused"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s.CoresUsed
}

func allLaunched(tl []driver.Timeline, n int) bool {
	if len(tl) < n {
		return false
	}
	for _, e := range tl {
		if e.Launched.IsZero() {
			return false
		}
	}
	return true
}

// launchOne runs pi on one executor of c and returns its launch timeline.
func launchOne(t testing.TB, c *benchCluster) driver.Timeline {
	var tl []driver.Timeline
	c.measure(t, func() {
		d, _ := runOnExecutors(t, c, 1, builtin.Pi(), "1")
		tl = d.Timelines()
	})
	if len(tl) != 1 || tl[0].Launched.IsZero() || tl[0].Started.IsZero() || tl[0].PropsRetrieved.IsZero() || tl[0].Registered.IsZero() {
		t.Fatalf("want one executor with launch, start, properties and registration times: %+v", tl)
	}
	return tl[0]
}

// warmLaunch is launchOne on a cluster of workers that prestart executors:
// it waits until every worker has one ready, and checks that the launch
// claimed one.
func warmLaunch(t testing.TB, c *benchCluster) driver.Timeline {
	standbys := map[int]bool{}
	for _, w := range c.workers {
		if !tooltest.Poll(30*time.Second, time.Millisecond, func() bool {
			var s struct {
				Prestarted int `json:"prestarted"`
			}
			resp := getPage(t, c.client, w.url+"/json")
			err := json.NewDecoder(resp.Body).Decode(&s)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			return s.Prestarted > 0
		}) {
			t.Fatalf("worker %s has no prestarted executor after 30 s", w.url)
		}
		for _, pid := range childrenOf(w.cmd.Process.Pid) {
			standbys[pid] = true
		}
	}
	tl := launchOne(t, c)
	for _, w := range c.workers {
		var s struct {
			FinishedExecutors []struct {
				PID int `json:"pid"`
			} `json:"finishedexecutors"`
		}
		resp := getPage(t, c.client, w.url+"/json")
		err := json.NewDecoder(resp.Body).Decode(&s)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range s.FinishedExecutors {
			delete(standbys, e.PID)
		}
	}
	if len(standbys) != len(c.workers)-1 {
		t.Fatalf("the launch did not claim a prestarted executor (%d of %d unclaimed)", len(standbys), len(c.workers))
	}
	return tl
}

// launchPhases are the p50s of a launch's steps, as figures of a row.
func launchPhases(tls []driver.Timeline, prefix string) map[string]float64 {
	phase := func(from, to func(driver.Timeline) time.Time) float64 {
		var ds []time.Duration
		for _, tl := range tls {
			ds = append(ds, to(tl).Sub(from(tl)))
		}
		return benchtable.Ms(benchtable.Percentile(ds, 50))
	}
	launched := func(tl driver.Timeline) time.Time { return tl.Launched }
	started := func(tl driver.Timeline) time.Time { return tl.Started }
	props := func(tl driver.Timeline) time.Time { return tl.PropsRetrieved }
	registered := func(tl driver.Timeline) time.Time { return tl.Registered }
	figures := map[string]float64{
		prefix + "launched_to_started_p50_ms":    phase(launched, started),
		prefix + "started_to_props_p50_ms":       phase(started, props),
		prefix + "props_to_registered_p50_ms":    phase(props, registered),
		prefix + "launched_to_registered_p50_ms": phase(launched, registered),
	}
	// A cold executor's boot (the worker's fork → its main) and its
	// RetrieveSparkProps apart; a claimed one booted before its launch.
	if len(tls) > 0 && !slices.ContainsFunc(tls, func(tl driver.Timeline) bool { return tl.Booted.IsZero() }) {
		booted := func(tl driver.Timeline) time.Time { return tl.Booted }
		figures[prefix+"boot_p50_ms"] = phase(started, booted)
		figures[prefix+"props_p50_ms"] = phase(booted, props)
	}
	return figures
}

// launchFigures are a row's figures: launchPhases(tls, prefix) and more.
func launchFigures(tls []driver.Timeline, prefix string, more map[string]float64) map[string]float64 {
	figures := launchPhases(tls, prefix)
	maps.Copy(figures, more)
	return figures
}

// sinceLaunched is each timeline's LaunchExecutor received → registered time.
func sinceLaunched(tls []driver.Timeline) []time.Duration {
	var ds []time.Duration
	for _, tl := range tls {
		ds = append(ds, tl.Registered.Sub(tl.Launched))
	}
	return ds
}

// idleExecutorRSS is row 8b: the memory of four registered executors on c
// before their first task.
func idleExecutorRSS(t testing.TB, c *benchCluster) {
	var rss, anon []int
	idle := &app.App{Name: builtin.Sleep().Name, Tasks: builtin.Sleep().Tasks, Run: func(ctx context.Context, ac app.Context, _ []string) error {
		for _, w := range c.workers {
			for _, pid := range childrenOf(w.cmd.Process.Pid) {
				rss = append(rss, tooltest.ProcStatusKiB(t, pid, "VmRSS"))
				anon = append(anon, tooltest.ProcStatusKiB(t, pid, "RssAnon"))
			}
		}
		_, err := ac.RunTasks(ctx, "sleep", [][]byte{[]byte("0s")})
		return err
	}}
	runOnExecutors(t, c, 4, idle)
	if len(rss) != 4 {
		t.Fatalf("read the memory of %d executors, want 4", len(rss))
	}
	peak := float64(max(rss[0], rss[1], rss[2], rss[3])) / 1024
	peakAnon := float64(max(anon[0], anon[1], anon[2], anon[3])) / 1024
	benchtable.Record(t, benchtable.Row{
		ID: "8b", What: "idle executor RSS (registered, before its first task; largest of 4)",
		Result: fmt.Sprintf("%.1f MiB, of it %.1f MiB its own (RssAnon); the rest is glint-executor's pages, which every executor shares", peak, peakAnon),
		Target: "≤ 20 MiB", Met: benchtable.Check(peak, 20, true),
		Figures: map[string]float64{"rss_mib": peak, "rss_anon_mib": peakAnon},
	})
}

// startFloor is the floor's parent with its child built (buildFloor),
// closed when t ends.
func startFloor(t testing.TB) *floor.Floor {
	f, err := floor.New(buildFloor(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// buildFloor builds cmd/glint-floor, the floor's child, statically linked as
// glint is: linked dynamically, a child pays the loader and libc's start-up
// at each exec, a large part of the floor, which a Go child does not need.
func buildFloor(t testing.TB) string {
	bin := filepath.Join(t.TempDir(), "glint-floor")
	if out, err := staticBuild(bin, "../../cmd/glint-floor").CombinedOutput(); err != nil {
		t.Fatalf("build glint-floor: %v\n%s", err, out)
	}
	return bin
}

// inTurns runs each of kinds rounds times: every round runs each once, in an
// order of its own drawn from order. Measured in a fixed order, a kind always
// came after the same other (in an A/A run of row 7a, two groups of
// identical untraced clusters, the second of a pair ran slower), and a size
// of row 3 ran all its repetitions in one stretch of the machine's drift.
func inTurns(order *rand.Rand, rounds int, kinds []func()) {
	for range rounds {
		for _, i := range order.Perm(len(kinds)) {
			kinds[i]()
		}
	}
}

// TestBenchLaunch is rows 1 (the floor), 2 (one executor's launch against
// it, as shipped: in its cgroup and, as root, as its application's user),
// 2t (that traced to Jaeger, against the floor), 2c (that against an unconfined launch as the worker's user), 7a (the
// launch with tracing to Jaeger against off), 8b (an idle executor's
// memory) and 9 (the launch claiming a prestarted executor).
// Floor, untraced, bare, traced and warm launches take turns in rounds (inTurns),
// so the ratios hold when the machine's speed drifts, and the rounds are
// split over epochs, each on new clusters of each kind: one run's identical
// clusters differ from one another by far more than their launches'
// sampling error, so a row measured on a few clusters compares those
// clusters as much as what they run.
func TestBenchLaunch(t *testing.T) {
	launches, epochs, quick := 600, 20, benchtable.Start(t)
	if quick {
		launches, epochs = 3, 1
	}
	f := startFloor(t)
	tr := startTracing(t)
	var shipped []string
	if os.Geteuid() == 0 {
		shipped = []string{ownUsers}
	}
	var off, on, warm, bare *benchGroup
	var floors floorRuns
	var offTimelines, onTimelines, warmTimelines, bareTimelines []driver.Timeline
	kinds := append(floors.kinds(t, f),
		func() { offTimelines = append(offTimelines, launchOne(t, off.next())) },
		func() { onTimelines = append(onTimelines, launchOne(t, on.next())) },
		func() { warmTimelines = append(warmTimelines, warmLaunch(t, warm.next())) },
		func() { bareTimelines = append(bareTimelines, launchOne(t, bare.next())) },
	)
	order := rand.New(rand.NewPCG(1, 2))
	var offCPU, onCPU time.Duration
	var contained bool
	for epoch := range epochs {
		off, on = tr.groups(t, 1, 2, shipped...)
		warm = groupOf(1, func() *benchCluster {
			return &benchCluster{testCluster: startSizedCluster(t, nil, 2, 2, append([]string{"--prestart-executors", "1"}, shipped...)), tp: noop.NewTracerProvider()}
		})
		bare = groupOf(1, func() *benchCluster {
			return &benchCluster{testCluster: startSizedCluster(t, nil, 2, 2, []string{"--contain=false"}), tp: noop.NewTracerProvider()}
		})
		if epoch == 0 {
			idleExecutorRSS(t, off.clusters[0])
			contained = off.clusters[0].contained(t)
		}
		off.startCPU(t)
		on.startCPU(t)
		inTurns(order, launches/epochs, kinds)
		onCPU += on.stopCPU(t)
		offCPU += off.stopCPU(t)
		warm.stopCPU(t) // only to stop it: its CPU is no row's
		bare.stopCPU(t)
	}
	offs, ons := sinceLaunched(offTimelines), sinceLaunched(onTimelines)
	h1p50, h1p99 := benchtable.Percentile(floors.http1, 50), benchtable.Percentile(floors.http1, 99)
	h2p50, h2p99 := benchtable.Percentile(floors.h2c, 50), benchtable.Percentile(floors.h2c, 99)
	fp50 := floors.p50()
	benchtable.Record(t, benchtable.Row{
		ID: "1", What: "floor: fork/exec a tiny Go child → its 2nd loopback request, HTTP/1.1 and h2c (the floor is the cheaper)",
		Result: fmt.Sprintf("p50 %.2f ms: HTTP/1.1 p50 %.2f ms, p99 %.2f ms; h2c p50 %.2f ms, p99 %.2f ms (%d runs each)",
			benchtable.Ms(fp50), benchtable.Ms(h1p50), benchtable.Ms(h1p99), benchtable.Ms(h2p50), benchtable.Ms(h2p99), launches),
		Figures: map[string]float64{"p50_ms": benchtable.Ms(fp50), "http1_p50_ms": benchtable.Ms(h1p50), "http1_p99_ms": benchtable.Ms(h1p99),
			"h2c_p50_ms": benchtable.Ms(h2p50), "h2c_p99_ms": benchtable.Ms(h2p99), "runs": float64(launches)},
	})
	p50 := benchtable.Percentile(offs, 50)
	benchtable.Record(t, floorRow("2", "executor launch as shipped (its cgroup; as root, its application's user): LaunchExecutor received → registered with the driver, one at a time",
		"p50 ≤ 2.0× floor", 2.0, offTimelines, fp50, epochs))
	benchtable.Record(t, floorRow("2t", "traced launch: row 2 with every span exported to a real Jaeger",
		"p50 ≤ 1.5× floor", 1.5, onTimelines, fp50, epochs))
	bareP50 := benchtable.Percentile(sinceLaunched(bareTimelines), 50)
	cost := float64(p50) / float64(bareP50)
	benchtable.Record(t, benchtable.Row{
		ID: "2c", What: "containment on row 2: each executor in its cgroup and as its application's user vs unconfined as the worker's",
		Result: fmt.Sprintf("p50 %.2f ms vs %.2f ms: %.2f× (+%.2f ms; contained %v, own users %v)",
			benchtable.Ms(p50), benchtable.Ms(bareP50), cost, benchtable.Ms(p50-bareP50), contained, len(shipped) > 0),
		Figures: launchFigures(bareTimelines, "bare_", map[string]float64{"ratio": cost, "p50_ms": benchtable.Ms(p50), "bare_p50_ms": benchtable.Ms(bareP50),
			"contained": boolFigure(contained), "own_users": boolFigure(len(shipped) > 0)}),
	})
	onP50 := benchtable.Percentile(ons, 50)
	latency := float64(onP50) / float64(p50)
	cpu := float64(onCPU) / float64(offCPU)
	benchtable.Record(t, benchtable.Row{
		ID: "7a", What: "tracing overhead on row 2: every span exported to a real Jaeger vs tracing off",
		Result: fmt.Sprintf("p50 %.2f ms vs %.2f ms: %.2f× latency; %.2f× CPU (%.1f vs %.1f ms per launch, Jaeger's own CPU not counted)",
			benchtable.Ms(onP50), benchtable.Ms(p50), latency, cpu, benchtable.Ms(onCPU)/float64(launches), benchtable.Ms(offCPU)/float64(launches)),
		Target: "≤ 1.05× latency, ≤ 1.10× CPU", Met: benchtable.Check(max(latency-0.05, cpu-0.10), 1.0, true),
		Figures: launchFigures(onTimelines, "on_", map[string]float64{"latency_ratio": latency, "cpu_ratio": cpu, "on_p50_ms": benchtable.Ms(onP50), "off_p50_ms": benchtable.Ms(p50),
			"on_cpu_ms_per_launch": benchtable.Ms(onCPU) / float64(launches), "off_cpu_ms_per_launch": benchtable.Ms(offCPU) / float64(launches)}),
	})

	benchtable.Record(t, floorRow("9", "warm start: row 2 on workers with --prestart-executors 1, every launch a claim",
		"p50 ≤ 0.4× floor", 0.4, warmTimelines, fp50, epochs))
}

// floorRuns are the floor's launches over each protocol.
type floorRuns struct{ http1, h2c []time.Duration }

// kinds are the floor's two launches, to take turns with a row's (inTurns).
func (r *floorRuns) kinds(t testing.TB, f *floor.Floor) []func() {
	run := func(protocol string, into *[]time.Duration) func() {
		return func() {
			d, err := f.Launch(context.Background(), protocol)
			if err != nil {
				t.Fatal(err)
			}
			*into = append(*into, d)
		}
	}
	return []func(){run(floor.HTTP1, &r.http1), run(floor.H2C, &r.h2c)}
}

// p50 is the floor: the cheaper protocol's p50, the tightest way to make
// the two round trips, whichever Glint uses.
func (r *floorRuns) p50() time.Duration {
	return min(benchtable.Percentile(r.http1, 50), benchtable.Percentile(r.h2c, 50))
}

// TestBenchTLSLaunch is row 2s: row 2 with every process of the cluster,
// and the driver, speaking mutual TLS, against the floor in turns. The test
// process's TLS is its every client's and listener's (rpc.UseTLS), so it is
// a row of its own.
func TestBenchTLSLaunch(t *testing.T) {
	launches, epochs, quick := 200, 10, benchtable.Start(t)
	if quick {
		launches, epochs = 3, 1
	}
	f := startFloor(t)
	// The executors' certificate is readable by the users they run as.
	ca, leaves := writePKI(t, reachableDir(t), 0o600, 0o644)
	cert, key := leaves[0][0], leaves[0][1]
	if err := rpc.UseTLS(rpc.TLSFiles{Cert: cert, Key: key, CA: ca}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rpc.UseTLS(rpc.TLSFiles{}) }()
	env := []string{"GLINT_TLS_CERT_FILE=" + cert, "GLINT_TLS_KEY_FILE=" + key, "GLINT_TLS_CA_FILE=" + ca}
	var shipped []string
	if os.Geteuid() == 0 {
		shipped = []string{ownUsers, "--executor-tls-cert-file", leaves[1][0], "--executor-tls-key-file", leaves[1][1]}
	}
	var g *benchGroup
	var floors floorRuns
	var timelines []driver.Timeline
	kinds := append(floors.kinds(t, f), func() { timelines = append(timelines, launchOne(t, g.next())) })
	order := rand.New(rand.NewPCG(3, 4))
	for range epochs {
		g = groupOf(1, func() *benchCluster {
			return &benchCluster{testCluster: startSizedCluster(t, env, 2, 2, shipped), tp: noop.NewTracerProvider()}
		})
		if !strings.HasPrefix(g.clusters[0].master.url, "https://") {
			t.Fatalf("the master serves at %s, want https", g.clusters[0].master.url)
		}
		inTurns(order, launches/epochs, kinds)
		g.stopCPU(t) // only to stop it: its CPU is no row's
	}
	benchtable.Record(t, floorRow("2s", "TLS launch: row 2 with every process, the driver too, speaking mutual TLS 1.3",
		"p50 ≤ 2.0× floor", 2.0, timelines, floors.p50(), epochs))
}

// floorRow is a launch row measured against the floor fp50: the p50 and p99
// of tls' LaunchExecutor received → registered, its ratio to the floor
// (met at most target), and the p50 of each step.
func floorRow(id, what, targetText string, target float64, tls []driver.Timeline, fp50 time.Duration, clusters int) benchtable.Row {
	ds := sinceLaunched(tls)
	p50, p99 := benchtable.Percentile(ds, 50), benchtable.Percentile(ds, 99)
	ratio := float64(p50) / float64(fp50)
	figures := launchFigures(tls, "", map[string]float64{"p50_ms": benchtable.Ms(p50), "p99_ms": benchtable.Ms(p99), "floor_ratio": ratio, "launches": float64(len(tls))})
	result := fmt.Sprintf("p50 %.2f ms (%.2f× floor), p99 %.2f ms (%d launches on %d clusters); p50s: process start %.2f",
		benchtable.Ms(p50), ratio, benchtable.Ms(p99), len(tls), clusters, figures["launched_to_started_p50_ms"])
	if boot, ok := figures["boot_p50_ms"]; ok {
		result += fmt.Sprintf(", boot %.2f, RetrieveSparkProps %.2f", boot, figures["props_p50_ms"])
	} else {
		result += fmt.Sprintf(", RetrieveSparkProps %.2f", figures["started_to_props_p50_ms"])
	}
	result += fmt.Sprintf(", RegisterExecutor %.2f ms", figures["props_to_registered_p50_ms"])
	return benchtable.Row{ID: id, What: what, Result: result, Target: targetText, Met: benchtable.Check(ratio, target, true), Figures: figures}
}

// TestBenchParallelLaunch is row 3: submit → every executor registered, for
// 1, 4, 16 and 64 one-core executors on two workers of 32 cores.
func TestBenchParallelLaunch(t *testing.T) {
	sizes, reps, quick := []int{1, 4, 16, 64}, 9, benchtable.Start(t)
	if quick {
		sizes, reps = []int{1, 4}, 1
	}
	// The sizes take turns over the group's clusters.
	g := groupOf(benchClusters(quick), func() *benchCluster {
		return &benchCluster{testCluster: startSizedCluster(t, nil, 2, 32, nil), tp: noop.NewTracerProvider()}
	})
	runs := map[int][]time.Duration{}
	var kinds []func()
	for _, n := range sizes {
		kinds = append(kinds, func() {
			d, start := runOnExecutors(t, g.next(), n, builtin.Pi(), "1")
			var last time.Time
			for _, tl := range d.Timelines() {
				if tl.Registered.IsZero() {
					t.Fatalf("executor %d never registered", tl.ExecutorID)
				}
				if tl.Registered.After(last) {
					last = tl.Registered
				}
			}
			runs[n] = append(runs[n], last.Sub(start))
		})
	}
	inTurns(rand.New(rand.NewPCG(1, 2)), reps, kinds)
	took := map[int]time.Duration{}
	figures := map[string]float64{}
	var parts []string
	for _, n := range sizes {
		took[n] = benchtable.Percentile(runs[n], 50)
		figures[fmt.Sprintf("executors_%d_ms", n)] = benchtable.Ms(took[n])
		parts = append(parts, fmt.Sprintf("%d: %.0f ms", n, benchtable.Ms(took[n])))
	}
	big := sizes[len(sizes)-1]
	if _, ok := took[16]; ok {
		big = 16
	}
	ratio := float64(took[big]) / float64(took[1])
	figures[fmt.Sprintf("ratio_%d_to_1", big)] = ratio
	benchtable.Record(t, benchtable.Row{
		ID: "3", What: fmt.Sprintf("parallel launch: submit → all executors registered, 2 workers (median of %d, sizes in turns over %d clusters)", reps, len(g.clusters)),
		Result: strings.Join(parts, ", ") + fmt.Sprintf("; %d = %.1f× one", big, ratio),
		Target: "16 ≤ 6× one", Met: benchtable.Check(ratio, 6, true), Figures: figures,
	})
}

// TestBenchTaskDispatch is rows 4 (no-op tasks per second, driver → four
// one-core executors and back) and 7b (the same with tracing to Jaeger at the
// default task sampling against off). Off and on take turns.
func TestBenchTaskDispatch(t *testing.T) {
	tasks, reps, quick := 10_000, 60, benchtable.Start(t)
	if quick {
		tasks, reps = 500, 1
	}
	off, on := startTracing(t).groups(t, benchClusters(quick), 2)
	dispatchers := map[*benchCluster]*dispatcher{}
	for _, c := range append(slices.Clone(off.clusters), on.clusters...) {
		dispatchers[c] = startDispatcher(t, c)
	}
	var offTime, onTime time.Duration
	// Each turn is a pair, off then on or on then off in turn (the drivers
	// share this process, so the second of a pair may pay for the first's
	// garbage); the overhead is the median of the pairs' ratios, so a turn
	// the shared machine slowed does not decide it.
	ratios := make([]float64, reps)
	off.startCPU(t)
	on.startCPU(t)
	for i := range reps {
		var offTurn, onTurn time.Duration
		o, n := off.next(), on.next()
		turns := []func(){
			func() { o.measure(t, func() { offTurn = dispatchers[o].turn(t, tasks) }) },
			func() { n.measure(t, func() { onTurn = dispatchers[n].turn(t, tasks) }) },
		}
		turns[i%2]()
		turns[1-i%2]()
		offTime, onTime = offTime+offTurn, onTime+onTurn
		ratios[i] = onTurn.Seconds() / offTurn.Seconds()
	}
	for _, p := range dispatchers {
		p.stop(t)
	}
	onCPU, offCPU := on.stopCPU(t), off.stopCPU(t)
	offRate := float64(reps*tasks) / offTime.Seconds()
	onRate := float64(reps*tasks) / onTime.Seconds()
	benchtable.Record(t, benchtable.Row{
		ID: "4", What: fmt.Sprintf("task dispatch: no-op tasks/s, driver → 4 one-core executors (%d tasks × %d)", tasks, reps),
		Result: fmt.Sprintf("%.0f tasks/s", offRate), Target: "≥ 20,000/s", Met: benchtable.Check(offRate, 20_000, false),
		Figures: map[string]float64{"tasks_per_s": offRate},
	})
	slices.Sort(ratios)
	latency := ratios[reps/2]
	cpu := float64(onCPU) / float64(offCPU)
	benchtable.Record(t, benchtable.Row{
		ID: "7b", What: "tracing overhead on row 4: spans to a real Jaeger (default task sampling) vs off",
		Result: fmt.Sprintf("%.0f vs %.0f tasks/s: %.2f× time (median of %d paired turns); %.2f× CPU (Jaeger's own CPU not counted)", onRate, offRate, latency, reps, cpu),
		Target: "≤ 1.05× time, ≤ 1.10× CPU", Met: benchtable.Check(max(latency-0.05, cpu-0.10), 1.0, true),
		Figures: map[string]float64{"time_ratio": latency, "cpu_ratio": cpu, "on_tasks_per_s": onRate, "off_tasks_per_s": offRate},
	})
}

// dispatcher is an application of an in-process driver on four one-core
// executors of a cluster that runs no-op tasks (the sleep app's task with
// 0s) once per turn: its executors are launched once, so that a turn times
// dispatch alone, not a launch and the export of its spans.
type dispatcher struct {
	turns chan int
	took  chan time.Duration
	done  chan error
}

func startDispatcher(t testing.TB, c *benchCluster) *dispatcher {
	t.Helper()
	p := &dispatcher{turns: make(chan int), took: make(chan time.Duration), done: make(chan error, 1)}
	sleep := builtin.Sleep()
	d := benchDriver(t, c, 4, &app.App{Name: sleep.Name, Tasks: sleep.Tasks, Run: func(ctx context.Context, ac app.Context, _ []string) error {
		for tasks := range p.turns {
			inputs := make([][]byte, tasks)
			for i := range inputs {
				inputs[i] = []byte("0s")
			}
			start := time.Now()
			if _, err := ac.RunTasks(ctx, "sleep", inputs); err != nil {
				return err
			}
			p.took <- time.Since(start)
		}
		return nil
	}})
	go func() {
		ctx, span := c.tp.Tracer("bench").Start(context.Background(), "submit")
		defer span.End()
		p.done <- d.Run(ctx)
	}()
	return p
}

// turn runs tasks no-op tasks and returns how long RunTasks took.
func (p *dispatcher) turn(t testing.TB, tasks int) time.Duration {
	t.Helper()
	select {
	case p.turns <- tasks:
	case err := <-p.done:
		t.Fatalf("the dispatching application ended: %v", err)
	}
	select {
	case took := <-p.took:
		return took
	case err := <-p.done:
		t.Fatalf("the dispatching application ended: %v", err)
	}
	return 0
}

// stop ends the application.
func (p *dispatcher) stop(t testing.TB) {
	t.Helper()
	close(p.turns)
	if err := <-p.done; err != nil {
		t.Fatal(err)
	}
}

func TestGlintAndTheFloorsChildAreBuiltStaticallyLinked(t *testing.T) {
	for _, bin := range []string{glintBin, glintBin + child.ExecutorSuffix, buildFloor(t)} {
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s is dynamically linked (it names a program interpreter): the image's glint is not", bin)
			}
		}
		f.Close()
	}
}

// boolFigure is a yes or no as a figure of results.json.
func boolFigure(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
