package driver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	executorv1 "github.com/glint-cluster/glint/pkg/api/glint/executor/v1"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/app"
	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/fault"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry"
	"github.com/glint-cluster/glint/pkg/telemetry/prom"
)

// taskSet is the tasks of one RunTasks call.
type taskSet struct {
	id        int32
	task      string
	inputs    [][]byte
	results   [][]byte
	pending   []int
	failures  []int
	remaining int
	launched  bool
	done      chan struct{}
	err       error
	// span is the set's runTasks span in the application's trace; the traces
	// of its task batches link to it.
	span trace.SpanContext
	// ran is the executors' run time of the ended tasks, summed.
	ran   time.Duration
	ended int
	// started and stopped are when it was asked for and when it finished
	// (zero while it runs); failedAttempts counts its failed task attempts,
	// lastFailures the messages of the last maxShownFailures.
	started, stopped time.Time
	failedAttempts   int
	lastFailures     []string
}

// The task sets and failures GetProgress reports: the most recent of each.
const (
	maxTaskSetHistory = 100
	maxShownFailures  = 5
	// maxFailureBytes clips each failure's message.
	maxFailureBytes = 512
)

// briefTask is the mean run time below which a task set's tasks are queued
// at executors, up to child.TaskSlotsPerCore per core, and launched and
// reported in batches: for tasks that brief, the calls cost more than the
// tasks, and a core waiting for its next task's call sits idle.
const briefTask = time.Millisecond

// brief says whether the set's ended tasks ran briefly on average; until one
// ended it is not known, and they are not.
func (ts *taskSet) brief() bool {
	return ts.ended > 0 && ts.ran/time.Duration(ts.ended) < briefTask
}

// slots is how many of ts's tasks e may hold at once, running or queued.
func (e *executorData) slots(ts *taskSet) int32 {
	if ts.brief() {
		return e.cores * child.TaskSlotsPerCore
	}
	return e.cores
}

func (ts *taskSet) finished() bool {
	select {
	case <-ts.done:
		return true
	default:
		return false
	}
}

func (ts *taskSet) fail(err error) {
	if !ts.finished() {
		ts.err = err
		ts.stop()
	}
}

// clipFailure is a failure's message cut to maxFailureBytes, whole runes.
func clipFailure(s string) string {
	if len(s) <= maxFailureBytes {
		return s
	}
	return strings.ToValidUTF8(s[:maxFailureBytes], "") + "…"
}

// stop ends ts: its caller learns how it went.
func (ts *taskSet) stop() {
	ts.stopped = time.Now()
	close(ts.done)
}

// runningTask is a launched task.
type runningTask struct {
	set      *taskSet
	index    int
	executor *executorData
	launched time.Time
}

// StatusUpdate applies the ends of an executor's tasks and offers the freed
// slots again.
func (d *Driver) StatusUpdate(ctx context.Context, req *connect.Request[driverv1.StatusUpdateRequest]) (*connect.Response[driverv1.StatusUpdateResponse], error) {
	m := req.Msg
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for _, u := range m.GetUpdates() {
		if err := d.statusUpdateLocked(ctx, m.GetExecutorId(), u); err != nil {
			errs = append(errs, err)
		}
	}
	d.makeOffersLocked(ctx)
	if e, ok := d.executors[m.GetExecutorId()]; ok {
		d.coresFreedLocked(ctx, e)
	}
	switch len(errs) {
	case 0:
		return connect.NewResponse(&driverv1.StatusUpdateResponse{}), nil
	case 1:
		return nil, rpc.Error(errs[0])
	default:
		return nil, rpc.Error(fmt.Errorf("%w (and %d more refused)", errs[0], len(errs)-1))
	}
}

// maxRunTime caps the run time an executor reports for one task, so that
// no report can overflow a task set's sum.
const maxRunTime = 24 * time.Hour

func (d *Driver) statusUpdateLocked(ctx context.Context, executorID int32, u *driverv1.TaskStatus) error {
	rt, ok := d.running[u.GetTaskId()]
	if !ok {
		return fmt.Errorf("status update for task %d: %w", u.GetTaskId(), fault.ErrNotFound)
	}
	if rt.executor.id != executorID {
		return fmt.Errorf("status update for task %d from executor %d: %w: it runs on executor %d",
			u.GetTaskId(), executorID, fault.ErrFailedPrecondition, rt.executor.id)
	}
	if u.GetState() != driverv1.TaskState_TASK_STATE_RUNNING && u.GetState() != driverv1.TaskState_TASK_STATE_LAUNCHING {
		d.metrics.tasks.WithLabelValues(lifecycle.Label(u.GetState())).Inc()
		prom.Observe(ctx, d.metrics.taskDuration, time.Since(rt.launched).Seconds())
	}
	switch u.GetState() {
	case driverv1.TaskState_TASK_STATE_FINISHED:
		d.finishTaskLocked(u.GetTaskId(), rt)
		ts, ran := rt.set, min(max(time.Duration(u.GetRunTimeUs())*time.Microsecond, 0), maxRunTime)
		ts.ran += ran
		ts.ended++
		rt.executor.tasksDone++
		rt.executor.taskTime += ran
		if !ts.finished() {
			ts.results[rt.index] = u.GetResult()
			ts.remaining--
			d.tasksDone++
			if ts.remaining == 0 {
				ts.stop()
			}
		}
	case driverv1.TaskState_TASK_STATE_FAILED, driverv1.TaskState_TASK_STATE_KILLED, driverv1.TaskState_TASK_STATE_LOST:
		d.finishTaskLocked(u.GetTaskId(), rt)
		d.taskFailedLocked(ctx, rt, fmt.Sprintf("%s on executor %d: %s", u.GetState(), rt.executor.id, u.GetMessage()))
	}
	return nil
}

// finishTaskLocked frees a task's slot.
func (d *Driver) finishTaskLocked(id int64, rt *runningTask) {
	delete(d.running, id)
	rt.executor.assigned--
}

// taskFailedLocked queues a failed task again, or fails its set once the task
// failed spark.task.maxFailures times.
func (d *Driver) taskFailedLocked(ctx context.Context, rt *runningTask, reason string) {
	ts := rt.set
	if ts.finished() {
		return
	}
	rt.executor.tasksFailed++
	ts.failures[rt.index]++
	ts.failedAttempts++
	ts.lastFailures = append(ts.lastFailures, clipFailure(reason))
	if n := len(ts.lastFailures) - maxShownFailures; n > 0 {
		ts.lastFailures = slices.Delete(ts.lastFailures, 0, n)
	}
	d.log.Warn("task failed", "task", ts.task, "index", rt.index, "attempt", ts.failures[rt.index], "reason", reason)
	if ts.failures[rt.index] >= d.maxFailures {
		ts.fail(fmt.Errorf("task %d of %s failed %d times, most recently: %s", rt.index, ts.task, ts.failures[rt.index], reason))
		d.dropTaskSetLocked(ctx, ts)
		return
	}
	ts.pending = append([]int{rt.index}, ts.pending...)
}

// dropTaskSetLocked removes a finished set and kills its running tasks.
func (d *Driver) dropTaskSetLocked(ctx context.Context, ts *taskSet) {
	d.taskSets = slices.DeleteFunc(d.taskSets, func(o *taskSet) bool { return o == ts })
	for id, rt := range d.running {
		if rt.set != ts || rt.executor.removed {
			continue
		}
		e := rt.executor
		e.mailbox.Post(ctx, func(ctx context.Context) {
			if _, err := e.client.KillTask(ctx, connect.NewRequest(&executorv1.KillTaskRequest{TaskId: id, Reason: "task set ended"})); err != nil {
				d.log.Debug("kill task", "task", id, "err", err)
				d.mu.Lock()
				defer d.mu.Unlock()
				d.removeUnreachableLocked(ctx, e, err)
			}
		})
	}
}

// makeOffersLocked is CoarseGrainedSchedulerBackend.makeOffers: free slots of
// ready executors are offered pending tasks, FIFO over task sets, one task per
// executor per round so tasks spread over executors. A slot is a core, or
// child.TaskSlotsPerCore per core for a set of brief tasks; each executor
// gets its tasks of one call in one LaunchTask.
//
// Tracing keeps the application's trace the size of its launch, whatever the
// task count: an executor's first task is offered in a makeOffers span under
// the executor's LaunchedExecutor, the last step of its launch; every other
// offer goes to a batch traced apart (taskBatchLocked). Neither is a child of
// the call that triggered it (a StatusUpdate, say); both link to it.
func (d *Driver) makeOffersLocked(trigger context.Context) {
	ready := make([]*executorData, 0, len(d.executors))
	for _, e := range d.executors {
		if e.offerable() {
			ready = append(ready, e)
		}
	}
	slices.SortFunc(ready, func(a, b *executorData) int { return int(a.id - b.id) })
	// The batch's span starts with its first task, so that calls which free
	// no slot or find no task leave no empty spans behind.
	var batch context.Context
	var batchSpan trace.Span
	offers := map[*executorData]*launch{}
offering:
	for offered := true; offered; {
		offered = false
		for _, e := range ready {
			ts := d.nextTaskSetLocked()
			if ts == nil {
				break offering
			}
			if e.assigned >= e.slots(ts) {
				continue
			}
			offered = true
			if e.timeline.FirstTask.IsZero() {
				ctx, span := d.tracer.Start(trace.ContextWithSpanContext(trigger, e.launchedSpan), "makeOffers",
					trace.WithLinks(triggerLink(trigger, e.launchedSpan)...),
					trace.WithAttributes(telemetry.AppID.String(d.appID), telemetry.ExecutorID.Int(int(e.id)), attribute.Int("glint.tasks", 1)))
				first := &launch{}
				d.assignTaskLocked(ctx, e, ts, first)
				d.sendTasksLocked(ctx, e, first, func() { span.End() })
				continue
			}
			if batch == nil {
				batch, batchSpan = d.taskBatchLocked(trigger, ts)
			}
			if offers[e] == nil {
				offers[e] = &launch{}
			}
			d.assignTaskLocked(batch, e, ts, offers[e])
		}
	}
	if batchSpan == nil {
		return
	}
	launched := 0
	for _, l := range offers {
		launched += len(l.tasks)
	}
	batchSpan.SetAttributes(attribute.Int("glint.tasks", launched))
	// The batch's span ends once its last LaunchTask call returned.
	var left atomic.Int32
	left.Store(int32(len(offers)))
	sent := func() {
		if left.Add(-1) == 0 {
			batchSpan.End()
		}
	}
	for _, e := range ready {
		if l := offers[e]; l != nil {
			d.sendTasksLocked(batch, e, l, sent)
		}
	}
}

// taskBatchLocked starts the span of a batch of task offers: the root of a
// trace of its own, linked to the task set's runTasks span in the
// application's trace and to the trigger, for spark.glint.trace.taskSampleRatio
// of the batches. The others carry a span context that is not sampled, so
// that their calls (LaunchTask, and the executors' StatusUpdates after it)
// record nothing either.
func (d *Driver) taskBatchLocked(trigger context.Context, ts *taskSet) (context.Context, trace.Span) {
	if rand.Float64() >= d.taskSampleRatio {
		ctx := trace.ContextWithSpanContext(trigger, telemetry.Unsampled())
		return ctx, trace.SpanFromContext(ctx)
	}
	links := append(triggerLink(trigger, ts.span), trace.Link{SpanContext: ts.span})
	return d.tracer.Start(trigger, "makeOffers", trace.WithNewRoot(), trace.WithLinks(links...),
		trace.WithAttributes(telemetry.AppID.String(d.appID), attribute.String("glint.task.name", ts.task)))
}

// triggerLink links to the span in trigger, unless it is missing or is parent.
func triggerLink(trigger context.Context, parent trace.SpanContext) []trace.Link {
	sc := trace.SpanContextFromContext(trigger)
	if !sc.IsValid() || sc.Equal(parent) {
		return nil
	}
	return []trace.Link{{SpanContext: sc}}
}

// nextTaskSetLocked is the first task set with a pending task, or nil.
func (d *Driver) nextTaskSetLocked() *taskSet {
	for _, ts := range d.taskSets {
		if len(ts.pending) > 0 {
			return ts
		}
	}
	return nil
}

// launch is the tasks of one LaunchTask call.
type launch struct {
	tasks   []*executorv1.TaskDescription
	running []*runningTask
}

// assignTaskLocked gives ts's next pending task a slot of e and adds it to l.
func (d *Driver) assignTaskLocked(ctx context.Context, e *executorData, ts *taskSet, l *launch) {
	index := ts.pending[0]
	ts.pending = ts.pending[1:]
	id := d.nextTaskID
	d.nextTaskID++
	e.assigned++
	e.idleSince = time.Time{}
	ts.launched = true
	if e.timeline.FirstTask.IsZero() {
		e.timeline.FirstTask = time.Now()
		d.observeLaunchLocked(e)
		d.reportLaunchLocked(e.timeline)
	}
	rt := &runningTask{set: ts, index: index, executor: e, launched: time.Now()}
	d.running[id] = rt
	l.tasks = append(l.tasks, &executorv1.TaskDescription{TaskId: id, Name: ts.task, Input: ts.inputs[index], Attempt: int32(ts.failures[index]), Index: int32(index)})
	l.running = append(l.running, rt)
	trace.SpanFromContext(ctx).AddEvent("task offered", trace.WithAttributes(
		telemetry.ExecutorID.Int(int(e.id)), attribute.Int64("glint.task.id", id), attribute.Int("glint.task.index", index)))
}

// sendTasksLocked posts l to e, and calls sent once the call returned (the
// offer's span ends then). If the call gets no answer, e is removed
// and its tasks, l's among them, are queued again uncounted
// (removeUnreachableLocked); if e refuses l, each of its tasks that is still
// e's fails with the refusal.
func (d *Driver) sendTasksLocked(ctx context.Context, e *executorData, l *launch, sent func()) {
	e.mailbox.Post(ctx, func(ctx context.Context) {
		_, err := e.client.LaunchTask(ctx, connect.NewRequest(&executorv1.LaunchTaskRequest{Tasks: l.tasks}))
		sent()
		if err == nil {
			return
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.removeUnreachableLocked(ctx, e, err) {
			return
		}
		for i, rt := range l.running {
			id := l.tasks[i].GetTaskId()
			if d.running[id] != rt {
				continue
			}
			d.finishTaskLocked(id, rt)
			d.taskFailedLocked(ctx, rt, fmt.Sprintf("launch task on executor %d: %v", e.id, err))
		}
		d.makeOffersLocked(ctx)
	})
}

// RunTasks runs the application's task once per input; see app.Context.
func (d *Driver) RunTasks(ctx context.Context, task string, inputs [][]byte) (_ [][]byte, err error) {
	if len(inputs) == 0 {
		return nil, nil
	}
	n := len(inputs)
	ts := &taskSet{
		task: app.TaskID(d.cfg.App.Name, task), inputs: inputs, results: make([][]byte, n),
		pending: make([]int, n), failures: make([]int, n), remaining: n, done: make(chan struct{}),
	}
	for i := range ts.pending {
		ts.pending[i] = i
	}
	ctx, span := d.tracer.Start(ctx, "runTasks", trace.WithAttributes(telemetry.AppID.String(d.AppID()),
		attribute.String("glint.task.name", ts.task), attribute.Int("glint.tasks", n)))
	defer func() {
		if err != nil {
			telemetry.Fail(span, err)
		}
		span.End()
	}()
	ts.span = span.SpanContext()
	d.mu.Lock()
	select {
	case <-d.removed:
		d.mu.Unlock()
		return nil, fmt.Errorf("run %s: master removed application %s: %s", task, d.appID, d.removedWhy)
	default:
	}
	d.taskSets = append(d.taskSets, ts)
	ts.id, ts.started = d.nextSetID, time.Now()
	d.nextSetID++
	d.history = append(d.history, ts)
	if n := len(d.history) - maxTaskSetHistory; n > 0 {
		d.history = slices.Delete(d.history, 0, n)
	}
	d.tasks += n
	d.makeOffersLocked(ctx)
	d.mu.Unlock()

	starving := time.NewTicker(d.starvation)
	defer starving.Stop()
	for {
		select {
		case <-ts.done:
			if ts.err != nil {
				return nil, fmt.Errorf("run %s: %w", task, ts.err)
			}
			d.mu.Lock()
			d.dropTaskSetLocked(ctx, ts)
			d.mu.Unlock()
			return ts.results, nil
		case <-ctx.Done():
			d.mu.Lock()
			ts.fail(ctx.Err())
			d.dropTaskSetLocked(ctx, ts)
			d.mu.Unlock()
			return nil, fmt.Errorf("run %s: %w", task, ctx.Err())
		case <-starving.C:
			d.warnIfStarving(ctx, ts)
		}
	}
}

// warnIfStarving is Spark's "Initial job has not accepted any resources"
// warning, with the master's reason.
func (d *Driver) warnIfStarving(ctx context.Context, ts *taskSet) {
	d.mu.Lock()
	launched, master, appID := ts.launched, d.master, d.appID
	d.mu.Unlock()
	if launched {
		return
	}
	reason := "check that workers are registered and have sufficient resources"
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if st, err := master.GetClusterState(cctx, connect.NewRequest(&masterv1.GetClusterStateRequest{})); err == nil {
		for _, a := range st.Msg.GetActiveApps() {
			if a.GetId() == appID && a.GetStatusMessage() != "" {
				reason = a.GetStatusMessage()
			}
		}
	}
	d.log.Warn("Initial job has not accepted any resources", "app", appID, "reason", reason)
}

// waitReady blocks until spark.scheduler.minRegisteredResourcesRatio of the
// expected cores registered, or spark.scheduler.maxRegisteredResourcesWaitingTime passed.
func (d *Driver) waitReady(ctx context.Context) error {
	ratio := d.minRegisteredRatio
	if ratio <= 0 || d.cfg.MaxCores == 0 {
		return nil
	}
	want := int32(float64(d.cfg.MaxCores) * ratio)
	deadline := time.NewTimer(d.maxRegisteredWait)
	defer deadline.Stop()
	for {
		d.mu.Lock()
		have := d.totalCores
		d.mu.Unlock()
		if have >= want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for executors: %w", ctx.Err())
		case <-d.removed:
			return fmt.Errorf("wait for executors: master removed application %s: %s", d.AppID(), d.removedWhy)
		case <-deadline.C:
			d.log.Warn("starting with fewer executors than requested", "cores", have, "wanted", want)
			return nil
		case <-d.offersReady:
		}
	}
}
