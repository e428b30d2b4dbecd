package master

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/fault"
	"github.com/glint-cluster/glint/pkg/ids"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/resources"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry"
	"google.golang.org/protobuf/proto"
)

// RegisterWorker admits a worker; a known id is answered as a duplicate and an
// ALIVE worker at the same address is refused.
func (s *Server) RegisterWorker(ctx context.Context, req *connect.Request[masterv1.RegisterWorkerRequest]) (*connect.Response[masterv1.RegisterWorkerResponse], error) {
	m := req.Msg
	url, err := validateWorker(m)
	if err != nil {
		return nil, rpc.Error(err)
	}
	return answerKept(ctx, s, func() (*masterv1.RegisterWorkerResponse, <-chan error, error) {
		now := s.now()
		resp := &masterv1.RegisterWorkerResponse{MasterUrl: s.cfg.URL, Epoch: s.cfg.Epoch}
		s.finalsLocked(ctx, m.GetWorkerId(), m.GetFinishedExecutors(), m.GetFinishedDrivers())
		if w, ok := s.workers.alive(m.GetWorkerId()); ok {
			s.workers.heartbeat(w, now)
			resp.HeartbeatIntervalMs = s.heartbeatIntervalLocked(w).Milliseconds()
			if w.state == masterv1.WorkerState_WORKER_STATE_UNKNOWN {
				w.registration = newRegistration()
				resp.Registration = w.registration
				resp.UnknownExecutors, resp.UnknownDriverIds = s.adoptLocked(ctx, w, m)
				return resp, nil, nil
			}
			resp.Duplicate, resp.Registration = true, w.registration
			return resp, nil, nil
		}
		w := newWorkerInfo(m.GetWorkerId(), m.GetHost(), m.GetPort(), url, m.GetCores(), m.GetMemoryMib(), now)
		w.registration = newRegistration()
		kept := make(chan error, 1)
		err := s.registerWorkerLocked(ctx, w, func(err error) {
			if err != nil {
				kept <- err
				return
			}
			resp.Registration = w.registration
			resp.HeartbeatIntervalMs = s.heartbeatIntervalLocked(w).Milliseconds()
			s.log.Info("registered worker", "worker", w.id, "address", w.address(), "cores", w.cores, "memory_mib", w.memoryMiB)
			// A kept worker it replaced at the same address is gone: the
			// recovery may be complete.
			s.maybeCompleteRecoveryLocked(ctx)
			// What the worker still runs from before it re-registered is
			// unknown to this master now: the worker kills it (SPARK-13604).
			resp.UnknownExecutors, resp.UnknownDriverIds = s.unknownLocked(w, m.GetExecutors(), m.GetDriverIds())
			s.needSchedule = true
			kept <- nil
		})
		return resp, kept, err
	})
}

// newRegistration is a worker's registration: random, so that a master
// restarted (whose count would start again) never gives a worker one that a
// launch of its previous life carries.
func newRegistration() int64 { return rand.Int64N(1<<62) + 1 }

func validateWorker(m *masterv1.RegisterWorkerRequest) (string, error) {
	if err := ids.ValidateWorker(m.GetWorkerId()); err != nil {
		return "", err
	}
	if err := errors.Join(
		resources.CheckCores("cores", int64(m.GetCores())),
		resources.CheckMemoryMiB("memory_mib", m.GetMemoryMib()),
		resources.CheckLength("host", m.GetHost(), resources.MaxHostBytes),
		resources.CheckLength("worker_url", m.GetWorkerUrl(), resources.MaxURLBytes),
	); err != nil {
		return "", fmt.Errorf("worker %s: %w", m.GetWorkerId(), err)
	}
	if err := errors.Join(checkRuns(m.GetWorkerId(), m.GetExecutors(), m.GetDriverIds()),
		checkFinals(m.GetWorkerId(), m.GetFinishedExecutors(), m.GetFinishedDrivers())); err != nil {
		return "", err
	}
	if m.GetHost() == "" || m.GetPort() <= 0 || m.GetPort() > 65535 {
		return "", fmt.Errorf("worker %s: host %q and port %d must be set: %w", m.GetWorkerId(), m.GetHost(), m.GetPort(), fault.ErrInvalidArgument)
	}
	url, err := rpc.NormalizeURL(m.GetWorkerUrl())
	if err != nil {
		return "", fmt.Errorf("worker %s: %w: %w", m.GetWorkerId(), fault.ErrInvalidArgument, err)
	}
	return url, nil
}

// checkRuns bounds what a worker says it runs: each executor or driver holds
// at least one core.
func checkRuns(worker string, executors []*masterv1.RunningExecutor, drivers []string) error {
	if n := len(executors) + len(drivers); n > resources.MaxCores {
		return fmt.Errorf("worker %s: %w: reports %d executors and drivers, the limit is %d", worker, fault.ErrInvalidArgument, n, resources.MaxCores)
	}
	return nil
}

// unknownLocked returns what w says it runs that the master does not know
// to run there: the worker kills it. It is how an executor whose launch the
// master retried, or killed while the launch was on its way, cannot outlive
// the master's word.
func (s *Server) unknownLocked(w *workerInfo, executors []*masterv1.RunningExecutor, drivers []string) ([]*masterv1.RunningExecutor, []string) {
	var unknownExecutors []*masterv1.RunningExecutor
	var unknownDrivers []string
	for _, e := range executors {
		if w.executors[executorKey{e.GetAppId(), e.GetExecutorId()}] == nil {
			unknownExecutors = append(unknownExecutors, e)
		}
	}
	for _, id := range drivers {
		if w.drivers[id] == nil {
			unknownDrivers = append(unknownDrivers, id)
		}
	}
	return unknownExecutors, unknownDrivers
}

// Heartbeat records that a worker is alive. A worker the master removed is told
// to register again; an id the master never saw is an error.
func (s *Server) Heartbeat(ctx context.Context, req *connect.Request[masterv1.HeartbeatRequest]) (*connect.Response[masterv1.HeartbeatResponse], error) {
	m := req.Msg
	id := m.GetWorkerId()
	if err := ids.ValidateWorker(id); err != nil {
		return nil, rpc.Error(err)
	}
	if err := errors.Join(checkRuns(id, m.GetExecutors(), m.GetDriverIds()),
		checkFinals(id, m.GetFinishedExecutors(), m.GetFinishedDrivers()), checkUsage(id, m.GetUsage())); err != nil {
		return nil, rpc.Error(err)
	}
	marks := s.lockKept()
	defer s.unlockKept(ctx, marks)
	if w, ok := s.workers.alive(id); ok {
		s.workers.heartbeat(w, s.now())
		if w.state == masterv1.WorkerState_WORKER_STATE_UNKNOWN {
			// A recovering master learns what the worker runs, and what
			// ended, by its registration.
			return connect.NewResponse(&masterv1.HeartbeatResponse{Reregister: true}), nil
		}
		s.finalsLocked(ctx, id, m.GetFinishedExecutors(), m.GetFinishedDrivers())
		usageLocked(w, m.GetUsage())
		resp := &masterv1.HeartbeatResponse{HeartbeatIntervalMs: s.heartbeatIntervalLocked(w).Milliseconds()}
		resp.UnknownExecutors, resp.UnknownDriverIds = s.unknownLocked(w, m.GetExecutors(), m.GetDriverIds())
		return connect.NewResponse(resp), nil
	}
	if s.workers.removed(id) {
		s.log.Info("heartbeat from removed worker; asking it to re-register", "worker", id)
		return connect.NewResponse(&masterv1.HeartbeatResponse{Reregister: true}), nil
	}
	return nil, rpc.Error(fmt.Errorf("heartbeat from worker %s: %w: it is not registered with this master", id, fault.ErrNotFound))
}

// RegisterApplication admits an application and schedules its executors.
func (s *Server) RegisterApplication(ctx context.Context, req *connect.Request[masterv1.RegisterApplicationRequest]) (*connect.Response[masterv1.RegisterApplicationResponse], error) {
	m := req.Msg
	driverURL, err := validateApplication(m)
	if err != nil {
		return nil, rpc.Error(err)
	}
	return answerKept(ctx, s, func() (*masterv1.RegisterApplicationResponse, <-chan error, error) {
		c := s.callerLocked(ctx)
		if err := s.mayRegisterForDriverLocked(c, m.GetDriverId()); err != nil {
			return nil, nil, err
		}
		a, kept, err := s.registerApplicationLocked(ctx, c, m.GetDescription(), driverURL, m.GetDriverId(), m.GetAppToken(), m.GetMasterToken())
		if err != nil {
			return nil, nil, err
		}
		return &masterv1.RegisterApplicationResponse{AppId: a.id, MasterUrl: s.cfg.URL}, kept, nil
	})
}

func validateApplication(m *masterv1.RegisterApplicationRequest) (string, error) {
	d := m.GetDescription()
	bad := func(format string, args ...any) (string, error) {
		return "", fmt.Errorf("register application %.256q: %s: %w", d.GetName(), fmt.Sprintf(format, args...), fault.ErrInvalidArgument)
	}
	switch {
	case d == nil:
		return bad("no description")
	case d.MaxCores != nil && d.GetMaxCores() <= 0:
		return bad("total executor cores %d must be positive", d.GetMaxCores())
	case d.InitialExecutorLimit != nil && (d.GetInitialExecutorLimit() < 0 || d.GetInitialExecutorLimit() > MaxExecutorLimit):
		return bad("initial_executor_limit %d: want 0 to %d", d.GetInitialExecutorLimit(), MaxExecutorLimit)
	case len(m.GetAppToken()) < rpc.MinTokenBytes:
		// Without one, its executors would answer anyone.
		return bad("app_token has %d bytes, want at least %d (the driver makes it)", len(m.GetAppToken()), rpc.MinTokenBytes)
	case len(m.GetMasterToken()) < rpc.MinTokenBytes:
		// Without one, the master could not call the driver.
		return bad("master_token has %d bytes, want at least %d (the driver makes it)", len(m.GetMasterToken()), rpc.MinTokenBytes)
	case m.GetMasterToken() == m.GetAppToken():
		// The executors hold app_token: they would speak as the master.
		return bad("master_token is app_token, want a token of its own")
	}
	var cores error
	if d.CoresPerExecutor != nil {
		cores = resources.CheckCores("cores_per_executor", int64(d.GetCoresPerExecutor()))
	}
	if err := errors.Join(checkCommand(d.GetName(), d.GetCommand()), cores, checkModifyACLs(d.GetModifyAcls()),
		resources.CheckConf(d.GetConf()), resources.CheckMemoryMiB("memory_per_executor_mib", d.GetMemoryPerExecutorMib()),
		resources.CheckLength("driver_url", m.GetDriverUrl(), resources.MaxURLBytes),
		resources.CheckLength("app_token", m.GetAppToken(), rpc.MaxTokenBytes),
		resources.CheckLength("master_token", m.GetMasterToken(), rpc.MaxTokenBytes),
	); err != nil {
		return "", fmt.Errorf("register application %.256q: %w", d.GetName(), err)
	}
	if m.GetDriverId() != "" {
		if err := ids.ValidateDriver(m.GetDriverId()); err != nil {
			return "", err
		}
	}
	url, err := rpc.NormalizeURL(m.GetDriverUrl())
	if err != nil {
		return bad("driver url: %v", err)
	}
	return url, nil
}

// UnregisterApplication ends an application as its driver says it ended.
func (s *Server) UnregisterApplication(ctx context.Context, req *connect.Request[masterv1.UnregisterApplicationRequest]) (*connect.Response[masterv1.UnregisterApplicationResponse], error) {
	state, message, err := driverEnd(req.Msg)
	if err != nil {
		return nil, rpc.Error(err)
	}
	marks := s.lockKept()
	defer s.unlockKept(ctx, marks)
	a, err := s.ownAppLocked(ctx, "unregister", req.Msg.GetAppId())
	if err != nil {
		return nil, rpc.Error(err)
	}
	s.removeApplicationLocked(ctx, a, state, message)
	return connect.NewResponse(&masterv1.UnregisterApplicationResponse{}), nil
}

// driverEnd is the state and status message of an application its driver
// unregistered: FINISHED when it says nothing (a driver of before states),
// FAILED with the application's error, KILLED with what stopped the driver.
func driverEnd(m *masterv1.UnregisterApplicationRequest) (masterv1.ApplicationState, string, error) {
	why := clip(m.GetMessage())
	switch m.GetState() {
	case masterv1.ApplicationState_APPLICATION_STATE_UNSPECIFIED, masterv1.ApplicationState_APPLICATION_STATE_FINISHED:
		return masterv1.ApplicationState_APPLICATION_STATE_FINISHED, "unregistered by its driver", nil
	case masterv1.ApplicationState_APPLICATION_STATE_FAILED:
		return m.GetState(), "its driver reported it failed: " + why, nil
	case masterv1.ApplicationState_APPLICATION_STATE_KILLED:
		return m.GetState(), "its driver was stopped: " + why, nil
	}
	return 0, "", fmt.Errorf("unregister application %.256q: state %s: %w: want FINISHED, FAILED or KILLED", m.GetAppId(), m.GetState(), fault.ErrInvalidArgument)
}

// KillApplication ends an application and kills its executors.
func (s *Server) KillApplication(ctx context.Context, req *connect.Request[masterv1.KillApplicationRequest]) (*connect.Response[masterv1.KillApplicationResponse], error) {
	marks := s.lockKept()
	defer s.unlockKept(ctx, marks)
	a, err := s.ownAppLocked(ctx, "kill", req.Msg.GetAppId())
	if err != nil {
		return nil, rpc.Error(err)
	}
	s.removeApplicationLocked(ctx, a, masterv1.ApplicationState_APPLICATION_STATE_KILLED, "killed on request")
	return connect.NewResponse(&masterv1.KillApplicationResponse{}), nil
}

// errEnded is the error for an application or driver that already ended.
var errEnded = fault.New(fault.ErrFailedPrecondition, "already ended")

func (s *Server) activeAppLocked(id string) (*appInfo, error) {
	if err := ids.ValidateApp(id); err != nil {
		return nil, err
	}
	if a, ok := s.apps[id]; ok {
		return a, nil
	}
	for _, a := range s.completedApps.items {
		if a.id == id {
			return nil, fmt.Errorf("application %s %w %s", id, errEnded, a.state)
		}
	}
	return nil, fmt.Errorf("application %s: %w", id, fault.ErrNotFound)
}

// ExecutorStateChanged applies a worker's report on one of its executors.
func (s *Server) ExecutorStateChanged(ctx context.Context, req *connect.Request[masterv1.ExecutorStateChangedRequest]) (*connect.Response[masterv1.ExecutorStateChangedResponse], error) {
	if err := validateExecutorReport(req.Msg); err != nil {
		return nil, rpc.Error(err)
	}
	marks := s.lockKept()
	defer s.unlockKept(ctx, marks)
	if err := s.executorReportLocked(ctx, req.Msg); err != nil {
		return nil, rpc.Error(err)
	}
	return connect.NewResponse(&masterv1.ExecutorStateChangedResponse{}), nil
}

func validateExecutorReport(m *masterv1.ExecutorStateChangedRequest) error {
	if err := ids.ValidateExecutor(m.GetExecutorId()); err != nil {
		return err
	}
	if m.GetState() == masterv1.ExecutorState_EXECUTOR_STATE_UNSPECIFIED {
		return fmt.Errorf("executor state change: %w: no state", fault.ErrInvalidArgument)
	}
	return nil
}

// executorReportLocked applies a validated report on an executor.
func (s *Server) executorReportLocked(ctx context.Context, m *masterv1.ExecutorStateChangedRequest) error {
	a, err := s.activeAppLocked(m.GetAppId())
	if errors.Is(err, errEnded) {
		// The application ended first (it finished or was killed, maybe
		// before this executor even started) and the master killed its
		// executors: their reports are normal life, not failed calls.
		s.log.Debug("report on an ended application's executor", "app", m.GetAppId(), "executor", m.GetExecutorId(), "state", lifecycle.Name(m.GetState()))
		return nil
	}
	if err != nil {
		return err
	}
	e, ok := a.executors[m.GetExecutorId()]
	if !ok && lifecycle.ExecutorFinished(m.GetState()) && a.ended(m.GetExecutorId()) {
		// The master killed it (the driver asked for fewer executors) and
		// forgot it at once, or applied this end already: the worker
		// reports the end it caused, or reports it again.
		return nil
	}
	if !ok {
		return fmt.Errorf("executor %s/%d: %w", a.id, m.GetExecutorId(), fault.ErrNotFound)
	}
	if e.worker.id != m.GetWorkerId() {
		return fmt.Errorf("executor %s/%d runs on worker %s, not %s: %w",
			a.id, e.id, e.worker.id, m.GetWorkerId(), fault.ErrFailedPrecondition)
	}
	if raw := m.GetExecutorUrl(); raw != "" {
		err := resources.CheckLength("executor_url", raw, resources.MaxURLBytes)
		url := ""
		if err == nil {
			url, err = rpc.NormalizeURL(raw)
		}
		if err != nil {
			return fmt.Errorf("executor %s/%d url: %w: %w", a.id, e.id, fault.ErrInvalidArgument, err)
		}
		e.url = url
	}
	times := &executorTimes{launched: m.GetLaunchedAt(), started: m.GetStartedAt()}
	return s.executorStateChangedLocked(ctx, e, m.GetState(), clip(m.GetMessage()), m.ExitStatus, times, "")
}

// DriverStateChanged applies a worker's report that a driver ended.
func (s *Server) DriverStateChanged(ctx context.Context, req *connect.Request[masterv1.DriverStateChangedRequest]) (*connect.Response[masterv1.DriverStateChangedResponse], error) {
	if err := validateDriverReport(req.Msg); err != nil {
		return nil, rpc.Error(err)
	}
	return answerKept(ctx, s, func() (*masterv1.DriverStateChangedResponse, <-chan error, error) {
		if err := s.driverReportLocked(ctx, req.Msg); err != nil {
			return nil, nil, err
		}
		return &masterv1.DriverStateChangedResponse{}, s.driverEndKeptLocked(req.Msg.GetDriverId()), nil
	})
}

func validateDriverReport(m *masterv1.DriverStateChangedRequest) error {
	// RELAUNCHING is the master's to give (a driver relaunched under a new id).
	if !lifecycle.DriverFinished(m.GetState()) || m.GetState() == masterv1.DriverState_DRIVER_STATE_RELAUNCHING {
		return fmt.Errorf("driver %s state %s: %w: workers report only FINISHED, FAILED, KILLED or ERROR",
			m.GetDriverId(), m.GetState(), fault.ErrInvalidArgument)
	}
	return nil
}

// driverReportLocked applies a validated report that a driver ended.
func (s *Server) driverReportLocked(ctx context.Context, m *masterv1.DriverStateChangedRequest) error {
	d, err := s.activeDriverLocked(m.GetDriverId())
	if errors.Is(err, errEnded) {
		// Killed on request, relaunched elsewhere, or this end applied
		// already: its worker reports the end, or reports it again.
		s.log.Debug("ended driver's end reported", "driver", m.GetDriverId(), "state", lifecycle.Name(m.GetState()))
		return nil
	}
	if err != nil {
		return err
	}
	if !d.runsOn(m.GetWorkerId()) {
		return fmt.Errorf("driver %s does not run on worker %s: %w", d.id, m.GetWorkerId(), fault.ErrFailedPrecondition)
	}
	s.removeDriverLocked(ctx, d, m.GetState(), clip(m.GetMessage()))
	return nil
}

// finalsLocked applies the final states a registering or heartbeating
// worker w kept because no master acknowledged them: those the master
// knows already, or does not know, are passed over (each end is applied
// once). They are applied before anything else of the call, so a
// recovering master never takes a driver that finished for one lost.
func (s *Server) finalsLocked(ctx context.Context, worker string, executors []*masterv1.ExecutorStateChangedRequest, drivers []*masterv1.DriverStateChangedRequest) {
	for _, m := range executors {
		if m.GetWorkerId() != worker || !lifecycle.ExecutorFinished(m.GetState()) {
			continue
		}
		if err := s.executorReportLocked(ctx, m); err != nil {
			s.log.Debug("kept executor end not applied", "worker", worker, "app", m.GetAppId(), "executor", m.GetExecutorId(), "err", err)
		}
	}
	for _, m := range drivers {
		if m.GetWorkerId() != worker {
			continue
		}
		if err := s.driverReportLocked(ctx, m); err != nil {
			s.log.Debug("kept driver end not applied", "worker", worker, "driver", m.GetDriverId(), "err", err)
		}
	}
}

// checkFinals validates the final states a worker carries.
func checkFinals(worker string, executors []*masterv1.ExecutorStateChangedRequest, drivers []*masterv1.DriverStateChangedRequest) error {
	if n := len(executors) + len(drivers); n > resources.MaxUnackedFinals {
		return fmt.Errorf("worker %s: %w: carries %d final states, the limit is %d", worker, fault.ErrInvalidArgument, n, resources.MaxUnackedFinals)
	}
	for _, m := range executors {
		if err := validateExecutorReport(m); err != nil {
			return fmt.Errorf("worker %s: %w", worker, err)
		}
	}
	for _, m := range drivers {
		if err := validateDriverReport(m); err != nil {
			return fmt.Errorf("worker %s: %w", worker, err)
		}
	}
	return nil
}

func (s *Server) activeDriverLocked(id string) (*driverInfo, error) {
	if err := ids.ValidateDriver(id); err != nil {
		return nil, err
	}
	if d, ok := s.drivers[id]; ok {
		return d, nil
	}
	if d := s.completedDriverLocked(id); d != nil {
		return nil, fmt.Errorf("driver %s %w %s", id, errEnded, d.state)
	}
	return nil, fmt.Errorf("driver %s: %w", id, fault.ErrNotFound)
}

func (s *Server) completedDriverLocked(id string) *driverInfo {
	for _, d := range s.completedDrivers.items {
		if d.id == id {
			return d
		}
	}
	return nil
}

// SubmitDriver queues a cluster-mode driver. A repeat of a submission id
// (a client's retry whose first answer was lost) is answered with the driver
// that submission made, active or retained, and makes no other.
func (s *Server) SubmitDriver(ctx context.Context, req *connect.Request[masterv1.SubmitDriverRequest]) (*connect.Response[masterv1.SubmitDriverResponse], error) {
	d, submission := req.Msg.GetDescription(), req.Msg.GetSubmissionId()
	if err := errors.Join(checkSubmissionID(submission), checkCommand(d.GetName(), d.GetCommand()), checkModifyACLs(d.GetModifyAcls()),
		resources.CheckCores("cores", int64(d.GetCores())), resources.CheckMemoryMiB("memory_mib", d.GetMemoryMib()),
	); err != nil {
		return nil, rpc.Error(fmt.Errorf("submit driver %.256q: %w", d.GetName(), err))
	}
	return answerKept(ctx, s, func() (*masterv1.SubmitDriverResponse, <-chan error, error) {
		c := s.callerLocked(ctx)
		if c.driver != "" {
			return nil, nil, fmt.Errorf("submit driver: %w: driver %s's token acts only on that driver", errNotYours, c.driver)
		}
		if prev := s.submittedLocked(submission); prev != nil {
			if err := c.mayActOnDriver("submit again", prev); err != nil {
				return nil, nil, err
			}
			if !proto.Equal(prev.desc, d) {
				return nil, nil, fmt.Errorf("submit driver: submission id %s made %s: %w: that driver's description differs", submission, prev.id, fault.ErrAlreadyExists)
			}
			trace.SpanFromContext(ctx).SetAttributes(telemetry.DriverID.String(prev.id))
			return &masterv1.SubmitDriverResponse{DriverId: prev.id}, nil, nil
		}
		for _, p := range s.pendingDrivers {
			if submission != "" && p.submission == submission {
				return nil, nil, fmt.Errorf("submit driver: %w: submission id %s made %s, which is being kept; ask again", fault.ErrUnavailable, submission, p.id)
			}
		}
		if err := s.admitLocked("submit driver", len(s.drivers)+len(s.pendingDrivers), MaxActiveDrivers, proto.Size(d)); err != nil {
			return nil, nil, err
		}
		kept := make(chan error, 1)
		driver := s.submitDriverLocked(ctx, d, c.name, submission, func(_ *driverInfo, err error) { kept <- err })
		return &masterv1.SubmitDriverResponse{DriverId: driver.id}, kept, nil
	})
}

// answerKept answers a call whose change is kept before it is answered:
// locked runs under mu and returns the answer and, when it made a change
// to keep first, the channel of that write's outcome.
func answerKept[T any](ctx context.Context, s *Server, locked func() (*T, <-chan error, error)) (*connect.Response[T], error) {
	marks := s.lockKept()
	msg, kept, err := locked()
	s.unlockKept(ctx, marks)
	if err == nil && kept != nil {
		err = waitKept(ctx, kept)
	}
	if err != nil {
		return nil, rpc.Error(err)
	}
	return connect.NewResponse(msg), nil
}

// maxSubmissionID is the longest submission id a master keeps.
const maxSubmissionID = 64

// checkSubmissionID checks a client's submission id: empty (none), or 1 to
// maxSubmissionID of A-Z, a-z, 0-9, '-' and '_'.
func checkSubmissionID(id string) error {
	if len(id) > maxSubmissionID {
		return fmt.Errorf("submission id: %w: %d bytes, at most %d", fault.ErrInvalidArgument, len(id), maxSubmissionID)
	}
	for _, c := range []byte(id) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("submission id %q: %w: want only A-Z, a-z, 0-9, '-' and '_'", id, fault.ErrInvalidArgument)
		}
	}
	return nil
}

// submittedLocked is the driver that submission made, while the master keeps
// it (active, or retained after its end), or nil. The ids live on the
// drivers, so they are bounded as the drivers are.
func (s *Server) submittedLocked(submission string) *driverInfo {
	if submission == "" {
		return nil
	}
	for _, d := range s.drivers {
		if d.submission == submission {
			return d
		}
	}
	for _, d := range s.completedDrivers.items {
		if d.submission == submission {
			return d
		}
	}
	return nil
}

// KillDriver kills a waiting driver at once, or tells its worker to kill it.
func (s *Server) KillDriver(ctx context.Context, req *connect.Request[masterv1.KillDriverRequest]) (*connect.Response[masterv1.KillDriverResponse], error) {
	marks := s.lockKept()
	defer s.unlockKept(ctx, marks)
	d, err := s.activeDriverLocked(req.Msg.GetDriverId())
	if err != nil {
		return nil, rpc.Error(err)
	}
	if err := s.callerLocked(ctx).mayActOnDriver("kill", d); err != nil {
		return nil, rpc.Error(err)
	}
	if d.worker == nil {
		s.removeDriverLocked(ctx, d, masterv1.DriverState_DRIVER_STATE_KILLED, "killed before it was launched")
		return connect.NewResponse(&masterv1.KillDriverResponse{}), nil
	}
	s.sendKillDriver(ctx, d)
	return connect.NewResponse(&masterv1.KillDriverResponse{}), nil
}

// DriverStatus reports a driver's state, including drivers that ended.
func (s *Server) DriverStatus(ctx context.Context, req *connect.Request[masterv1.DriverStatusRequest]) (*connect.Response[masterv1.DriverStatusResponse], error) {
	id := req.Msg.GetDriverId()
	if err := ids.ValidateDriver(id); err != nil {
		return nil, rpc.Error(err)
	}
	return answerKept(ctx, s, func() (*masterv1.DriverStatusResponse, <-chan error, error) {
		d, ok := s.drivers[id]
		if !ok {
			d = s.completedDriverLocked(id)
		}
		if d == nil {
			return nil, nil, fmt.Errorf("driver %s: %w", id, fault.ErrNotFound)
		}
		if err := s.callerLocked(ctx).mayActOnDriver("read the status of", d); err != nil {
			return nil, nil, err
		}
		return &masterv1.DriverStatusResponse{Driver: s.driverProto(d)}, s.driverEndKeptLocked(id), nil
	})
}

// RequestExecutors sets the number of executors an application may have.
func (s *Server) RequestExecutors(ctx context.Context, req *connect.Request[masterv1.RequestExecutorsRequest]) (*connect.Response[masterv1.RequestExecutorsResponse], error) {
	if n := req.Msg.GetRequestedTotal(); n < 0 || n > MaxExecutorLimit {
		return nil, rpc.Error(fmt.Errorf("request executors: %w: requested_total %d: want 0 to %d", fault.ErrInvalidArgument, n, MaxExecutorLimit))
	}
	return answerKept(ctx, s, func() (*masterv1.RequestExecutorsResponse, <-chan error, error) {
		a, err := s.ownAppLocked(ctx, "request executors for", req.Msg.GetAppId())
		if err != nil {
			return nil, nil, err
		}
		// More than it holds and was allowed is asked for now.
		if limit := int(req.Msg.GetRequestedTotal()); limit > a.executorLimit && limit > a.liveExecutors {
			a.ask(s.now(), masterv1.ExecutorCause_EXECUTOR_CAUSE_DYNAMIC_ALLOCATION)
		}
		a.executorLimit = int(req.Msg.GetRequestedTotal())
		if req.Msg.GetStopping() {
			a.executorLimit, a.driverStopping = 0, true
		}
		s.needSchedule = true
		// The limit holds, and is kept again until kept; the driver, told
		// it was not kept, asks again.
		kept := make(chan error, 1)
		s.keepLocked("application "+a.id, func(err error) {
			if err != nil {
				err = fmt.Errorf("request executors for %s: %w", a.id, err)
			}
			kept <- err
		})
		return &masterv1.RequestExecutorsResponse{}, kept, nil
	})
}

// KillExecutors kills the named executors of an application.
func (s *Server) KillExecutors(ctx context.Context, req *connect.Request[masterv1.KillExecutorsRequest]) (*connect.Response[masterv1.KillExecutorsResponse], error) {
	marks := s.lockKept()
	defer s.unlockKept(ctx, marks)
	a, err := s.ownAppLocked(ctx, "kill executors of", req.Msg.GetAppId())
	if err != nil {
		return nil, rpc.Error(err)
	}
	resp := &masterv1.KillExecutorsResponse{}
	for _, id := range req.Msg.GetExecutorIds() {
		if e, ok := a.executors[id]; ok {
			s.killExecutorLocked(ctx, e)
			resp.KilledExecutorIds = append(resp.KilledExecutorIds, id)
		}
	}
	s.needSchedule = true
	return connect.NewResponse(resp), nil
}

// GetClusterState returns the master's view of the cluster.
func (s *Server) GetClusterState(context.Context, *connect.Request[masterv1.GetClusterStateRequest]) (*connect.Response[masterv1.GetClusterStateResponse], error) {
	return connect.NewResponse(s.clusterState()), nil
}
