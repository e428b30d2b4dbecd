package master

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/timestamppb"

	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	workerv1 "github.com/glint-cluster/glint/pkg/api/glint/worker/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/worker/v1/workerv1connect"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry"
	"github.com/glint-cluster/glint/pkg/telemetry/prom"
	"github.com/glint-cluster/glint/services/master/schedule"
)

// scheduleAndUnlock ends an event: when its changes set needSchedule it makes
// the event's one schedule pass, then it releases mu. Every handler, timer and
// send callback that changes state under mu releases mu with it.
func (s *Server) scheduleAndUnlock(ctx context.Context) {
	defer s.mu.Unlock()
	s.passLocked(ctx)
}

// passLocked makes the schedule pass asked for, if one was.
func (s *Server) passLocked(ctx context.Context) {
	if s.needSchedule {
		s.needSchedule = false
		s.scheduleLocked(ctx)
	}
}

// scheduleLocked is Spark's Master.schedule(): it snapshots free resources and
// waiting demand, lets schedule decide, and launches what it placed.
func (s *Server) scheduleLocked(ctx context.Context) {
	if s.status != statusAlive {
		return
	}
	snap := schedule.Snapshot{SpreadOut: s.cfg.SpreadOut}
	now := s.now()
	for _, d := range s.waitingDrivers {
		if now.Before(d.relaunchAfter) {
			continue // backing off after its launch failed
		}
		snap.Drivers = append(snap.Drivers, schedule.DriverDemand{ID: d.id, Cores: d.desc.GetCores(), MemoryMiB: d.desc.GetMemoryMib()})
	}
	for _, a := range s.appQueue {
		if now.Before(a.relaunchAfter) {
			continue // backing off after its executors failed
		}
		snap.Apps = append(snap.Apps, schedule.AppDemand{
			ID: a.id, CoresLeft: a.coresLeft(), CoresPerExecutor: a.desc.GetCoresPerExecutor(),
			MemoryPerExecutorMiB: a.desc.GetMemoryPerExecutorMib(), ExecutorsLeft: a.executorLimit - a.liveExecutors,
		})
	}
	// A pass without demand — most passes, as every registration and
	// executor end asks for one — does not look at the workers.
	if len(snap.Drivers) > 0 || slices.ContainsFunc(snap.Apps, schedule.AppDemand.WantsExecutors) {
		snap.Workers = make([]schedule.WorkerSlot, 0, s.workers.len())
		for w := range s.workers.all() {
			if w.state == masterv1.WorkerState_WORKER_STATE_ALIVE {
				snap.Workers = append(snap.Workers, schedule.WorkerSlot{
					ID: w.id, Cores: w.cores, MemoryMiB: w.memoryMiB,
					CoresFree: w.cores - w.coresUsed, MemoryFreeMiB: w.memoryMiB - w.memoryUsedMiB,
				})
			}
		}
	}
	started := time.Now()
	plan := schedule.Schedule(snap, s.cfg.Rand)
	ended := time.Now()
	// The pass's exemplar is the trace of the first application it served.
	exemplar := trace.SpanContextFromContext(ctx)
	for _, p := range plan.Drivers {
		d := s.drivers[p.DriverID]
		sctx, span := s.scheduleSpan(ctx, d.trace, started, telemetry.DriverID.String(d.id))
		s.launchDriverLocked(sctx, s.workers.byID[p.WorkerID], d)
		span.End(trace.WithTimestamp(ended))
	}
	for i := 0; i < len(plan.Executors); {
		a := s.apps[plan.Executors[i].AppID]
		sctx, span := s.scheduleSpan(ctx, a.trace, started, telemetry.AppID.String(a.id))
		if i == 0 {
			exemplar = span.SpanContext()
		}
		for ; i < len(plan.Executors) && plan.Executors[i].AppID == a.id; i++ {
			p := plan.Executors[i]
			s.launchExecutorLocked(sctx, s.workers.byID[p.WorkerID], a, p.Cores, p.MemoryMiB)
		}
		span.End(trace.WithTimestamp(ended))
	}
	prom.ObserveInTrace(exemplar, s.metrics.scheduleDuration, ended.Sub(started).Seconds())
	for _, a := range s.appQueue {
		// Only an application without executors is stuck; say why.
		switch {
		case now.Before(a.relaunchAfter):
			a.statusMessage = fmt.Sprintf("%d executors failed in a row; launching more in %s",
				max(a.retryCount, a.quickFailures), a.relaunchAfter.Sub(now).Round(time.Second))
			if last := a.lastEnd(); last != "" {
				a.statusMessage += "; last: " + last
			}
		case a.liveExecutors == 0:
			a.statusMessage = plan.Waiting[a.id]
		default:
			a.statusMessage = ""
		}
		// One that ran and lost all its executors without getting new ones
		// it wants waits again, as it did before its first.
		if a.state == masterv1.ApplicationState_APPLICATION_STATE_RUNNING && len(a.executors) == 0 && a.executorLimit > 0 &&
			!a.driverStopping && a.statusMessage != "" {
			if err := a.setState(masterv1.ApplicationState_APPLICATION_STATE_WAITING); err != nil {
				s.log.Warn("application waits again", "err", err)
			}
		}
	}
}

// Relaunch backoff: after an executor failure an application gets no new
// executor for relaunchWait(quick failures in a row) — 1 s, doubling, at
// most a minute, as for a supervised driver — so a command that exits at
// once cannot make a launch storm. An executor that ran healthyRun before it
// failed starts the backoff over.
const (
	relaunchBase = time.Second
	relaunchCap  = time.Minute
	healthyRun   = 5 * time.Second
)

func relaunchWait(failures int) time.Duration {
	wait := relaunchBase
	for i := 1; i < failures && wait < relaunchCap; i++ {
		wait *= 2
	}
	return min(wait, relaunchCap)
}

// backOffLocked holds a's next executors back after a failure, and wakes the
// scheduler when the wait is over.
func (s *Server) backOffLocked(a *appInfo) {
	wait := relaunchWait(a.quickFailures)
	a.relaunchAfter = s.now().Add(wait)
	time.AfterFunc(wait, s.wake)
}

// wake runs a schedule pass: a backoff ended.
func (s *Server) wake() {
	s.mu.Lock()
	s.needSchedule = true
	s.scheduleAndUnlock(s.ctx)
}

// scheduleSpan starts the "schedule" span of one application's (or driver's)
// placements in one schedule() pass, timed as the pass. It belongs to the
// application's trace (parent); when another event triggered the pass — a
// worker registered, an executor of another app ended — it links to it.
func (s *Server) scheduleSpan(ctx context.Context, parent trace.SpanContext, started time.Time, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{trace.WithTimestamp(started), trace.WithAttributes(attrs...)}
	if parent.IsValid() {
		if trigger := trace.SpanContextFromContext(ctx); trigger.IsValid() && trigger.TraceID() != parent.TraceID() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: trigger}))
		}
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	}
	return s.tracer.Start(ctx, "schedule", opts...)
}

// postToWorker posts send to w's mailbox with w's client, both made when w
// is first sent something: most workers of a large cluster may never be. A
// deposed master sends nothing.
func (s *Server) postToWorker(ctx context.Context, w *workerInfo, send func(context.Context, workerv1connect.WorkerServiceClient)) {
	if c, m := s.toWorker(w); m != nil {
		m.Post(ctx, func(ctx context.Context) { send(ctx, c) })
	}
}

// launchOnWorker is postToWorker for a launch: the launches posted one
// after another go to w together (rpc.Mailbox.PostAlongside).
func (s *Server) launchOnWorker(ctx context.Context, w *workerInfo, send func(context.Context, workerv1connect.WorkerServiceClient)) {
	if c, m := s.toWorker(w); m != nil {
		m.PostAlongside(ctx, func(ctx context.Context) { send(ctx, c) })
	}
}

// toWorker is w's client and mailbox, made on first use; no mailbox if the
// master was deposed.
func (s *Server) toWorker(w *workerInfo) (workerv1connect.WorkerServiceClient, *rpc.Mailbox) {
	if s.status == statusDeposed {
		return nil, nil
	}
	if w.client == nil {
		w.client = workerv1connect.NewWorkerServiceClient(s.http, w.url, rpc.ClientOptions(s.cfg.TracerProvider, s.cfg.ClusterToken)...)
		w.mailbox = rpc.NewMailbox(s.ctx)
	}
	return w.client, w.mailbox
}

// postToDriver posts send to a's driver's mailbox, unless the master was deposed.
func (s *Server) postToDriver(ctx context.Context, a *appInfo, send func(context.Context)) {
	if s.status != statusDeposed {
		a.mailbox.Post(ctx, send)
	}
}

// The send functions below are every message the master sends to workers and
// drivers. Each is posted to the peer's mailbox, so a peer sees its messages
// in the order the master sent them and no caller waits on a slow peer; the
// call carries ctx's span context (the schedule span, for launches).

// sendLaunchDriver tells w to launch d. A call that failed without an
// answer (it timed out, or the connection broke) may have reached the
// worker: it is sent again, as a launch of an executor is, and the worker
// refuses a driver id it runs or ran (AlreadyExists), which tells the master
// it was launched. A launch that certainly did not happen — the worker's port
// refused the connection, or the worker refused it for now (busy, or it
// follows another master) — puts the driver back among the waiting, to be
// placed again after a backoff; so does any failed launch of a supervised
// driver. Any other refusal ends an unsupervised driver in ERROR.
func (s *Server) sendLaunchDriver(ctx context.Context, w *workerInfo, d *driverInfo) {
	s.postLaunchDriver(ctx, w, d, 0)
}

func (s *Server) postLaunchDriver(ctx context.Context, w *workerInfo, d *driverInfo, retry int) {
	req := &workerv1.LaunchDriverRequest{MasterUrl: s.cfg.URL, Epoch: s.cfg.Epoch, Registration: w.registration, DriverId: d.id, Description: d.desc, SubmitToken: d.submitToken}
	s.launchOnWorker(ctx, w, func(ctx context.Context, c workerv1connect.WorkerServiceClient) {
		if retry > 0 && !s.launchingDriver(w, d) {
			return
		}
		_, err := c.LaunchDriver(ctx, connect.NewRequest(req))
		code := connect.CodeOf(err)
		switch {
		case err == nil, retry > 0 && code == connect.CodeAlreadyExists:
			s.mu.Lock()
			if d.worker == w {
				d.launched = true
			}
			s.mu.Unlock()
			return
		case rpc.Answerless(err) && !gone(err):
			wait := min(launchRetryBase<<min(retry, 5), launchRetryCap)
			s.log.Warn("launch driver not taken yet; sending it again", "driver", d.id, "worker", w.id, "in", wait, "err", err)
			time.AfterFunc(wait, func() {
				s.mu.Lock()
				defer s.mu.Unlock()
				s.postLaunchDriver(ctx, w, d, retry+1)
			})
			return
		}
		s.log.Warn("launch driver failed", "driver", d.id, "worker", w.id, "err", err)
		s.mu.Lock()
		defer s.scheduleAndUnlock(ctx)
		if d.worker != w || lifecycle.DriverFinished(d.state) {
			return
		}
		reason := fmt.Sprintf("launch driver on worker %s: %v", w.id, err)
		if d.desc.GetSupervise() || notLaunched(code, err) {
			s.requeueDriverLocked(ctx, d, reason)
			return
		}
		s.removeDriverLocked(ctx, d, masterv1.DriverState_DRIVER_STATE_ERROR, reason)
	})
}

// launchingDriver reports whether d still waits for its launch on w.
func (s *Server) launchingDriver(w *workerInfo, d *driverInfo) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return d.worker == w && d.state == masterv1.DriverState_DRIVER_STATE_RUNNING && s.drivers[d.id] == d
}

// notLaunched reports whether a failed launch certainly did not start
// anything: nothing listened at the worker's address, or the worker refused
// the launch for now (it was busy, or followed another master).
func notLaunched(code connect.Code, err error) bool {
	return gone(err) || code == connect.CodeResourceExhausted || code == connect.CodeFailedPrecondition
}

// Retries of a LaunchExecutor whose outcome is unknown: after 250 ms,
// doubling, at most 5 s apart. A worker that is still reaping the executors
// of an application that just ended (the master freed their cores at once)
// refuses with ResourceExhausted: that launch is sent again too, at most
// maxBusyResends times (about a minute and a half), before it counts as a
// failed executor.
const (
	launchRetryBase = 250 * time.Millisecond
	launchRetryCap  = 5 * time.Second
	maxBusyResends  = 20
)

// sendLaunchExecutor tells e's worker to launch it. A worker that refuses it
// (but for a while for want of free resources) makes it a FAILED executor. A call that failed without an answer — it timed
// out, or the connection broke — may or may not have reached the worker, so
// the same launch is sent again while the executor is LAUNCHING: the worker
// refuses an executor id it launched already (AlreadyExists), which tells the
// master it runs. An executor given up on (killed, its worker lost) while a
// launch was on its way is killed by the worker when its next heartbeat
// lists it and the master does not know it.
func (s *Server) sendLaunchExecutor(ctx context.Context, e *executorInfo) {
	s.postLaunchExecutor(ctx, e, 0)
}

func (s *Server) postLaunchExecutor(ctx context.Context, e *executorInfo, retry int) {
	w, a := e.worker, e.app
	req := &workerv1.LaunchExecutorRequest{
		MasterUrl: s.cfg.URL, Epoch: s.cfg.Epoch, Registration: w.registration, AppId: a.id, ExecutorId: e.id, Description: a.desc, Cores: e.cores,
		MemoryMib: e.memoryMiB, AppToken: a.appToken,
	}
	s.launchOnWorker(ctx, w, func(ctx context.Context, c workerv1connect.WorkerServiceClient) {
		if retry > 0 && !s.launching(e) {
			return
		}
		_, err := c.LaunchExecutor(ctx, connect.NewRequest(req))
		code := connect.CodeOf(err)
		switch {
		case err == nil, retry > 0 && code == connect.CodeAlreadyExists:
			s.metrics.executorLaunches.WithLabelValues(launchOK).Inc()
			return
		case rpc.Answerless(err), code == connect.CodeResourceExhausted && retry < maxBusyResends:
			wait := min(launchRetryBase<<min(retry, 5), launchRetryCap)
			s.log.Warn("launch executor not taken yet; sending it again", "app", a.id, "executor", e.id, "worker", w.id, "in", wait, "err", err)
			time.AfterFunc(wait, func() {
				s.mu.Lock()
				defer s.mu.Unlock()
				s.postLaunchExecutor(ctx, e, retry+1)
			})
			return
		}
		s.metrics.executorLaunches.WithLabelValues(launchError).Inc()
		s.log.Warn("launch executor failed", "app", a.id, "executor", e.id, "worker", w.id, "err", err)
		s.mu.Lock()
		defer s.scheduleAndUnlock(ctx)
		if err := s.executorStateChangedLocked(ctx, e, masterv1.ExecutorState_EXECUTOR_STATE_FAILED,
			fmt.Sprintf("launch executor on worker %s: %v", w.id, err), nil, nil, stepRequest); err != nil {
			s.log.Debug("launch executor failure after executor ended", "err", err)
		}
	})
}

// launching reports whether e still waits for its launch.
func (s *Server) launching(e *executorInfo) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return e.state == masterv1.ExecutorState_EXECUTOR_STATE_LAUNCHING && e.app.executors[e.id] == e && !e.app.finished()
}

// sendExecutorAdded tells e's driver that e was placed.
func (s *Server) sendExecutorAdded(ctx context.Context, e *executorInfo) {
	w, a := e.worker, e.app
	req := &driverv1.ExecutorAddedRequest{
		Epoch: s.cfg.Epoch, AppId: a.id, ExecutorId: e.id, WorkerId: w.id, HostPort: w.address(),
		Cores: e.cores, MemoryMib: e.memoryMiB, ScheduledAt: timestamppb.New(e.scheduledAt),
	}
	s.postToDriver(ctx, a, func(ctx context.Context) {
		if _, err := a.client.ExecutorAdded(ctx, connect.NewRequest(req)); err != nil {
			s.log.Warn("tell driver executor added", "app", a.id, "executor", e.id, "err", err)
		}
	})
}

// executorTimes are the worker's timestamps for an executor's launch.
type executorTimes struct {
	launched, started *timestamppb.Timestamp
}

// sendExecutorUpdated tells e's driver e's state; workerLost says e's worker
// was lost, times (if any) are the worker's launch timestamps.
func (s *Server) sendExecutorUpdated(ctx context.Context, e *executorInfo, workerLost bool, times *executorTimes) {
	a := e.app
	req := &driverv1.ExecutorUpdatedRequest{
		Epoch: s.cfg.Epoch, AppId: a.id, ExecutorId: e.id, State: e.state, Message: e.message, ExitStatus: e.exitStatus, WorkerLost: workerLost,
	}
	if times != nil {
		req.LaunchedAt, req.StartedAt = times.launched, times.started
	}
	s.postToDriver(appContext(ctx, a), a, func(ctx context.Context) {
		if _, err := a.client.ExecutorUpdated(ctx, connect.NewRequest(req)); err != nil {
			s.log.Warn("tell driver executor updated", "app", a.id, "executor", e.id, "err", err)
		}
	})
}

// sendExecutorsRecovered tells a's driver which of its executors this
// master adopted while it recovered, before it launches any other: the
// driver removes those it holds that ended while no master led.
func (s *Server) sendExecutorsRecovered(ctx context.Context, a *appInfo) {
	req := &driverv1.ExecutorsRecoveredRequest{Epoch: s.cfg.Epoch, AppId: a.id, ExecutorIds: slices.Sorted(maps.Keys(a.executors)), NextExecutorId: a.nextExecID}
	s.postToDriver(ctx, a, func(ctx context.Context) {
		if _, err := a.client.ExecutorsRecovered(ctx, connect.NewRequest(req)); err != nil {
			s.log.Warn("tell driver the executors recovered", "app", a.id, "err", err)
		}
	})
}

// sendApplicationRemoved tells a's driver that a ended in state.
func (s *Server) sendApplicationRemoved(ctx context.Context, a *appInfo, state masterv1.ApplicationState, message string) {
	req := &driverv1.ApplicationRemovedRequest{Epoch: s.cfg.Epoch, AppId: a.id, Message: fmt.Sprintf("%s: %s", lifecycle.Name(state), message)}
	s.postToDriver(ctx, a, func(ctx context.Context) {
		if _, err := a.client.ApplicationRemoved(ctx, connect.NewRequest(req)); err != nil {
			s.log.Debug("tell driver application removed", "app", a.id, "err", err)
		}
	})
}

// sendApplicationFinished tells every ALIVE worker on which a had executors
// that a ended, so they clean up after it. (Spark tells every worker; at
// 10,000 workers that is 10,000 messages for each application's end.)
func (s *Server) sendApplicationFinished(ctx context.Context, a *appInfo) {
	req := &workerv1.ApplicationFinishedRequest{MasterUrl: s.cfg.URL, Epoch: s.cfg.Epoch, AppId: a.id}
	for w := range a.workers {
		if w.state != masterv1.WorkerState_WORKER_STATE_ALIVE {
			continue
		}
		s.postToWorker(appContext(ctx, a), w, func(ctx context.Context, c workerv1connect.WorkerServiceClient) {
			if _, err := c.ApplicationFinished(ctx, connect.NewRequest(req)); err != nil {
				s.log.Warn("tell worker application finished", "worker", w.id, "err", err)
			}
		})
	}
}

// sendKillExecutor tells e's worker to kill it.
func (s *Server) sendKillExecutor(ctx context.Context, e *executorInfo) {
	w := e.worker
	req := &workerv1.KillExecutorRequest{MasterUrl: s.cfg.URL, Epoch: s.cfg.Epoch, AppId: e.app.id, ExecutorId: e.id}
	s.postToWorker(appContext(ctx, e.app), w, func(ctx context.Context, c workerv1connect.WorkerServiceClient) {
		if _, err := c.KillExecutor(ctx, connect.NewRequest(req)); err != nil {
			s.log.Debug("kill executor", "app", e.app.id, "executor", e.id, "worker", w.id, "err", err)
		}
	})
}

// sendKillDriver tells d's worker to kill it; the worker reports the end.
func (s *Server) sendKillDriver(ctx context.Context, d *driverInfo) {
	w := d.worker
	req := &workerv1.KillDriverRequest{MasterUrl: s.cfg.URL, Epoch: s.cfg.Epoch, DriverId: d.id}
	s.postToWorker(ctx, w, func(ctx context.Context, c workerv1connect.WorkerServiceClient) {
		if _, err := c.KillDriver(ctx, connect.NewRequest(req)); err != nil {
			s.log.Warn("kill driver", "driver", d.id, "worker", w.id, "err", err)
		}
	})
}
