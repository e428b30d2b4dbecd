package worker

import (
	"context"
	"fmt"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace"

	workerv1 "github.com/glint-cluster/glint/pkg/api/glint/worker/v1"
	"github.com/glint-cluster/glint/pkg/ids"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry"
)

// LaunchExecutor reserves the executor's cores and memory, answers at once and
// launches the executor in the background. Commands from a master other than
// the active one are refused (Spark ignores them).
func (s *Server) LaunchExecutor(ctx context.Context, req *connect.Request[workerv1.LaunchExecutorRequest]) (*connect.Response[workerv1.LaunchExecutorResponse], error) {
	m := req.Msg
	if err := validateLaunchExecutor(m); err != nil {
		return nil, rpc.Error(err)
	}
	r := s.newExecutorRunner(ctx, m)
	s.mu.Lock()
	err := s.admitExecutorLocked(ctx, m.GetMasterUrl(), r)
	s.mu.Unlock()
	if err != nil {
		r.kill(nil)
		s.log.Warn("refused executor", "app", r.appID, "executor", r.execID, "err", err)
		return nil, rpc.Error(err)
	}
	s.log.InfoContext(ctx, "launching executor", "app", r.appID, "executor", r.execID, "cores", r.cores, "memory_mib", r.memoryMiB)
	trace.SpanFromContext(ctx).SetAttributes(r.launch.attrs...)
	go r.run()
	return connect.NewResponse(&workerv1.LaunchExecutorResponse{}), nil
}

func validateLaunchExecutor(m *workerv1.LaunchExecutorRequest) error {
	if err := ids.ValidateApp(m.GetAppId()); err != nil {
		return fmt.Errorf("launch executor: %w", err)
	}
	if err := ids.ValidateExecutor(m.GetExecutorId()); err != nil {
		return fmt.Errorf("launch executor: %w", err)
	}
	if m.GetCores() <= 0 || m.GetMemoryMib() <= 0 {
		return fmt.Errorf("launch executor %s/%d: cores (%d) and memory (%d MiB) must be positive: %w",
			m.GetAppId(), m.GetExecutorId(), m.GetCores(), m.GetMemoryMib(), rpc.ErrInvalidArgument)
	}
	if err := validateCommand(m.GetDescription().GetCommand()); err != nil {
		return fmt.Errorf("launch executor %s/%d: %w", m.GetAppId(), m.GetExecutorId(), err)
	}
	return nil
}

// admitExecutorLocked registers r and reserves its resources, or says why not.
func (s *Server) admitExecutorLocked(ctx context.Context, masterURL string, r *executorRunner) error {
	what := fmt.Sprintf("launch executor %s/%d", r.appID, r.execID)
	if err := s.acceptCommandLocked(ctx, masterURL); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if _, dup := s.executors[r.key()]; dup {
		return fmt.Errorf("%s: %w: it is running", what, rpc.ErrAlreadyExists)
	}
	if err := s.reserveLocked(r.cores, r.memoryMiB); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	s.executors[r.key()] = r
	s.runners.Add(1)
	return nil
}

// KillExecutor kills an executor: SIGTERM to its process group, SIGKILL after
// the grace period. An executor the worker does not run is NotFound (it may
// just have exited).
func (s *Server) KillExecutor(ctx context.Context, req *connect.Request[workerv1.KillExecutorRequest]) (*connect.Response[workerv1.KillExecutorResponse], error) {
	m := req.Msg
	if err := ids.ValidateApp(m.GetAppId()); err != nil {
		return nil, rpc.Error(fmt.Errorf("kill executor: %w", err))
	}
	if err := ids.ValidateExecutor(m.GetExecutorId()); err != nil {
		return nil, rpc.Error(fmt.Errorf("kill executor: %w", err))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	what := fmt.Sprintf("kill executor %s/%d", m.GetAppId(), m.GetExecutorId())
	if err := s.awaitActiveLocked(ctx, m.GetMasterUrl()); err != nil {
		return nil, rpc.Error(fmt.Errorf("%s: %w", what, err))
	}
	r, ok := s.executors[executorKey{app: m.GetAppId(), id: m.GetExecutorId()}]
	if !ok {
		s.log.Debug("kill of an executor not running here", "app", m.GetAppId(), "executor", m.GetExecutorId())
		return nil, rpc.Error(fmt.Errorf("%s: %w: not running on this worker", what, rpc.ErrNotFound))
	}
	s.log.Info("killing executor", "app", r.appID, "executor", r.execID)
	r.kill(errKilledByMaster)
	return connect.NewResponse(&workerv1.KillExecutorResponse{}), nil
}

// LaunchDriver reserves the driver's cores and memory, answers at once and
// launches the driver in the background.
func (s *Server) LaunchDriver(ctx context.Context, req *connect.Request[workerv1.LaunchDriverRequest]) (*connect.Response[workerv1.LaunchDriverResponse], error) {
	m := req.Msg
	if err := validateLaunchDriver(m); err != nil {
		return nil, rpc.Error(err)
	}
	r := s.newDriverRunner(ctx, m)
	s.mu.Lock()
	err := s.admitDriverLocked(ctx, m.GetMasterUrl(), r)
	s.mu.Unlock()
	if err != nil {
		r.kill(nil)
		s.log.Warn("refused driver", "driver", r.id, "err", err)
		return nil, rpc.Error(err)
	}
	trace.SpanFromContext(ctx).SetAttributes(telemetry.DriverID.String(r.id), telemetry.WorkerID.String(s.id))
	s.log.InfoContext(ctx, "launching driver", "driver", r.id, "cores", r.desc.GetCores(), "memory_mib", r.desc.GetMemoryMib(),
		"supervise", r.desc.GetSupervise())
	go r.run()
	return connect.NewResponse(&workerv1.LaunchDriverResponse{}), nil
}

func validateLaunchDriver(m *workerv1.LaunchDriverRequest) error {
	if err := ids.ValidateDriver(m.GetDriverId()); err != nil {
		return fmt.Errorf("launch driver: %w", err)
	}
	d := m.GetDescription()
	if d.GetCores() <= 0 || d.GetMemoryMib() <= 0 {
		return fmt.Errorf("launch driver %s: cores (%d) and memory (%d MiB) must be positive: %w",
			m.GetDriverId(), d.GetCores(), d.GetMemoryMib(), rpc.ErrInvalidArgument)
	}
	if err := validateCommand(d.GetCommand()); err != nil {
		return fmt.Errorf("launch driver %s: %w", m.GetDriverId(), err)
	}
	return nil
}

// admitDriverLocked registers r and reserves its resources, or says why not.
func (s *Server) admitDriverLocked(ctx context.Context, masterURL string, r *driverRunner) error {
	what := "launch driver " + r.id
	if err := s.acceptCommandLocked(ctx, masterURL); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if _, dup := s.drivers[r.id]; dup {
		return fmt.Errorf("%s: %w: it is running", what, rpc.ErrAlreadyExists)
	}
	if err := s.reserveLocked(r.desc.GetCores(), r.desc.GetMemoryMib()); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	s.drivers[r.id] = r
	s.runners.Add(1)
	return nil
}

// KillDriver kills a driver, supervised or not; it ends KILLED.
func (s *Server) KillDriver(ctx context.Context, req *connect.Request[workerv1.KillDriverRequest]) (*connect.Response[workerv1.KillDriverResponse], error) {
	m := req.Msg
	if err := ids.ValidateDriver(m.GetDriverId()); err != nil {
		return nil, rpc.Error(fmt.Errorf("kill driver: %w", err))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	what := "kill driver " + m.GetDriverId()
	if err := s.awaitActiveLocked(ctx, m.GetMasterUrl()); err != nil {
		return nil, rpc.Error(fmt.Errorf("%s: %w", what, err))
	}
	r, ok := s.drivers[m.GetDriverId()]
	if !ok {
		s.log.Debug("kill of a driver not running here", "driver", m.GetDriverId())
		return nil, rpc.Error(fmt.Errorf("%s: %w: not running on this worker", what, rpc.ErrNotFound))
	}
	s.log.Info("killing driver", "driver", r.id)
	r.kill(errKilledByMaster)
	return connect.NewResponse(&workerv1.KillDriverResponse{}), nil
}

// ApplicationFinished kills whatever executors of the application still run.
func (s *Server) ApplicationFinished(ctx context.Context, req *connect.Request[workerv1.ApplicationFinishedRequest]) (*connect.Response[workerv1.ApplicationFinishedResponse], error) {
	m := req.Msg
	if err := ids.ValidateApp(m.GetAppId()); err != nil {
		return nil, rpc.Error(fmt.Errorf("application finished: %w", err))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.awaitActiveLocked(ctx, m.GetMasterUrl()); err != nil {
		return nil, rpc.Error(fmt.Errorf("application %s finished: %w", m.GetAppId(), err))
	}
	for key, r := range s.executors {
		if key.app == m.GetAppId() {
			s.log.Info("killing executor of finished application", "app", r.appID, "executor", r.execID)
			r.kill(errAppFinished)
		}
	}
	return connect.NewResponse(&workerv1.ApplicationFinishedResponse{}), nil
}

// MasterChanged makes the named master the active one at once and registers
// with it, reporting what the worker runs.
func (s *Server) MasterChanged(_ context.Context, req *connect.Request[workerv1.MasterChangedRequest]) (*connect.Response[workerv1.MasterChangedResponse], error) {
	url, err := rpc.NormalizeURL(req.Msg.GetMasterUrl())
	if err != nil {
		return nil, rpc.Error(fmt.Errorf("master changed: %w: %w", rpc.ErrInvalidArgument, err))
	}
	s.mu.Lock()
	old := s.active
	s.active, s.preferred = url, url
	s.masterChanges++
	s.mu.Unlock()
	s.log.Info("master changed", "from", old, "to", url)
	select {
	case s.reregister <- struct{}{}:
	default:
	}
	return connect.NewResponse(&workerv1.MasterChangedResponse{}), nil
}

// acceptCommandLocked refuses commands while the worker shuts down and from
// masters other than the active one.
func (s *Server) acceptCommandLocked(ctx context.Context, masterURL string) error {
	if s.closing {
		return fmt.Errorf("worker %s is shutting down: %w", s.id, rpc.ErrUnavailable)
	}
	if err := s.awaitActiveLocked(ctx, masterURL); err != nil {
		return err
	}
	if s.closing {
		return fmt.Errorf("worker %s is shutting down: %w", s.id, rpc.ErrUnavailable)
	}
	return nil
}

// reserveLocked takes cores and memory from what is free.
func (s *Server) reserveLocked(cores int32, memoryMiB int64) error {
	freeCores, freeMemory := s.cfg.Cores-s.coresUsed, s.cfg.MemoryMiB-s.memoryUsedMiB
	if cores > freeCores || memoryMiB > freeMemory {
		return fmt.Errorf("%w: wants %d cores and %d MiB, %d cores and %d MiB are free",
			rpc.ErrResourceExhausted, cores, memoryMiB, freeCores, freeMemory)
	}
	s.coresUsed += cores
	s.memoryUsedMiB += memoryMiB
	return nil
}
