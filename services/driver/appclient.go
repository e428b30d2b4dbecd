package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace"

	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	"github.com/glint-cluster/glint/pkg/fault"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/redact"
	"github.com/glint-cluster/glint/pkg/resources"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry"
)

// DefaultRegisterTimeout is how long a driver tries to register unless told
// otherwise (Config.RegisterTimeout): longer than a failover of the masters
// under their defaults — a standby is elected once the leader's lease (10 s)
// lapsed, and refuses registrations while it recovers, up to a worker
// timeout (60 s) — with room to spare.
const DefaultRegisterTimeout = 2 * time.Minute

// DefaultUnreachableTimeout is how long a driver tries to register while no
// master answers at all (Config.UnreachableTimeout), before it gives up
// without waiting out RegisterTimeout: as long as a clients' default
// --retry-timeout, which covers a master restarting and recovering within
// its default --worker-timeout (60 s).
const DefaultUnreachableTimeout = time.Minute

// registerAttemptTimeout bounds one registration call: a paused master
// takes the connection and never answers.
const registerAttemptTimeout = 20 * time.Second

// Register is StandaloneAppClient's registerWithMaster: it registers the
// application with the first master that takes it, trying the masters in
// turn, round after round RegisterInterval apart, until RegisterTimeout
// passed (or UnreachableTimeout, if no master answered at all); Run calls
// it. A master that cannot be reached, does not answer, or answers
// Unavailable — a standby (whatever token the driver holds), a leader that
// cannot confirm its lease, a master recovering — is passed for the next; a
// refusal of the application or its token by a master that leads is final.
func (d *Driver) Register(ctx context.Context) error {
	desc := &masterv1.ApplicationDescription{
		Name:                 d.cfg.Name,
		MemoryPerExecutorMib: d.cfg.ExecutorMemoryMiB,
		Command:              d.executorCommand(),
		InitialExecutorLimit: d.initialExecutorLimit(),
		ModifyAcls:           ModifyACLs(d.cfg.Conf),
		Conf:                 describedConf(d.cfg.Redaction, d.cfg.Conf),
	}
	if d.cfg.MaxCores > 0 {
		desc.MaxCores = &d.cfg.MaxCores
	}
	if d.cfg.ExecutorCores > 0 {
		desc.CoresPerExecutor = &d.cfg.ExecutorCores
	}
	req := &masterv1.RegisterApplicationRequest{Description: desc, DriverUrl: d.cfg.URL, DriverId: d.cfg.DriverID, AppToken: d.appToken, MasterToken: d.masterToken}
	registering, cancel := context.WithTimeout(ctx, d.cfg.RegisterTimeout)
	defer cancel()
	// lastAnswer is the last refusal a master answered with: said at the
	// end even when the deadline cut the last round's calls short.
	var lastAnswer error
	began := time.Now()
	for round := 1; ; round++ {
		var errs []error
		for _, url := range d.cfg.Masters {
			client := masterv1connect.NewMasterServiceClient(d.http, url, rpc.ClientOptions(d.cfg.TracerProvider, d.cfg.SubmitToken)...)
			call, cancel := context.WithTimeout(registering, registerAttemptTimeout)
			resp, err := client.RegisterApplication(call, connect.NewRequest(req))
			cancel()
			if err == nil {
				d.mu.Lock()
				d.appID, d.master, d.registeredAt = resp.Msg.GetAppId(), d.masterClient(url), time.Now()
				d.mu.Unlock()
				// The application's trace is found by its id: on the
				// submission's span when it runs in this process.
				trace.SpanFromContext(ctx).SetAttributes(telemetry.AppID.String(resp.Msg.GetAppId()))
				close(d.registered)
				return nil
			}
			switch connect.CodeOf(err) {
			case connect.CodeInvalidArgument, connect.CodeFailedPrecondition, connect.CodeUnauthenticated, connect.CodePermissionDenied:
				return fmt.Errorf("register application with master %s: rejected: %w", url, err)
			}
			errs = append(errs, fmt.Errorf("%s: %w", url, err))
			if connect.IsWireError(err) {
				lastAnswer = errs[len(errs)-1]
			}
			if registering.Err() != nil {
				break
			}
			level := slog.LevelWarn
			if connect.CodeOf(err) == connect.CodeUnavailable && connect.IsWireError(err) {
				level = slog.LevelInfo // a standby or a recovering master: expected in a failover
			}
			d.log.Log(ctx, level, "master did not take the registration; trying the next", "master", url, "round", round, "err", err)
		}
		if lastAnswer == nil && time.Since(began) >= d.cfg.UnreachableTimeout {
			return fmt.Errorf("register application: no master answered within %s (%d rounds): %w", d.cfg.UnreachableTimeout, round, errors.Join(errs...))
		}
		select {
		case <-registering.Done():
		case <-time.After(d.cfg.RegisterInterval):
			continue
		}
		if ctx.Err() != nil {
			return fmt.Errorf("register application: %w", ctx.Err())
		}
		if lastAnswer != nil && !slices.Contains(errs, lastAnswer) {
			errs = append(errs, fmt.Errorf("the last answer: %w", lastAnswer))
		}
		return fmt.Errorf("register application: no master took it within %s (%d rounds): %w", d.cfg.RegisterTimeout, round, errors.Join(errs...))
	}
}

// masterClient is the client of the master at url for the application's
// calls: it passes a call on to the other masters while that one does not
// answer or does not lead.
func (d *Driver) masterClient(url string) masterv1connect.MasterServiceClient {
	return masterv1connect.NewMasterServiceClient(d.masterHTTP, url, rpc.ClientOptions(d.cfg.TracerProvider, d.cfg.SubmitToken)...)
}

// releaseExecutors sets the application's executor limit to zero, so the
// master launches no replacement for executors that stop.
func (d *Driver) releaseExecutors(ctx context.Context) {
	d.tellMaster(ctx, "release executors", func(ctx context.Context, m masterv1connect.MasterServiceClient, appID string) error {
		_, err := m.RequestExecutors(ctx, connect.NewRequest(&masterv1.RequestExecutorsRequest{AppId: appID, Stopping: true}))
		return err
	})
}

// unregister tells the master how the application ended.
func (d *Driver) unregister(ctx context.Context, end appEnd) {
	d.mu.Lock()
	d.stopping = true
	d.mu.Unlock()
	d.tellMaster(ctx, "unregister application", func(ctx context.Context, m masterv1connect.MasterServiceClient, appID string) error {
		_, err := m.UnregisterApplication(ctx, connect.NewRequest(&masterv1.UnregisterApplicationRequest{AppId: appID, State: end.state, Message: end.message}))
		return err
	})
}

// Tries of a call about the application: each at most masterCallTimeout,
// the first retry after masterRetryFirst, doubling up to masterRetryMax.
const (
	masterCallTimeout = 10 * time.Second
	masterRetryFirst  = 100 * time.Millisecond
	masterRetryMax    = 2 * time.Second
)

// tellMaster makes a call about the application to its master, unless the
// master already removed the application. A call that got no answer, or
// whose master does not lead (a standby, a master recovering or down while
// it restarts), is tried again — on the master the driver then reports to,
// which MasterChanged may have changed — for RegisterTimeout, so that the
// application's end reaches whichever master leads once one does; a
// refusal, or running out of time, is logged.
func (d *Driver) tellMaster(ctx context.Context, what string, call func(context.Context, masterv1connect.MasterServiceClient, string) error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.RegisterTimeout)
	defer cancel()
	wait := masterRetryFirst
	for {
		if d.appRemoved() {
			return
		}
		d.mu.Lock()
		master, appID := d.master, d.appID
		d.mu.Unlock()
		try, cancelTry := context.WithTimeout(ctx, masterCallTimeout)
		err := call(try, master, appID)
		cancelTry()
		if err == nil {
			return
		}
		if !rpc.Answerless(err) || ctx.Err() != nil {
			d.log.Warn(what, "app", appID, "err", err)
			return
		}
		d.log.Info(what+": no master answered or leads; trying again", "app", appID, "in", wait, "err", err)
		select {
		case <-ctx.Done():
			d.log.Warn(what, "app", appID, "err", fmt.Errorf("no master took it within %s: %w", d.cfg.RegisterTimeout, err))
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, masterRetryMax)
	}
}

func (d *Driver) appRemoved() bool {
	select {
	case <-d.removed:
		return true
	default:
		return false
	}
}

// ExecutorAdded records an executor the master scheduled for this application.
func (d *Driver) ExecutorAdded(ctx context.Context, req *connect.Request[driverv1.ExecutorAddedRequest]) (*connect.Response[driverv1.ExecutorAddedResponse], error) {
	m := req.Msg
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkMasterLocked(m.GetAppId(), m.GetEpoch()); err != nil {
		return nil, rpc.Error(err)
	}
	e := d.executorLocked(m.GetExecutorId())
	e.workerID, e.hostPort = m.GetWorkerId(), m.GetHostPort()
	e.timeline.Scheduled = m.GetScheduledAt().AsTime()
	d.observeLaunchLocked(e)
	d.log.Info("executor added", "executor", m.GetExecutorId(), "worker", m.GetWorkerId(), "cores", m.GetCores(), "memory_mib", m.GetMemoryMib())
	return connect.NewResponse(&driverv1.ExecutorAddedResponse{}), nil
}

// ExecutorUpdated applies an executor's new state; a finished executor is
// removed and its running tasks are queued again.
func (d *Driver) ExecutorUpdated(ctx context.Context, req *connect.Request[driverv1.ExecutorUpdatedRequest]) (*connect.Response[driverv1.ExecutorUpdatedResponse], error) {
	m := req.Msg
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkMasterLocked(m.GetAppId(), m.GetEpoch()); err != nil {
		return nil, rpc.Error(err)
	}
	e := d.executorLocked(m.GetExecutorId())
	decommissioned := e.state == masterv1.ExecutorState_EXECUTOR_STATE_DECOMMISSIONED
	e.state = m.GetState()
	if m.GetLaunchedAt() != nil {
		e.timeline.Launched = m.GetLaunchedAt().AsTime()
	}
	if m.GetStartedAt() != nil {
		e.timeline.Started = m.GetStartedAt().AsTime()
	}
	d.observeLaunchLocked(e)
	d.log.Info("executor updated", "executor", m.GetExecutorId(), "state", m.GetState().String(), "message", m.GetMessage())
	if m.GetState() == masterv1.ExecutorState_EXECUTOR_STATE_DECOMMISSIONED {
		d.decommissionExecutorLocked(ctx, e)
	}
	if lifecycle.ExecutorFinished(m.GetState()) {
		e.timeline.Ended = time.Now()
		e.timeline.EndMessage = m.GetMessage()
		// An executor lost with its worker, or ended by its worker's
		// decommissioning, was not lost through the application's fault.
		causedByApp := !m.GetWorkerLost() && !decommissioned
		d.removeExecutorLocked(ctx, e, fmt.Sprintf("executor %d %s: %s", e.id, lifecycle.Name(m.GetState()), m.GetMessage()), causedByApp)
	}
	return connect.NewResponse(&driverv1.ExecutorUpdatedResponse{}), nil
}

// ExecutorsRecovered removes every executor the driver holds that the
// recovered master did not find: one lost while no master led (its worker
// died, or restarted, before the recovered master heard from it) has no
// master to report its end, and its tasks would wait for it forever. Their
// tasks are queued again without counting as failures. Executors the
// master will launch have ids from next_executor_id on, and are kept.
func (d *Driver) ExecutorsRecovered(ctx context.Context, req *connect.Request[driverv1.ExecutorsRecoveredRequest]) (*connect.Response[driverv1.ExecutorsRecoveredResponse], error) {
	m := req.Msg
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkMasterLocked(m.GetAppId(), m.GetEpoch()); err != nil {
		return nil, rpc.Error(err)
	}
	found := make(map[int32]bool, len(m.GetExecutorIds()))
	for _, id := range m.GetExecutorIds() {
		found[id] = true
	}
	for _, id := range slices.Sorted(maps.Keys(d.executors)) {
		e := d.executors[id]
		if e.removed || found[id] || id >= m.GetNextExecutorId() {
			continue
		}
		e.state = masterv1.ExecutorState_EXECUTOR_STATE_LOST
		e.timeline.Ended = time.Now()
		e.timeline.EndMessage = "the recovered master found it on no worker"
		d.removeExecutorLocked(ctx, e, fmt.Sprintf("executor %d lost while no master led: %s", id, e.timeline.EndMessage), false)
	}
	return connect.NewResponse(&driverv1.ExecutorsRecoveredResponse{}), nil
}

// ApplicationRemoved ends every job: the master removed the application.
func (d *Driver) ApplicationRemoved(ctx context.Context, req *connect.Request[driverv1.ApplicationRemovedRequest]) (*connect.Response[driverv1.ApplicationRemovedResponse], error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkMasterLocked(req.Msg.GetAppId(), req.Msg.GetEpoch()); err != nil {
		return nil, rpc.Error(err)
	}
	select {
	case <-d.removed:
	default:
		d.removedWhy = req.Msg.GetMessage()
		close(d.removed)
		level := slog.LevelWarn
		if d.stopping {
			level = slog.LevelDebug // the driver itself ended the application
		}
		d.log.Log(ctx, level, "master removed the application", "app", d.appID, "message", d.removedWhy)
		for _, ts := range d.taskSets {
			ts.fail(fmt.Errorf("master removed application %s: %s", d.appID, d.removedWhy))
		}
		d.taskSets = nil
	}
	return connect.NewResponse(&driverv1.ApplicationRemovedResponse{}), nil
}

// Ping answers the master's probe when appID is this driver's application.
func (d *Driver) Ping(_ context.Context, req *connect.Request[driverv1.PingRequest]) (*connect.Response[driverv1.PingResponse], error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.appID == "" || req.Msg.GetAppId() != d.appID {
		return nil, rpc.Error(fmt.Errorf("ping application %.100q: %w: this driver runs %q", req.Msg.GetAppId(), fault.ErrNotFound, d.appID))
	}
	return connect.NewResponse(&driverv1.PingResponse{}), nil
}

// GetProgress answers the master's application page with Progress when
// appID is this driver's application.
func (d *Driver) GetProgress(_ context.Context, req *connect.Request[driverv1.GetProgressRequest]) (*connect.Response[driverv1.GetProgressResponse], error) {
	d.mu.Lock()
	app := d.appID
	d.mu.Unlock()
	if app == "" || req.Msg.GetAppId() != app {
		return nil, rpc.Error(fmt.Errorf("progress of application %.100q: %w: this driver runs %q", req.Msg.GetAppId(), fault.ErrNotFound, app))
	}
	return connect.NewResponse(d.progressProto()), nil
}

// MasterChanged makes the named master the one the driver reports to (a
// recovered master, or a newly elected leader); its answer acknowledges the
// change (Spark's MasterChangeAcknowledged). It selects among the masters
// the driver was given and never adds one: the driver calls its master with
// its submit token, which goes to no other URL.
func (d *Driver) MasterChanged(ctx context.Context, req *connect.Request[driverv1.MasterChangedRequest]) (*connect.Response[driverv1.MasterChangedResponse], error) {
	named, err := rpc.NormalizeURL(req.Msg.GetMasterUrl())
	if err != nil {
		return nil, rpc.Error(fmt.Errorf("master changed: master_url: %w: %w", fault.ErrInvalidArgument, err))
	}
	url, ok := rpc.MatchURL(d.cfg.Masters, named)
	if !ok {
		return nil, rpc.Error(fmt.Errorf("master changed: master_url %.100q: %w: it is not one of this driver's masters (%s); a driver follows only the masters it was given",
			req.Msg.GetMasterUrl(), fault.ErrInvalidArgument, strings.Join(d.cfg.Masters, ", ")))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.appID == "" {
		// The master kept a registration whose answer has not come: it may
		// be this one's, answered soon by the master that kept it.
		return nil, rpc.Error(fmt.Errorf("master changed for application %.100q: %w: this driver's registration is not answered yet; ask again", req.Msg.GetAppId(), fault.ErrUnavailable))
	}
	if req.Msg.GetAppId() != d.appID {
		return nil, rpc.Error(fmt.Errorf("master changed for application %.100q: %w: this driver runs %q", req.Msg.GetAppId(), fault.ErrNotFound, d.appID))
	}
	if err := d.fenceLocked(req.Msg.GetEpoch()); err != nil {
		return nil, rpc.Error(err)
	}
	d.master = d.masterClient(url)
	d.log.InfoContext(ctx, "master changed", "app", d.appID, "master", url)
	return connect.NewResponse(&driverv1.MasterChangedResponse{}), nil
}

// checkMasterLocked accepts a master's message about this application from
// the newest master epoch seen (fenceLocked).
func (d *Driver) checkMasterLocked(appID string, epoch int64) error {
	if err := d.checkAppLocked(appID); err != nil {
		return err
	}
	return d.fenceLocked(epoch)
}

// fenceLocked refuses a message from a master of an older leadership epoch
// than the newest seen (a deposed leader, in etcd mode), and remembers a
// newer one.
func (d *Driver) fenceLocked(epoch int64) error {
	if epoch < d.epoch {
		return fmt.Errorf("%w: the message comes from master epoch %d, and epoch %d leads now (a deposed master)", fault.ErrFailedPrecondition, epoch, d.epoch)
	}
	d.epoch = epoch
	return nil
}

// checkAppLocked accepts messages about this application only. Messages that
// race ahead of the registration response (the master schedules at once) are
// accepted: there is no other application they could be about.
func (d *Driver) checkAppLocked(appID string) error {
	if d.appID != "" && appID != d.appID {
		return fmt.Errorf("application %s: %w: this driver runs %s", appID, fault.ErrNotFound, d.appID)
	}
	return nil
}

// describedConf is conf as the application's description carries it to the
// master: its secrets hidden by r, within what a master takes
// (resources.CheckConf) — a value too long to carry said to be so, a
// property past the limits left out, so that no property keeps the
// application from registering.
func describedConf(r *redact.Redactor, conf map[string]string) map[string]string {
	shown := r.Env(conf)
	out := make(map[string]string, min(len(shown), resources.MaxConfEntries))
	total := 0
	for _, k := range slices.Sorted(maps.Keys(shown)) {
		v := shown[k]
		if k == "" || len(k) > resources.MaxNameBytes {
			continue
		}
		if len(v) > resources.MaxArgBytes {
			v = fmt.Sprintf("(%d bytes: too long to show)", len(v))
		}
		if len(out) == resources.MaxConfEntries || total+len(k)+len(v) > resources.MaxCommandBytes {
			break
		}
		out[k], total = v, total+len(k)+len(v)
	}
	return out
}
