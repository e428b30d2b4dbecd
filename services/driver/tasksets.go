package driver

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	executorv1 "github.com/glint-cluster/glint/pkg/api/glint/executor/v1"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/app"
	"github.com/glint-cluster/glint/pkg/fault"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry"
)

// taskSet is the tasks of one RunTasks call.
type taskSet struct {
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
		close(ts.done)
	}
}

// runningTask is a launched task.
type runningTask struct {
	set      *taskSet
	index    int
	executor *executorData
	launched time.Time
}

// StatusUpdate applies a task's end and offers the freed core again.
func (d *Driver) StatusUpdate(ctx context.Context, req *connect.Request[driverv1.StatusUpdateRequest]) (*connect.Response[driverv1.StatusUpdateResponse], error) {
	m := req.Msg
	d.mu.Lock()
	defer d.mu.Unlock()
	rt, ok := d.running[m.GetTaskId()]
	if !ok {
		return nil, rpc.Error(fmt.Errorf("status update for task %d: %w", m.GetTaskId(), fault.ErrNotFound))
	}
	if rt.executor.id != m.GetExecutorId() {
		return nil, rpc.Error(fmt.Errorf("status update for task %d from executor %d: %w: it runs on executor %d",
			m.GetTaskId(), m.GetExecutorId(), fault.ErrFailedPrecondition, rt.executor.id))
	}
	if m.GetState() != driverv1.TaskState_TASK_STATE_RUNNING && m.GetState() != driverv1.TaskState_TASK_STATE_LAUNCHING {
		d.metrics.tasks.WithLabelValues(lifecycle.Label(m.GetState())).Inc()
		telemetry.Observe(ctx, d.metrics.taskDuration, time.Since(rt.launched).Seconds())
	}
	switch m.GetState() {
	case driverv1.TaskState_TASK_STATE_FINISHED:
		d.finishTaskLocked(m.GetTaskId(), rt)
		ts := rt.set
		if !ts.finished() {
			ts.results[rt.index] = m.GetResult()
			ts.remaining--
			if ts.remaining == 0 {
				close(ts.done)
			}
		}
	case driverv1.TaskState_TASK_STATE_FAILED, driverv1.TaskState_TASK_STATE_KILLED, driverv1.TaskState_TASK_STATE_LOST:
		d.finishTaskLocked(m.GetTaskId(), rt)
		d.taskFailedLocked(ctx, rt, fmt.Sprintf("%s on executor %d: %s", m.GetState(), rt.executor.id, m.GetMessage()))
	default:
		return connect.NewResponse(&driverv1.StatusUpdateResponse{}), nil
	}
	d.makeOffersLocked(ctx)
	d.coresFreedLocked(ctx, rt.executor)
	return connect.NewResponse(&driverv1.StatusUpdateResponse{}), nil
}

// finishTaskLocked frees a task's core.
func (d *Driver) finishTaskLocked(id int64, rt *runningTask) {
	delete(d.running, id)
	if !rt.executor.removed {
		rt.executor.freeCores++
	}
}

// taskFailedLocked queues a failed task again, or fails its set once the task
// failed spark.task.maxFailures times.
func (d *Driver) taskFailedLocked(ctx context.Context, rt *runningTask, reason string) {
	ts := rt.set
	if ts.finished() {
		return
	}
	ts.failures[rt.index]++
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
			}
		})
	}
}

// makeOffersLocked is CoarseGrainedSchedulerBackend.makeOffers: free cores of
// ready executors are offered pending tasks, FIFO over task sets, one task per
// executor per round so tasks spread over executors.
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
	// no core or find no task leave no empty spans behind.
	var batch context.Context
	var batchSpan trace.Span
	launched := 0
	defer func() {
		if batchSpan != nil {
			batchSpan.SetAttributes(attribute.Int("glint.tasks", launched))
			batchSpan.End()
		}
	}()
	for offered := true; offered; {
		offered = false
		for _, e := range ready {
			if e.freeCores == 0 {
				continue
			}
			ts, index, ok := d.nextTaskLocked()
			if !ok {
				return
			}
			offered = true
			if e.timeline.FirstTask.IsZero() {
				ctx, span := d.tracer.Start(trace.ContextWithSpanContext(trigger, e.launchedSpan), "makeOffers",
					trace.WithLinks(triggerLink(trigger, e.launchedSpan)...),
					trace.WithAttributes(telemetry.AppID.String(d.appID), telemetry.ExecutorID.Int(int(e.id)), attribute.Int("glint.tasks", 1)))
				d.launchTaskLocked(ctx, e, ts, index)
				span.End()
				continue
			}
			if batch == nil {
				batch, batchSpan = d.taskBatchLocked(trigger, ts)
			}
			d.launchTaskLocked(batch, e, ts, index)
			launched++
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
		ctx := trace.ContextWithSpanContext(trigger, unsampled())
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

// unsampled returns a new span context that is not sampled: its children are
// not recorded in any process that samples by its parent.
func unsampled() trace.SpanContext {
	var tid trace.TraceID
	var sid trace.SpanID
	binary.BigEndian.PutUint64(tid[:8], rand.Uint64()|1)
	binary.BigEndian.PutUint64(tid[8:], rand.Uint64())
	binary.BigEndian.PutUint64(sid[:], rand.Uint64()|1)
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid})
}

func (d *Driver) nextTaskLocked() (*taskSet, int, bool) {
	for _, ts := range d.taskSets {
		if len(ts.pending) > 0 {
			index := ts.pending[0]
			ts.pending = ts.pending[1:]
			return ts, index, true
		}
	}
	return nil, 0, false
}

func (d *Driver) launchTaskLocked(ctx context.Context, e *executorData, ts *taskSet, index int) {
	id := d.nextTaskID
	d.nextTaskID++
	e.freeCores--
	e.idleSince = time.Time{}
	ts.launched = true
	if e.timeline.FirstTask.IsZero() {
		e.timeline.FirstTask = time.Now()
		d.observeLaunchLocked(e)
	}
	rt := &runningTask{set: ts, index: index, executor: e, launched: time.Now()}
	d.running[id] = rt
	req := &executorv1.LaunchTaskRequest{TaskId: id, Name: ts.task, Input: ts.inputs[index], Attempt: int32(ts.failures[index]), Index: int32(index)}
	trace.SpanFromContext(ctx).AddEvent("task offered", trace.WithAttributes(
		telemetry.ExecutorID.Int(int(e.id)), attribute.Int64("glint.task.id", id), attribute.Int("glint.task.index", index)))
	e.mailbox.Post(ctx, func(ctx context.Context) {
		if _, err := e.client.LaunchTask(ctx, connect.NewRequest(req)); err != nil {
			d.mu.Lock()
			defer d.mu.Unlock()
			if d.running[id] != rt {
				return
			}
			d.finishTaskLocked(id, rt)
			d.taskFailedLocked(ctx, rt, fmt.Sprintf("launch task on executor %d: %v", e.id, err))
			d.makeOffersLocked(ctx)
		}
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
