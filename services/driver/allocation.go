package driver

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	"github.com/glint-cluster/glint/pkg/telemetry"
)

// Spark's dynamic allocation properties (spark.dynamicAllocation.*).
const (
	confDynamicAllocation  = "spark.dynamicAllocation.enabled"
	confMinExecutors       = "spark.dynamicAllocation.minExecutors"
	confMaxExecutors       = "spark.dynamicAllocation.maxExecutors"
	confInitialExecutors   = "spark.dynamicAllocation.initialExecutors"
	confIdleTimeout        = "spark.dynamicAllocation.executorIdleTimeout"
	confBacklogTimeout     = "spark.dynamicAllocation.schedulerBacklogTimeout"
	confSustainedBacklog   = "spark.dynamicAllocation.sustainedSchedulerBacklogTimeout"
	allocationTickInterval = 100 * time.Millisecond // Spark's ExecutorAllocationManager polls every 100 ms
)

// allocationSettings are dynamic allocation's properties, with Spark's defaults.
type allocationSettings struct {
	enabled bool
	// min, max and initial bound the number of executors; max 0 is unbounded.
	min, max, initial int
	// idleTimeout releases an executor that ran no task this long (60s);
	// backlogTimeout asks for more once tasks waited this long (1s), and
	// sustainedBacklog again every this long while they still wait
	// (default backlogTimeout).
	idleTimeout, backlogTimeout, sustainedBacklog time.Duration
}

// parseAllocation reads spark.dynamicAllocation.* from conf.
func parseAllocation(conf map[string]string) (allocationSettings, error) {
	st := allocationSettings{max: math.MaxInt32, idleTimeout: 60 * time.Second, backlogTimeout: time.Second}
	if v, ok := conf[confDynamicAllocation]; ok {
		enabled, err := strconv.ParseBool(v)
		if err != nil {
			return st, fmt.Errorf("--conf %s=%q: want true or false", confDynamicAllocation, v)
		}
		st.enabled = enabled
	}
	st.initial = -1
	for key, dst := range map[string]*int{confMinExecutors: &st.min, confMaxExecutors: &st.max, confInitialExecutors: &st.initial} {
		v, ok := conf[key]
		if !ok {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > math.MaxInt32 {
			return st, fmt.Errorf("--conf %s=%q: want a whole number from 0", key, v)
		}
		*dst = n
	}
	if err := parseDurations(conf, map[string]*time.Duration{confIdleTimeout: &st.idleTimeout, confBacklogTimeout: &st.backlogTimeout, confSustainedBacklog: &st.sustainedBacklog}); err != nil {
		return st, err
	}
	if st.sustainedBacklog == 0 {
		st.sustainedBacklog = st.backlogTimeout
	}
	if st.initial < 0 {
		st.initial = st.min
	}
	switch {
	case st.max == 0:
		return st, fmt.Errorf("--conf %s=0: want at least 1", confMaxExecutors)
	case st.min > st.max:
		return st, fmt.Errorf("--conf %s=%d is above %s=%d", confMinExecutors, st.min, confMaxExecutors, st.max)
	case st.initial < st.min || st.initial > st.max:
		return st, fmt.Errorf("--conf %s=%d: want it from %s to %s (%d to %d)", confInitialExecutors, st.initial, confMinExecutors, confMaxExecutors, st.min, st.max)
	}
	return st, nil
}

// allocator is Spark's ExecutorAllocationManager as a pure state machine of
// the clock it is given: it raises the executor target while tasks wait —
// after backlogTimeout, then every sustainedBacklog, adding 1, 2, 4, …
// executors each time, never more than the tasks could use — lowers it when
// fewer would do, and picks executors idle past idleTimeout to release,
// never going below the target or min.
type allocator struct {
	st     allocationSettings
	target int
	// toAdd is how many executors the next raise adds; it doubles while
	// each raise adds all it may.
	toAdd int
	// addAt is when the target is raised next, while tasks wait; zero: no
	// backlog.
	addAt time.Time
	// initializing keeps the target at initial until the first job's tasks
	// arrive or an executor idles out, so the first job does not ramp up
	// from nothing.
	initializing bool
}

func newAllocator(st allocationSettings) *allocator {
	return &allocator{st: st, target: st.initial, toAdd: 1, initializing: true}
}

// demand is what the allocator decides from.
type demand struct {
	// pending and running count the tasks waiting for a core and running.
	pending, running int
	// tasksPerExecutor is how many tasks one executor runs at once.
	tasksPerExecutor int
	// executors are the executors the application has (not released,
	// not decommissioned); idle ones have idleSince set.
	executors []allocated
}

// allocated is one executor as the allocator sees it.
type allocated struct {
	id        int32
	idleSince time.Time
}

// update advances the allocator to now. It returns the new target when it
// changed (else -1), and the executors to release.
func (a *allocator) update(now time.Time, d demand) (target int, release []int32) {
	if d.pending > 0 {
		a.initializing = false
		if a.addAt.IsZero() {
			a.addAt = now.Add(a.st.backlogTimeout)
		}
	} else {
		a.addAt, a.toAdd = time.Time{}, 1
	}
	old := a.target
	tasksPerExecutor := max(d.tasksPerExecutor, 1)
	needed := (d.pending + d.running + tasksPerExecutor - 1) / tasksPerExecutor
	switch {
	case a.initializing:
	case needed < a.target:
		a.target, a.toAdd = max(needed, a.st.min), 1
	case !a.addAt.IsZero() && !now.Before(a.addAt):
		a.raise(needed, len(d.executors))
		a.addAt = now.Add(a.st.sustainedBacklog)
	}
	left := len(d.executors)
	for _, e := range d.executors {
		if e.idleSince.IsZero() || now.Before(e.idleSince.Add(a.st.idleTimeout)) {
			continue
		}
		a.initializing = false
		if left-1 < a.target { // the target is never below min
			continue
		}
		release = append(release, e.id)
		left--
	}
	if a.target == old {
		return -1, release
	}
	return a.target, release
}

// raise adds toAdd executors to the target (Spark's addExecutors), within
// what the tasks need and the bounds, and doubles toAdd when it could add
// all of them.
func (a *allocator) raise(needed, have int) {
	if a.target >= a.st.max {
		a.toAdd = 1
		return
	}
	old := a.target
	a.target = max(a.target, have) + a.toAdd
	a.target = min(a.target, needed)
	a.target = max(min(a.target, a.st.max), a.st.min)
	switch delta := a.target - old; {
	case delta == a.toAdd:
		a.toAdd *= 2
	default:
		a.toAdd = 1
	}
}

// initialExecutorLimit is the executor limit the application registers
// with: initialExecutors under dynamic allocation, else none.
func (d *Driver) initialExecutorLimit() *int32 {
	if !d.allocation.enabled {
		return nil
	}
	n := int32(d.allocation.initial)
	return &n
}

// startAllocation runs dynamic allocation, when enabled, until the returned
// function is called; ctx carries the application's trace, in which each
// request and release is a span.
func (d *Driver) startAllocation(ctx context.Context) (stop func()) {
	if !d.allocation.enabled {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		alloc := newAllocator(d.allocation)
		tick := time.NewTicker(allocationTickInterval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				d.allocate(ctx, alloc, now)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// allocate makes one allocation step at now: it tells the master a changed
// target, then releases the idle executors the allocator picked.
func (d *Driver) allocate(ctx context.Context, alloc *allocator, now time.Time) {
	d.mu.Lock()
	dem := demand{running: len(d.running), tasksPerExecutor: int(d.cfg.ExecutorCores)}
	for _, ts := range d.taskSets {
		dem.pending += len(ts.pending)
	}
	for _, e := range d.executors {
		if !e.removed && !e.released && !e.decommissioned {
			dem.executors = append(dem.executors, allocated{id: e.id, idleSince: e.idleSince})
		}
	}
	// The oldest first, as Spark picks them.
	slices.SortFunc(dem.executors, func(a, b allocated) int { return cmp.Compare(a.id, b.id) })
	target, release := alloc.update(now, dem)
	for _, id := range release {
		d.executors[id].released = true // no task reaches it from now on
	}
	master, appID := d.master, d.appID
	d.mu.Unlock()

	if target >= 0 {
		d.requestExecutors(ctx, master, appID, target, dem)
	}
	if len(release) > 0 {
		d.killExecutors(ctx, master, appID, release)
	}
}

// requestExecutors is one RequestExecutors call, traced as a span of the
// application's trace and counted.
func (d *Driver) requestExecutors(ctx context.Context, master masterv1connect.MasterServiceClient, appID string, target int, dem demand) {
	ctx, span := d.tracer.Start(ctx, "requestExecutors", trace.WithAttributes(telemetry.AppID.String(appID),
		attribute.Int("glint.executors.target", target), attribute.Int("glint.tasks.pending", dem.pending),
		attribute.Int("glint.tasks.running", dem.running)))
	defer span.End()
	d.metrics.executorRequests.Inc()
	d.log.InfoContext(ctx, "requesting executors", "target", target, "pending_tasks", dem.pending, "running_tasks", dem.running)
	_, err := master.RequestExecutors(ctx, connect.NewRequest(&masterv1.RequestExecutorsRequest{AppId: appID, RequestedTotal: int32(target)}))
	if err != nil {
		telemetry.Fail(span, err)
		d.log.Warn("request executors", "target", target, "err", err)
	}
}

// killExecutors releases idle executors through KillExecutors, traced as a
// span of the application's trace and counted. The master forgets them at
// once and tells the driver nothing more of them: the driver removes them
// itself (they run no task).
func (d *Driver) killExecutors(ctx context.Context, master masterv1connect.MasterServiceClient, appID string, ids []int32) {
	ctx, span := d.tracer.Start(ctx, "killExecutors", trace.WithAttributes(telemetry.AppID.String(appID),
		attribute.Int("glint.executors", len(ids))))
	defer span.End()
	d.log.InfoContext(ctx, "releasing idle executors", "executors", ids, "idle_timeout", d.allocation.idleTimeout.String())
	resp, err := master.KillExecutors(ctx, connect.NewRequest(&masterv1.KillExecutorsRequest{AppId: appID, ExecutorIds: ids}))
	var killed []int32
	if err != nil {
		telemetry.Fail(span, err)
		d.log.Warn("release executors", "executors", ids, "err", err)
	} else {
		killed = resp.Msg.GetKilledExecutorIds()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, id := range killed {
		if e, ok := d.executors[id]; ok {
			d.metrics.executorsReleased.Inc()
			d.removeExecutorLocked(ctx, e, fmt.Sprintf("executor %d released: idle for %s", id, d.allocation.idleTimeout), false)
		}
	}
	// Those the master did not kill (they ended already, or the call
	// failed) may take tasks again until the master reports their end.
	for _, id := range ids {
		if e, ok := d.executors[id]; ok && !e.removed {
			e.released = false
		}
	}
}
