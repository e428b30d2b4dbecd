package master

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	workerv1 "github.com/glint-cluster/glint/pkg/api/glint/worker/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/worker/v1/workerv1connect"
	"github.com/glint-cluster/glint/pkg/fault"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/services/master/store"
)

// The master's own states (Spark's RecoveryState), as /json and status show them.
const (
	statusAlive      = "ALIVE"
	statusRecovering = "RECOVERING"
	// statusDeposed is a leader whose write etcd refused: another leads.
	statusDeposed = "DEPOSED"
)

// Recovery (Spark's beginRecovery/completeRecovery): a master whose Store
// kept state starts RECOVERING. It lists the kept workers UNKNOWN and the
// kept applications UNKNOWN, tells them all MasterChanged, and adopts what
// they report — each worker re-registers with the executors and drivers it
// runs and the ends it kept, each driver's answer acknowledges its
// application — instead of launching anything again. Once every one
// answered or is known to be gone (it refused the connection, or a new
// worker registered at its address), or a worker timeout passed, it removes
// the silent ones, relaunches supervised drivers whose worker did not come
// back, tells each driver which of its executors it found (the driver
// removes the others: they ended while no master could report it), and
// becomes ALIVE. Meanwhile it schedules nothing and refuses
// submissions (Unavailable); clients retry.

// errRecovering refuses what must wait until the master recovered.
func (s *Server) errRecovering(what string) error {
	return fmt.Errorf("%s: %w: the master is recovering its state after a restart (until its workers and drivers report, at most %s); retry",
		what, fault.ErrUnavailable, s.cfg.WorkerTimeout)
}

// recoverLocked rebuilds the kept state, all UNKNOWN until it reports; with
// nothing active kept (a first start, or all ended), the master is ALIVE at
// once.
func (s *Server) recoverLocked(rec *store.Recovered) {
	now := s.now()
	s.nextAppNumber = int(rec.Counters.GetNextAppNumber())
	s.nextDriverNumber = int(rec.Counters.GetNextDriverNumber())
	for _, p := range rec.Workers {
		w := newWorkerInfo(p.GetId(), p.GetHost(), p.GetPort(), p.GetWorkerUrl(), p.GetCores(), p.GetMemoryMib(), now)
		w.state = masterv1.WorkerState_WORKER_STATE_UNKNOWN
		s.workers.add(w)
		s.unknownWorkers++
	}
	s.recoverCompletedLocked(rec)
	apps := slices.SortedFunc(slices.Values(rec.Applications), func(a, b *masterv1.PersistedApplication) int {
		return cmp.Or(a.GetStartTime().AsTime().Compare(b.GetStartTime().AsTime()), cmp.Compare(a.GetId(), b.GetId()))
	})
	for _, p := range apps {
		if p.GetCompleted() != nil {
			continue
		}
		a := s.newApp(p.GetId(), p.GetDescription(), p.GetDriverUrl(), p.GetDriverId(), p.GetAppToken(), p.GetMasterToken(),
			p.GetStartTime().AsTime(), parseTraceparent(p.GetTraceparent()))
		a.state = masterv1.ApplicationState_APPLICATION_STATE_UNKNOWN
		a.owner = p.GetOwner()
		a.coresPeak = p.GetCoresPeak()
		a.nextExecID = p.GetNextExecutorId()
		// What it asked for before the master restarted is not known: one
		// placed now was wanted since then at the latest.
		a.ask(s.now(), masterv1.ExecutorCause_EXECUTOR_CAUSE_UNSPECIFIED)
		if p.ExecutorLimit != nil {
			a.executorLimit = int(p.GetExecutorLimit())
		}
		s.apps[a.id] = a
		s.appQueue = append(s.appQueue, a)
		s.activeBytes += a.size
		s.unknownApps++
	}
	superseded := supersededDrivers(rec.Drivers)
	for _, p := range rec.Drivers {
		if p.GetCompleted() != nil {
			continue
		}
		if superseded[p.GetId()] {
			s.log.Warn("dropping a kept driver that its submission made again: the write that kept it failed, or seemed to, and the client's retry made the later one",
				"driver", p.GetId(), "submission", p.GetSubmissionId())
			s.keepLocked("driver " + p.GetId())
			continue
		}
		d := &driverInfo{
			id: p.GetId(), desc: p.GetDescription(), size: proto.Size(p.GetDescription()),
			state: masterv1.DriverState_DRIVER_STATE_SUBMITTED, submitTime: p.GetSubmitTime().AsTime(),
			trace: parseTraceparent(p.GetTraceparent()), submitToken: p.GetSubmitToken(), owner: p.GetOwner(),
			recoveredOn: p.GetWorkerId(), submission: p.GetSubmissionId(),
		}
		if d.recoveredOn != "" {
			d.state = masterv1.DriverState_DRIVER_STATE_RUNNING
			d.launched = true
		} else {
			s.waitingDrivers = append(s.waitingDrivers, d)
		}
		if s.cfg.Tokens != nil && d.submitToken != "" {
			s.cfg.Tokens.AddNamed(rpc.Submit, d.id, d.submitToken)
		}
		s.drivers[d.id] = d
		s.activeBytes += d.size
	}
	// A kept application its driver ended FINISHED, the driver still
	// active, waits for the driver's end, as it did on the last master.
	for _, a := range s.completedApps.items {
		if _, ok := s.drivers[a.driverID]; ok && a.state == masterv1.ApplicationState_APPLICATION_STATE_FINISHED {
			s.unconfirmed[a.driverID] = append(s.unconfirmed[a.driverID], a)
		}
	}
	if !rec.Active() {
		return
	}
	s.status = statusRecovering
	s.log.Info("recovering", "workers", len(rec.Workers), "applications", len(rec.Applications), "drivers", len(rec.Drivers))
}

// supersededDrivers are the kept drivers whose submission id made a later
// driver too. A SubmitDriver whose write failed without saying whether it
// was kept (etcd's answer lost) is refused, so its client retries and the
// master makes another driver; if the first write was kept after all, both
// are in the store. The client was answered with the later one alone, so
// the earlier is no one's and must never run.
func supersededDrivers(kept []*masterv1.PersistedDriver) map[string]bool {
	type made struct {
		id string
		at time.Time
	}
	later := func(a, b made) bool {
		return cmp.Or(a.at.Compare(b.at), cmp.Compare(len(a.id), len(b.id)), cmp.Compare(a.id, b.id)) > 0
	}
	newest := map[string]made{}
	for _, p := range kept {
		if p.GetSubmissionId() == "" {
			continue
		}
		m := made{p.GetId(), p.GetSubmitTime().AsTime()}
		if c := p.GetCompleted(); c != nil {
			m.at = c.GetSubmitTime().AsTime()
		}
		if n, ok := newest[p.GetSubmissionId()]; !ok || later(m, n) {
			newest[p.GetSubmissionId()] = m
		}
	}
	out := map[string]bool{}
	for _, p := range kept {
		if sub := p.GetSubmissionId(); sub != "" && newest[sub].id != p.GetId() {
			out[p.GetId()] = true
		}
	}
	return out
}

// recoverCompletedLocked lists the kept completed applications and drivers
// as they were shown, oldest end first, within the completed lists' bounds.
func (s *Server) recoverCompletedLocked(rec *store.Recovered) {
	var apps []*masterv1.ApplicationInfo
	for _, p := range rec.Applications {
		if c := p.GetCompleted(); c != nil && c.GetId() == p.GetId() {
			apps = append(apps, c)
		}
	}
	slices.SortFunc(apps, func(a, b *masterv1.ApplicationInfo) int {
		return cmp.Or(a.GetEndTime().AsTime().Compare(b.GetEndTime().AsTime()), cmp.Compare(a.GetId(), b.GetId()))
	})
	for _, c := range apps {
		a := &appInfo{id: c.GetId(), state: c.GetState(), driverID: c.GetDriverId(), owner: c.GetOwner(), shown: c}
		for _, o := range s.completedApps.add(a, proto.Size(c), s.cfg.RetainedApplications, s.cfg.RetainedBytes) {
			s.keepLocked("application " + o.id)
		}
	}
	var drivers []*masterv1.PersistedDriver
	for _, p := range rec.Drivers {
		if c := p.GetCompleted(); c != nil && c.GetId() == p.GetId() {
			drivers = append(drivers, p)
		}
	}
	slices.SortFunc(drivers, func(a, b *masterv1.PersistedDriver) int {
		return cmp.Or(a.GetCompleted().GetSubmitTime().AsTime().Compare(b.GetCompleted().GetSubmitTime().AsTime()), cmp.Compare(a.GetId(), b.GetId()))
	})
	for _, p := range drivers {
		c := p.GetCompleted()
		d := &driverInfo{id: c.GetId(), state: c.GetState(), owner: c.GetOwner(), shown: c, submission: p.GetSubmissionId()}
		for _, o := range s.completedDrivers.add(d, proto.Size(c), s.cfg.RetainedDrivers, s.cfg.RetainedBytes) {
			s.keepLocked("driver " + o.id)
		}
	}
}

// beginRecovery tells every kept worker and driver that this master is
// back (MasterChanged) and completes the recovery after a worker timeout
// at the latest.
func (s *Server) beginRecovery(ctx context.Context) {
	ctx, span := s.tracer.Start(ctx, "recovery")
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recoverySpan = span
	workerReq := &workerv1.MasterChangedRequest{MasterUrl: s.cfg.URL, Epoch: s.cfg.Epoch}
	for w := range s.workers.all() {
		s.postToWorker(ctx, w, func(ctx context.Context, c workerv1connect.WorkerServiceClient) {
			if _, err := c.MasterChanged(ctx, connect.NewRequest(workerReq)); err != nil {
				s.log.Warn("tell worker the master changed", "worker", w.id, "err", err)
				if gone(err) {
					s.mu.Lock()
					defer s.scheduleAndUnlock(ctx)
					if w.state == masterv1.WorkerState_WORKER_STATE_UNKNOWN {
						s.removeWorkerLocked(ctx, w, "it refused the recovering master's connection")
						s.maybeCompleteRecoveryLocked(ctx)
					}
				}
			}
		})
	}
	for _, a := range s.appQueue {
		s.tellMasterChangedLocked(ctx, a, 0)
	}
	time.AfterFunc(s.cfg.WorkerTimeout, func() {
		s.mu.Lock()
		defer s.scheduleAndUnlock(s.ctx)
		s.completeRecoveryLocked(s.ctx)
	})
}

// masterChangedRetry is the first wait before MasterChanged is told again
// to a driver that answered Unavailable; each retry doubles it, to a second.
const masterChangedRetry = 100 * time.Millisecond

// tellMasterChangedLocked tells a's driver that this master leads now, and
// tells it again, after retry backoffs, while it answers Unavailable (its
// registration, which this master recovered, is not answered yet) and the
// recovery lasts.
func (s *Server) tellMasterChangedLocked(ctx context.Context, a *appInfo, retry int) {
	req := &driverv1.MasterChangedRequest{AppId: a.id, MasterUrl: s.cfg.URL, Epoch: s.cfg.Epoch}
	s.postToDriver(ctx, a, func(ctx context.Context) {
		if _, err := a.client.MasterChanged(ctx, connect.NewRequest(req)); err != nil {
			s.log.Warn("tell driver the master changed", "app", a.id, "err", err)
			if connect.CodeOf(err) == connect.CodeUnavailable && !gone(err) {
				time.AfterFunc(min(masterChangedRetry<<retry, time.Second), func() {
					s.mu.Lock()
					defer s.mu.Unlock()
					if s.status == statusRecovering && a.state == masterv1.ApplicationState_APPLICATION_STATE_UNKNOWN {
						s.tellMasterChangedLocked(ctx, a, retry+1)
					}
				})
				return
			}
			if gone(err) {
				s.mu.Lock()
				defer s.scheduleAndUnlock(ctx)
				if a.state == masterv1.ApplicationState_APPLICATION_STATE_UNKNOWN {
					s.removeApplicationLocked(ctx, a, masterv1.ApplicationState_APPLICATION_STATE_FAILED,
						"its driver refused the recovering master's connection")
					s.maybeCompleteRecoveryLocked(ctx)
				}
				return
			}
			// A driver follows only the masters it was given: one that
			// was given another URL for this master (a Service in front
			// of the masters) refuses to follow this one's, yet lives
			// and reaches a leader through its own — as its answer to
			// the master's Ping shows.
			if !connect.IsWireError(err) || !s.probe(ctx, a.client, a.id) {
				return
			}
			s.log.Info("driver keeps its own master URLs", "app", a.id)
		}
		s.mu.Lock()
		defer s.scheduleAndUnlock(ctx)
		s.acknowledgeLocked(ctx, a)
	})
}

// gone reports whether a call failed because nothing listens at the peer's
// address any more: its process is gone (one that is paused or slow still
// accepts connections, and is waited for).
func gone(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED)
}

// acknowledgeLocked records that a's driver answered MasterChanged.
func (s *Server) acknowledgeLocked(ctx context.Context, a *appInfo) {
	if a.state != masterv1.ApplicationState_APPLICATION_STATE_UNKNOWN {
		return
	}
	to := masterv1.ApplicationState_APPLICATION_STATE_WAITING
	if len(a.executors) > 0 {
		to = masterv1.ApplicationState_APPLICATION_STATE_RUNNING
	}
	if err := a.setState(to); err != nil {
		s.log.Warn("acknowledge", "err", err)
		return
	}
	s.unknownApps--
	s.maybeCompleteRecoveryLocked(ctx)
}

// adoptLocked takes a re-registering UNKNOWN worker back with what it runs,
// and returns what it runs that the master does not know (to be killed).
func (s *Server) adoptLocked(ctx context.Context, w *workerInfo, m *masterv1.RegisterWorkerRequest) ([]*masterv1.RunningExecutor, []string) {
	if err := w.setState(masterv1.WorkerState_WORKER_STATE_ALIVE); err != nil {
		s.log.Warn("adopt worker", "err", err)
	}
	s.unknownWorkers--
	now := s.now()
	for _, r := range m.GetExecutors() {
		a := s.apps[r.GetAppId()]
		if a == nil || a.finished() || a.executors[r.GetExecutorId()] != nil || r.GetExecutorId() < 0 ||
			r.GetCores() < 1 || r.GetCores() > w.cores-w.coresUsed || r.GetMemoryMib() < 0 || r.GetMemoryMib() > w.memoryMiB-w.memoryUsedMiB {
			continue
		}
		e := &executorInfo{
			id: r.GetExecutorId(), app: a, worker: w, cores: r.GetCores(), memoryMiB: r.GetMemoryMib(),
			state: masterv1.ExecutorState_EXECUTOR_STATE_RUNNING, scheduledAt: now, runningSince: now, url: clip(r.GetUrl()),
		}
		a.holdExecutor(e)
		a.nextExecID = max(a.nextExecID, e.id+1)
		w.addExecutor(e)
		if a.state == masterv1.ApplicationState_APPLICATION_STATE_WAITING {
			if err := a.setState(masterv1.ApplicationState_APPLICATION_STATE_RUNNING); err != nil {
				s.log.Warn("adopt executor", "err", err)
			}
		}
		s.log.Info("adopted executor", "app", a.id, "executor", e.id, "worker", w.id)
	}
	for _, id := range m.GetDriverIds() {
		if d := s.drivers[id]; d != nil && d.worker == nil && d.recoveredOn == w.id {
			w.addDriver(d)
			s.log.Info("adopted driver", "driver", d.id, "worker", w.id)
		}
	}
	for _, d := range s.sortedDriversLocked() {
		if d.worker == nil && d.recoveredOn == w.id {
			s.lostLaunchLocked(ctx, d, w)
		}
	}
	s.log.Info("worker re-registered after recovery", "worker", w.id, "executors", len(w.executors), "drivers", len(w.drivers))
	s.maybeCompleteRecoveryLocked(ctx)
	return s.unknownLocked(w, m.GetExecutors(), m.GetDriverIds())
}

// lostLaunchLocked puts back among the waiting drivers d, kept as launched
// on w, which re-registered neither running d nor carrying its end: the
// LaunchDriver was lost with the master that sent it (the worker is the
// same process — a restarted one has another id — and keeps every end until
// a master acknowledges it), so d never ran, and w refuses a driver id it
// ran should the launch have reached it after all.
func (s *Server) lostLaunchLocked(ctx context.Context, d *driverInfo, w *workerInfo) {
	if err := d.setState(masterv1.DriverState_DRIVER_STATE_SUBMITTED); err != nil {
		s.log.Warn("requeue driver", "err", err)
		return
	}
	d.recoveredOn, d.launched = "", false
	d.message = fmt.Sprintf("its launch on worker %s was lost with the master that sent it; launching it again", w.id)
	s.log.InfoContext(ctx, "driver back among the waiting", "driver", d.id, "reason", d.message)
	s.keepLocked("driver " + d.id)
	s.waitingDrivers = append(s.waitingDrivers, d)
	s.needSchedule = true
}

func (s *Server) maybeCompleteRecoveryLocked(ctx context.Context) {
	if s.unknownWorkers == 0 && s.unknownApps == 0 {
		s.completeRecoveryLocked(ctx)
	}
}

// completeRecoveryLocked is Spark's completeRecovery: what did not answer is
// removed, supervised drivers whose worker did not come back relaunched.
func (s *Server) completeRecoveryLocked(ctx context.Context) {
	if s.status != statusRecovering {
		return
	}
	for _, w := range slices.Collect(s.workers.all()) {
		if w.state == masterv1.WorkerState_WORKER_STATE_UNKNOWN {
			s.removeWorkerLocked(ctx, w, "it did not re-register while the master recovered")
		}
	}
	for _, a := range slices.Clone(s.appQueue) {
		if a.state == masterv1.ApplicationState_APPLICATION_STATE_UNKNOWN {
			s.removeApplicationLocked(ctx, a, masterv1.ApplicationState_APPLICATION_STATE_FAILED,
				"its driver did not answer while the master recovered")
		}
	}
	for _, d := range s.sortedDriversLocked() {
		if d.state != masterv1.DriverState_DRIVER_STATE_RUNNING || d.worker != nil {
			continue
		}
		s.lostDriverLocked(ctx, d, fmt.Sprintf("its worker %s did not re-register while the master recovered", d.recoveredOn))
	}
	for _, a := range s.appQueue {
		s.sendExecutorsRecovered(ctx, a)
	}
	s.unknownWorkers, s.unknownApps = 0, 0
	s.status = statusAlive
	s.needSchedule = true
	s.log.Info("recovered; the master is ALIVE")
	if s.recoverySpan != nil {
		s.recoverySpan.End()
		s.recoverySpan = nil
	}
}

// sortedDriversLocked returns the active drivers by id.
func (s *Server) sortedDriversLocked() []*driverInfo {
	return slices.SortedFunc(func(yield func(*driverInfo) bool) {
		for _, d := range s.drivers {
			if !yield(d) {
				return
			}
		}
	}, func(a, b *driverInfo) int { return cmp.Compare(a.id, b.id) })
}

// formatTraceparent and parseTraceparent keep a span context as W3C's
// traceparent header.
func formatTraceparent(sc trace.SpanContext) string {
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), carrier)
	return carrier["traceparent"]
}

func parseTraceparent(tp string) trace.SpanContext {
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
	return trace.SpanContextFromContext(ctx)
}
