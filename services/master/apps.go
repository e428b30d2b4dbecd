package master

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/glint-cluster/glint/pkg/api/glint/driver/v1/driverv1connect"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/fault"
	"github.com/glint-cluster/glint/pkg/ids"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry"
	"github.com/glint-cluster/glint/pkg/telemetry/prom"
)

// registerApplicationLocked admits a validated application (Spark's
// registerApplication) of the caller c once the store keeps it, unless the
// master holds as many as it may; kept gets the write's outcome (nil: the
// application was kept before, and is answered at once).
func (s *Server) registerApplicationLocked(ctx context.Context, c caller, desc *masterv1.ApplicationDescription, driverURL, driverID, appToken, masterToken string) (*appInfo, <-chan error, error) {
	// A driver whose registration was answered but the answer lost (a
	// timeout, a failover) registers again with the same token: it gets the
	// application it has, not a second one — from a recovering master too,
	// for which the repeat acknowledges the kept application as its answer
	// to MasterChanged would (the driver, not knowing its id, refused that).
	for _, a := range s.appQueue {
		if a.appToken == appToken && a.driverURL == driverURL && appToken != "" && s.status != statusDeposed {
			if err := c.mayActOnApp("register", a); err != nil {
				return nil, nil, err
			}
			s.log.InfoContext(ctx, "registration repeated", "app", a.id, "driver_url", driverURL)
			s.acknowledgeLocked(ctx, a)
			return a, nil, nil
		}
	}
	for _, a := range s.pendingApps {
		if a.appToken == appToken && appToken != "" {
			return nil, nil, fmt.Errorf("register application: %w: its first registration, %s, is being kept; ask again", fault.ErrUnavailable, a.id)
		}
	}
	size := proto.Size(desc)
	if err := s.admitLocked("register application", len(s.apps)+len(s.pendingApps), MaxActiveApps, size); err != nil {
		return nil, nil, err
	}
	now := s.now()
	a := s.newApp(ids.App(now, s.nextAppNumber), desc, driverURL, driverID, appToken, masterToken, now, telemetry.Caller(ctx))
	a.owner = c.name
	if desc.InitialExecutorLimit != nil {
		a.executorLimit = int(desc.GetInitialExecutorLimit())
	}
	s.nextAppNumber++
	// The application is admitted once kept: a master that leads next
	// knows every application a driver was told it has.
	s.pendingApps[a.id] = a
	s.activeBytes += size
	s.keepLocked("counters")
	kept := make(chan error, 1)
	s.keepLocked("application "+a.id, func(err error) {
		delete(s.pendingApps, a.id)
		if err != nil {
			s.activeBytes -= size
			kept <- fmt.Errorf("register application: %w", err)
			return
		}
		s.apps[a.id] = a
		s.appQueue = append(s.appQueue, a)
		s.log.InfoContext(ctx, "registered application", "app", a.id, "name", desc.GetName(), "owner", a.owner, "driver_url", driverURL)
		trace.SpanFromContext(ctx).SetAttributes(telemetry.AppID.String(a.id))
		s.needSchedule = true
		kept <- nil
	})
	return a, kept, nil
}

// unlimitedExecutors is the executor limit of an application whose driver
// set none.
const unlimitedExecutors = math.MaxInt

// newApp makes an application's record, WAITING. The master calls the
// driver with masterToken.
func (s *Server) newApp(id string, desc *masterv1.ApplicationDescription, driverURL, driverID, appToken, masterToken string, started time.Time, tc trace.SpanContext) *appInfo {
	a := &appInfo{size: proto.Size(desc),
		id: id, desc: desc, driverURL: driverURL, driverID: driverID, masterToken: masterToken,
		state: masterv1.ApplicationState_APPLICATION_STATE_WAITING, startTime: started, driverSeen: s.now(),
		trace:     tc,
		executors: map[int32]*executorInfo{}, workers: map[*workerInfo]struct{}{}, executorLimit: unlimitedExecutors,
		appToken: appToken, askedAt: started, askedFor: masterv1.ExecutorCause_EXECUTOR_CAUSE_INITIAL,
		// What a driver answers is read up to the size any call may be.
		client: driverv1connect.NewDriverServiceClient(s.http, driverURL,
			append(rpc.ClientOptions(s.cfg.TracerProvider, masterToken), connect.WithReadMaxBytes(rpc.ReadMaxBytes))...),
		mailbox: rpc.NewMailbox(s.ctx),
	}
	if desc.MaxCores == nil {
		a.defaultCores = s.cfg.DefaultCores
	}
	return a
}

// removeApplicationLocked is Spark's removeApplication: the executors are
// killed, the driver (unless the app FINISHED) and every worker told, the app
// kept among the completed.
func (s *Server) removeApplicationLocked(ctx context.Context, a *appInfo, state masterv1.ApplicationState, message string) {
	if a.state == masterv1.ApplicationState_APPLICATION_STATE_UNKNOWN {
		// A kept application whose driver is gone: recovery waits for it no more.
		s.unknownApps--
	}
	if err := a.setState(state); err != nil {
		s.log.Warn("remove application", "err", err)
		return
	}
	s.log.Info("removing application", "app", a.id, "state", state.String(), "message", message)
	a.endTime = s.now()
	a.statusMessage = message
	delete(s.apps, a.id)
	s.appQueue = slices.DeleteFunc(s.appQueue, func(o *appInfo) bool { return o == a })
	s.activeBytes -= a.size
	dropped := s.completedApps.add(a, proto.Size(s.appProto(a)), s.cfg.RetainedApplications, s.cfg.RetainedBytes)
	for _, e := range a.executors {
		s.killExecutorLocked(ctx, e)
	}
	s.keepLocked("application " + a.id)
	for _, o := range dropped {
		s.keepLocked("application " + o.id)
	}
	if d, ok := s.drivers[a.driverID]; ok && state == masterv1.ApplicationState_APPLICATION_STATE_FINISHED {
		s.unconfirmed[d.id] = append(s.unconfirmed[d.id], a)
	} else {
		s.metrics.appEnded(state)
	}
	// As in Spark, a driver that ended its application itself is not told:
	// it may be gone already.
	if state != masterv1.ApplicationState_APPLICATION_STATE_FINISHED {
		s.sendApplicationRemoved(ctx, a, state, message)
	}
	s.sendApplicationFinished(ctx, a)
	s.needSchedule = true
}

// launchExecutorLocked is Spark's launchExecutor: the executor is added to a
// and w, the worker gets LaunchExecutor, the driver ExecutorAdded — once the
// store keeps a's next executor id. An executor the store did not keep is
// not launched (a backs off): the master that leads next could give its id
// to another executor.
func (s *Server) launchExecutorLocked(ctx context.Context, w *workerInfo, a *appInfo, cores int32, memoryMiB int64) {
	e := a.addExecutor(w, cores, memoryMiB, s.now())
	w.addExecutor(e)
	s.keepLocked("application "+a.id, func(err error) {
		if a.executors[e.id] != e || e.state != masterv1.ExecutorState_EXECUTOR_STATE_LAUNCHING {
			return // ended before its launch was kept: it was not sent
		}
		if err != nil {
			a.removeExecutor(e, s.now())
			w.removeExecutor(e)
			e.state, e.message = masterv1.ExecutorState_EXECUTOR_STATE_FAILED, fmt.Sprintf("its launch could not be kept for recovery: %v", err)
			s.log.WarnContext(ctx, "executor not launched", "app", a.id, "executor", e.id, "reason", e.message)
			a.quickFailures++
			s.backOffLocked(a)
			s.needSchedule = true // to say why it waits
			return
		}
		s.sendExecutorLocked(ctx, w, e)
	})
}

// sendExecutorLocked sends the launch of e, kept, to w and tells the driver.
func (s *Server) sendExecutorLocked(ctx context.Context, w *workerInfo, e *executorInfo) {
	a, cores, memoryMiB := e.app, e.cores, e.memoryMiB
	if a.state == masterv1.ApplicationState_APPLICATION_STATE_WAITING {
		if err := a.setState(masterv1.ApplicationState_APPLICATION_STATE_RUNNING); err != nil {
			s.log.Warn("launch executor", "err", err)
		}
	}
	s.log.InfoContext(ctx, "launching executor", "app", a.id, "executor", e.id, "worker", w.id, "cores", cores, "memory_mib", memoryMiB)
	trace.SpanFromContext(ctx).AddEvent("executor placed", trace.WithAttributes(
		telemetry.ExecutorID.Int(int(e.id)), telemetry.WorkerID.String(w.id), telemetry.Cores.Int(int(cores)), telemetry.MemoryMiB.Int64(memoryMiB)))
	ctx = s.startExecutorSpanLocked(ctx, e)
	s.sendLaunchExecutor(ctx, e)
	s.sendExecutorAdded(ctx, e)
}

// executorStateChangedLocked is Spark's ExecutorStateChanged handling,
// including the spark.deploy.maxExecutorRetries rule. failedStep is the
// launch step that failed when the master knows it (the worker did not take
// the launch); "": the worker's message names it.
func (s *Server) executorStateChangedLocked(ctx context.Context, e *executorInfo, state masterv1.ExecutorState, message string, exitStatus *int32, times *executorTimes, failedStep string) error {
	a := e.app
	if _, ok := a.executors[e.id]; !ok || a.finished() {
		return fmt.Errorf("executor %s/%d: %w (already removed)", a.id, e.id, fault.ErrNotFound)
	}
	old := e.state
	if err := e.setState(state); err != nil {
		return err
	}
	e.message, e.exitStatus = message, exitStatus
	executorSpanStateLocked(e, state, message, exitStatus)
	e.launch.fromWorker(s, times)
	if state == masterv1.ExecutorState_EXECUTOR_STATE_RUNNING {
		a.retryCount = 0
		e.runningSince = s.now()
		prom.ObserveInTrace(a.trace, s.metrics.executorStart, s.now().Sub(e.scheduledAt).Seconds())
	}
	// A driver that released its executors is stopping, and may be gone:
	// it is told nothing more about them.
	if !a.driverStopping {
		s.sendExecutorUpdated(ctx, e, false, times)
	}
	if !lifecycle.ExecutorFinished(state) {
		return nil
	}
	s.log.Info("executor finished", "app", a.id, "executor", e.id, "state", state.String(), "message", message)
	s.metrics.executorEnded(e, old, failedStep)
	a.removeExecutor(e, s.now())
	e.worker.removeExecutor(e)
	// An executor that ends without being asked — the driver released its
	// executors as it stops, the master forgets those it kills —
	// failed, whatever its exit code: a command that exits 0 at once would
	// otherwise be relaunched without end.
	asked := a.driverStopping || old == masterv1.ExecutorState_EXECUTOR_STATE_DECOMMISSIONED
	if !asked {
		a.retryCount++
		// An executor that ran a while before failing was healthy: the
		// backoff starts over. One that failed at once (it never ran, or
		// exited within healthyRun) makes it longer.
		if e.runningSince.IsZero() || s.now().Sub(e.runningSince) < healthyRun {
			a.quickFailures++
		} else {
			a.quickFailures = 1
		}
		failures := max(a.retryCount, a.quickFailures)
		if s.cfg.MaxExecutorRetries >= 0 && failures >= s.cfg.MaxExecutorRetries && !a.hasRunningExecutor() {
			s.removeApplicationLocked(ctx, a, masterv1.ApplicationState_APPLICATION_STATE_FAILED,
				fmt.Sprintf("%d executors failed in a row and none is running; last: %s", failures, message))
			return nil
		}
		s.backOffLocked(a)
	}
	s.needSchedule = true
	return nil
}

// killExecutorLocked is Spark's killExecutor: the worker is told to kill it and
// the master forgets it at once.
func (s *Server) killExecutorLocked(ctx context.Context, e *executorInfo) {
	e.app.removeExecutor(e, s.now())
	e.worker.removeExecutor(e)
	before := e.state
	if err := e.setState(masterv1.ExecutorState_EXECUTOR_STATE_KILLED); err != nil {
		s.log.Debug("kill executor", "err", err)
	} else {
		s.metrics.executorEnded(e, before, "")
	}
	executorSpanStateLocked(e, masterv1.ExecutorState_EXECUTOR_STATE_KILLED, "killed by the master", nil)
	s.sendKillExecutor(ctx, e)
}
