package driver

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace"

	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	executorv1 "github.com/glint-cluster/glint/pkg/api/glint/executor/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/executor/v1/executorv1connect"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/fault"
	"github.com/glint-cluster/glint/pkg/ids"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry"
)

// Timeline is when each step of one executor's launch happened, from the
// timestamps the master (Scheduled), the worker (Launched, Started) and this
// driver (Registered, FirstTask) recorded. Zero means not (yet) reached.
type Timeline struct {
	ExecutorID int32
	WorkerID   string
	Scheduled  time.Time
	Launched   time.Time
	Started    time.Time
	// Booted is when the executor process reached its main, as it said
	// (zero for a prestarted executor).
	Booted         time.Time
	PropsRetrieved time.Time
	Registered     time.Time
	FirstTask      time.Time
	Ended          time.Time
	EndMessage     string
}

// executorData is one executor as the backend knows it (Spark's ExecutorData).
type executorData struct {
	id       int32
	workerID string
	hostPort string
	url      string
	cores    int32
	// assigned is how many tasks the executor holds, running or queued.
	assigned int32
	// tasksDone and tasksFailed count its ended tasks, taskTime sums their
	// run time (GetProgress).
	tasksDone, tasksFailed int32
	taskTime               time.Duration
	registered             bool
	launched               bool
	removed                bool
	// decommissioned says its worker is decommissioned: it gets no new
	// tasks and is stopped once its tasks are done (decommission.go).
	decommissioned bool
	// stopping says the driver told it to stop.
	stopping bool
	// released says dynamic allocation is releasing it (allocation.go).
	released bool
	// idleSince is when its last task ended (or it became ready) and it
	// has run none since: dynamic allocation releases it after a while.
	idleSince time.Time
	state     masterv1.ExecutorState
	// propsRetrieved is closed once it retrieved its properties
	// (timeline.PropsRetrieved is set).
	propsRetrieved chan struct{}
	client         executorv1connect.ExecutorServiceClient
	mailbox        *rpc.Mailbox
	timeline       Timeline
	// trace is the span context of the executor's registration, the exemplar
	// of its launch phases; observed is set once they were recorded.
	trace    trace.SpanContext
	observed bool
	// launchedSpan is the span context LaunchedExecutor, the last step of the
	// executor's launch, was called in (telemetry.Caller: the executor's
	// span in its application's trace): the offer of its first task, which
	// may come long after the call, is traced under it.
	launchedSpan trace.SpanContext
}

// offerable says whether e may be offered tasks: it is ready, and neither
// removed, decommissioned nor being released.
func (e *executorData) offerable() bool {
	return e.launched && !e.removed && !e.decommissioned && !e.released
}

// executorLocked returns the executor with id, creating its record.
func (d *Driver) executorLocked(id int32) *executorData {
	e, ok := d.executors[id]
	if !ok {
		e = &executorData{id: id, timeline: Timeline{ExecutorID: id}, propsRetrieved: make(chan struct{})}
		d.executors[id] = e
	}
	return e
}

// RetrieveSparkProps gives a starting executor the application's properties.
func (d *Driver) RetrieveSparkProps(ctx context.Context, req *connect.Request[driverv1.RetrieveSparkPropsRequest]) (*connect.Response[driverv1.RetrieveSparkPropsResponse], error) {
	if err := d.waitRegistered(ctx); err != nil {
		return nil, rpc.Error(err)
	}
	if err := ids.ValidateExecutor(req.Msg.GetExecutorId()); err != nil {
		return nil, rpc.Error(err)
	}
	booted := req.Msg.GetBootedAt()
	if booted != nil && !booted.IsValid() {
		return nil, rpc.Error(fmt.Errorf("retrieve properties: %w: booted_at is not a valid time", fault.ErrInvalidArgument))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkAppLocked(req.Msg.GetAppId()); err != nil {
		return nil, rpc.Error(err)
	}
	if e := d.executorLocked(req.Msg.GetExecutorId()); e.timeline.PropsRetrieved.IsZero() {
		e.timeline.PropsRetrieved = time.Now()
		if booted != nil {
			e.timeline.Booted = booted.AsTime()
		}
		close(e.propsRetrieved)
	}
	trace.SpanFromContext(ctx).SetAttributes(telemetry.AppID.String(d.appID), telemetry.ExecutorID.Int(int(req.Msg.GetExecutorId())))
	props := maps.Clone(d.cfg.Conf)
	if props == nil {
		props = map[string]string{}
	}
	props["glint.app.id"] = d.appID
	props["glint.driver.url"] = d.cfg.URL
	props["spark.app.name"] = d.cfg.Name
	return connect.NewResponse(&driverv1.RetrieveSparkPropsResponse{Properties: props}), nil
}

func (d *Driver) waitRegistered(ctx context.Context) error {
	select {
	case <-d.registered:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("driver not registered with a master yet: %w: %w", fault.ErrUnavailable, ctx.Err())
	}
}

// RegisterExecutor admits an executor of this application; a duplicate id or
// another application's executor is refused, and the executor then exits.
// The same executor registering again (same id, URL and cores: it tries again
// when a call got no answer, which the driver may have taken) is answered as
// the first time, and nothing changes.
func (d *Driver) RegisterExecutor(ctx context.Context, req *connect.Request[driverv1.RegisterExecutorRequest]) (*connect.Response[driverv1.RegisterExecutorResponse], error) {
	m := req.Msg
	if err := d.waitRegistered(ctx); err != nil {
		return nil, rpc.Error(err)
	}
	if err := ids.ValidateExecutor(m.GetExecutorId()); err != nil {
		return nil, rpc.Error(err)
	}
	if m.GetCores() <= 0 {
		return nil, rpc.Error(fmt.Errorf("register executor %d: %w: cores %d must be positive", m.GetExecutorId(), fault.ErrInvalidArgument, m.GetCores()))
	}
	url, err := rpc.NormalizeURL(m.GetExecutorUrl())
	if err != nil {
		return nil, rpc.Error(fmt.Errorf("register executor %d: %w: %w", m.GetExecutorId(), fault.ErrInvalidArgument, err))
	}
	if m.GetPropsAsked() {
		if err := d.awaitProps(ctx, m.GetAppId(), m.GetExecutorId()); err != nil {
			return nil, rpc.Error(err)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if m.GetAppId() != d.appID {
		return nil, rpc.Error(fmt.Errorf("register executor %d: %w: unknown application %q (this driver runs %s)",
			m.GetExecutorId(), fault.ErrNotFound, m.GetAppId(), d.appID))
	}
	e := d.executorLocked(m.GetExecutorId())
	switch {
	case e.registered && !e.removed && e.url == url && e.cores == m.GetCores():
		d.log.InfoContext(ctx, "executor registered again", "executor", e.id, "url", url)
		return connect.NewResponse(&driverv1.RegisterExecutorResponse{}), nil
	case e.registered:
		return nil, rpc.Error(fmt.Errorf("register executor %d: %w: duplicate executor id", e.id, fault.ErrAlreadyExists))
	case e.removed:
		return nil, rpc.Error(fmt.Errorf("register executor %d: %w: the executor was already removed", e.id, fault.ErrFailedPrecondition))
	}
	trace.SpanFromContext(ctx).SetAttributes(telemetry.AppID.String(d.appID), telemetry.ExecutorID.Int(int(e.id)), telemetry.Cores.Int(int(m.GetCores())))
	e.registered, e.url, e.cores = true, url, m.GetCores()
	e.client = executorv1connect.NewExecutorServiceClient(d.http, url, rpc.ClientOptions(d.cfg.TracerProvider, d.appToken)...)
	e.mailbox = rpc.NewMailbox(context.Background())
	e.timeline.Registered = time.Now()
	e.trace = trace.SpanContextFromContext(ctx)
	if d.firstRegistered.IsZero() {
		d.firstRegistered = e.timeline.Registered
	}
	d.log.InfoContext(ctx, "registered executor", "executor", e.id, "host", m.GetHostname(), "cores", e.cores, "url", url)
	return connect.NewResponse(&driverv1.RegisterExecutorResponse{}), nil
}

// awaitProps waits until executor id of appID retrieved its properties: it
// asked for them on the same connection just before registering, without
// waiting for the answer (RegisterExecutorRequest.props_asked), and is
// registered only once they were retrieved, as Spark's executor is.
func (d *Driver) awaitProps(ctx context.Context, appID string, id int32) error {
	d.mu.Lock()
	if appID != d.appID {
		d.mu.Unlock()
		return nil // refused as any registration for another application
	}
	retrieved := d.executorLocked(id).propsRetrieved
	d.mu.Unlock()
	select {
	case <-retrieved:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("register executor %d: %w: it asked for its properties and did not retrieve them: %w",
			id, fault.ErrFailedPrecondition, ctx.Err())
	}
}

// LaunchedExecutor marks a registered executor ready: its cores are offered
// tasks only now, so no task reaches an executor that is not ready (SPARK-29287).
func (d *Driver) LaunchedExecutor(ctx context.Context, req *connect.Request[driverv1.LaunchedExecutorRequest]) (*connect.Response[driverv1.LaunchedExecutorResponse], error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.executors[req.Msg.GetExecutorId()]
	if !ok || !e.registered || e.removed {
		return nil, rpc.Error(fmt.Errorf("executor %d launched: %w: not registered", req.Msg.GetExecutorId(), fault.ErrFailedPrecondition))
	}
	trace.SpanFromContext(ctx).SetAttributes(telemetry.AppID.String(d.appID), telemetry.ExecutorID.Int(int(e.id)))
	if !e.launched {
		e.launched = true
		e.launchedSpan = telemetry.Caller(ctx)
		// Its cores count toward minRegisteredResourcesRatio once they can
		// be offered tasks: a job that starts with an executor still between
		// RegisterExecutor and LaunchedExecutor may never give it a task.
		d.totalCores += e.cores
		d.signalOffersLocked()
		d.coresFreedLocked(ctx, e) // idle until offered a task
		d.makeOffersLocked(ctx)
	}
	return connect.NewResponse(&driverv1.LaunchedExecutorResponse{}), nil
}

// removeExecutorLocked forgets a finished executor; its running tasks are
// queued again. Spark's executorRemoved: unless the application caused the
// loss (its worker was lost or is decommissioning), they do not count toward
// spark.task.maxFailures.
func (d *Driver) removeExecutorLocked(ctx context.Context, e *executorData, reason string, causedByApp bool) {
	if e.removed {
		return
	}
	e.removed = true
	d.log.Info("removed executor", "executor", e.id, "reason", reason)
	if e.launched {
		d.totalCores -= e.cores
	}
	for id, rt := range d.running {
		if rt.executor != e {
			continue
		}
		delete(d.running, id)
		if causedByApp {
			d.taskFailedLocked(ctx, rt, reason)
		} else if !rt.set.finished() {
			d.log.Info("task lost with its executor, queued again", "task", rt.set.task, "index", rt.index, "reason", reason)
			rt.set.pending = append([]int{rt.index}, rt.set.pending...)
		}
	}
	d.makeOffersLocked(ctx)
}

// removeUnreachableLocked removes e if err, a call's failure, is no answer
// from it: it could not be reached, the connection broke, or the call timed
// out (Spark's onDisconnected). Its tasks are queued again without counting
// as failures; the master is told nothing, as e's worker reports its end.
// It says whether e was removed; a refusal, e's answer, is left to the
// caller.
func (d *Driver) removeUnreachableLocked(ctx context.Context, e *executorData, err error) bool {
	if !rpc.Answerless(err) {
		return false
	}
	d.removeExecutorLocked(ctx, e, fmt.Sprintf("executor unreachable: %v", err), false)
	return true
}

// stopExecutors tells every ready executor to stop (Spark's StopExecutors).
func (d *Driver) stopExecutors(ctx context.Context) {
	d.mu.Lock()
	var execs []*executorData
	for _, e := range d.executors {
		if e.registered && !e.removed {
			execs = append(execs, e)
		}
	}
	d.mu.Unlock()
	var wg sync.WaitGroup
	for _, e := range execs {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if _, err := e.client.StopExecutor(cctx, stopRequest()); err != nil {
				d.log.Debug("stop executor", "executor", e.id, "err", err)
			}
		})
	}
	wg.Wait()
}

// stopRequest is a StopExecutor call after which the driver hangs up on the
// executor: with "Connection: close", its HTTP/2 connection closes as soon as
// no call is open on it. An executor closes its connections and exits once
// its callers hung up after its last answer (rpc.Serve), or a grace period
// after it, which would keep its cores from the next application.
func stopRequest() *connect.Request[executorv1.StopExecutorRequest] {
	req := connect.NewRequest(&executorv1.StopExecutorRequest{})
	req.Header().Set("Connection", "close")
	return req
}

// observeLaunchLocked records e's launch phases once all their times are known:
// the worker's times arrive in ExecutorUpdated, which may come after the
// executor already registered and got its first task.
func (d *Driver) observeLaunchLocked(e *executorData) {
	t := e.timeline
	if e.observed || t.Scheduled.IsZero() || t.Launched.IsZero() || t.Started.IsZero() || t.FirstTask.IsZero() {
		return
	}
	e.observed = true
	d.metrics.observeLaunch(t, e.trace, d.registeredAt, d.firstRegistered)
}

// Timelines returns each executor's launch timeline, by executor id.
func (d *Driver) Timelines() []Timeline {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]Timeline, 0, len(d.executors))
	for _, e := range d.executors {
		t := e.timeline
		t.WorkerID = e.workerID
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b Timeline) int { return int(a.ExecutorID - b.ExecutorID) })
	return out
}
