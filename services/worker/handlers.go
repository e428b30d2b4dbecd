package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"connectrpc.com/connect"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	workerv1 "github.com/glint-cluster/glint/pkg/api/glint/worker/v1"
	"github.com/glint-cluster/glint/pkg/fault"
	"github.com/glint-cluster/glint/pkg/ids"
	"github.com/glint-cluster/glint/pkg/resources"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// LaunchExecutor reserves the executor's cores and memory, answers at once and
// launches the executor in the background. Commands from a master other than
// the active one are refused (Spark ignores them).
func (s *Server) LaunchExecutor(ctx context.Context, req *connect.Request[workerv1.LaunchExecutorRequest]) (*connect.Response[workerv1.LaunchExecutorResponse], error) {
	m := req.Msg
	if err := validateLaunchExecutor(m); err != nil {
		return nil, rpc.Error(err)
	}
	if err := s.fence("launch executor", m.GetEpoch()); err != nil {
		return nil, rpc.Error(err)
	}
	if err := s.newExecutorRunner(ctx, m).start(ctx, m.GetMasterUrl(), m.GetRegistration()); err != nil {
		return nil, rpc.Error(err)
	}
	return connect.NewResponse(&workerv1.LaunchExecutorResponse{}), nil
}

func validateLaunchExecutor(m *workerv1.LaunchExecutorRequest) error {
	if err := ids.ValidateApp(m.GetAppId()); err != nil {
		return fmt.Errorf("launch executor: %w", err)
	}
	if err := ids.ValidateExecutor(m.GetExecutorId()); err != nil {
		return fmt.Errorf("launch executor: %w", err)
	}
	if err := errors.Join(
		checkLimits(m.GetMasterUrl(), m.GetDescription().GetName(), m.GetCores(), m.GetMemoryMib(), m.GetDescription().GetCommand()),
		resources.CheckLength("app_token", m.GetAppToken(), rpc.MaxTokenBytes),
	); err != nil {
		return fmt.Errorf("launch executor %s/%d: %w", m.GetAppId(), m.GetExecutorId(), err)
	}
	return nil
}

// checkLimits checks what a launch asks for against pkg/resources' limits
// (the master checked the same when it admitted the application or driver),
// then the command's form.
func checkLimits(masterURL, name string, cores int32, memoryMiB int64, c *masterv1.Command) error {
	if err := errors.Join(
		resources.CheckLength("master_url", masterURL, resources.MaxURLBytes),
		resources.CheckLength("name", name, resources.MaxNameBytes),
		resources.CheckCores("cores", int64(cores)),
		resources.CheckMemoryMiB("memory_mib", memoryMiB),
	); err != nil {
		return err
	}
	return validateCommand(c)
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
	what := fmt.Sprintf("kill executor %s/%d", m.GetAppId(), m.GetExecutorId())
	if err := s.fence(what, m.GetEpoch()); err != nil {
		return nil, rpc.Error(err)
	}
	key := executorKey{app: m.GetAppId(), id: m.GetExecutorId()}
	ended := func(k executorKey) bool {
		return slices.ContainsFunc(s.finishedExecutors, func(r *executorRunner) bool { return r.key() == k })
	}
	if err := killRunner(ctx, s, m.GetMasterUrl(), what, s.executors, key, ended); err != nil {
		return nil, rpc.Error(err)
	}
	return connect.NewResponse(&workerv1.KillExecutorResponse{}), nil
}

// LaunchDriver reserves the driver's cores and memory, answers at once and
// launches the driver in the background.
func (s *Server) LaunchDriver(ctx context.Context, req *connect.Request[workerv1.LaunchDriverRequest]) (*connect.Response[workerv1.LaunchDriverResponse], error) {
	m := req.Msg
	if err := validateLaunchDriver(m); err != nil {
		return nil, rpc.Error(err)
	}
	if err := s.fence("launch driver", m.GetEpoch()); err != nil {
		return nil, rpc.Error(err)
	}
	if err := s.newDriverRunner(ctx, m).start(ctx, m.GetMasterUrl(), m.GetRegistration()); err != nil {
		return nil, rpc.Error(err)
	}
	return connect.NewResponse(&workerv1.LaunchDriverResponse{}), nil
}

func validateLaunchDriver(m *workerv1.LaunchDriverRequest) error {
	if err := ids.ValidateDriver(m.GetDriverId()); err != nil {
		return fmt.Errorf("launch driver: %w", err)
	}
	d := m.GetDescription()
	if err := errors.Join(
		checkLimits(m.GetMasterUrl(), d.GetName(), d.GetCores(), d.GetMemoryMib(), d.GetCommand()),
		resources.CheckLength("submit_token", m.GetSubmitToken(), rpc.MaxTokenBytes),
	); err != nil {
		return fmt.Errorf("launch driver %s: %w", m.GetDriverId(), err)
	}
	return nil
}

// KillDriver kills a driver, supervised or not; it ends KILLED.
func (s *Server) KillDriver(ctx context.Context, req *connect.Request[workerv1.KillDriverRequest]) (*connect.Response[workerv1.KillDriverResponse], error) {
	m := req.Msg
	if err := ids.ValidateDriver(m.GetDriverId()); err != nil {
		return nil, rpc.Error(fmt.Errorf("kill driver: %w", err))
	}
	if err := s.fence("kill driver", m.GetEpoch()); err != nil {
		return nil, rpc.Error(err)
	}
	ended := func(id string) bool {
		return slices.ContainsFunc(s.finishedDrivers, func(r *driverRunner) bool { return r.id == id })
	}
	if err := killRunner(ctx, s, m.GetMasterUrl(), "kill driver "+m.GetDriverId(), s.drivers, m.GetDriverId(), ended); err != nil {
		return nil, rpc.Error(err)
	}
	return connect.NewResponse(&workerv1.KillDriverResponse{}), nil
}

// ApplicationFinished kills whatever executors of the application still run.
func (s *Server) ApplicationFinished(ctx context.Context, req *connect.Request[workerv1.ApplicationFinishedRequest]) (*connect.Response[workerv1.ApplicationFinishedResponse], error) {
	m := req.Msg
	if err := ids.ValidateApp(m.GetAppId()); err != nil {
		return nil, rpc.Error(fmt.Errorf("application finished: %w", err))
	}
	if err := s.fence("application finished", m.GetEpoch()); err != nil {
		return nil, rpc.Error(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.awaitActiveLocked(ctx, m.GetMasterUrl()); err != nil {
		return nil, rpc.Error(fmt.Errorf("application %s finished: %w", m.GetAppId(), err))
	}
	s.launched.forget(m.GetAppId())
	for key, r := range s.executors {
		if key.app == m.GetAppId() {
			s.log.Info("killing executor of finished application", "app", r.appID, "executor", r.execID)
			r.kill(errAppFinished)
		}
	}
	return connect.NewResponse(&workerv1.ApplicationFinishedResponse{}), nil
}

// MasterChanged makes the named master the active one at once and registers
// with it, reporting what the worker runs. It selects among the masters the
// worker was given and never adds one: the worker calls its master with the
// cluster token, which goes to no other URL.
func (s *Server) MasterChanged(_ context.Context, req *connect.Request[workerv1.MasterChangedRequest]) (*connect.Response[workerv1.MasterChangedResponse], error) {
	named, err := rpc.NormalizeURL(req.Msg.GetMasterUrl())
	if err != nil {
		return nil, rpc.Error(fmt.Errorf("master changed: master_url: %w: %w", fault.ErrInvalidArgument, err))
	}
	url, ok := rpc.MatchURL(s.cfg.Masters, named)
	if !ok {
		return nil, rpc.Error(fmt.Errorf("master changed: master_url %.100q: %w: it is not one of this worker's masters (%s); a worker follows only the masters it was given",
			req.Msg.GetMasterUrl(), fault.ErrInvalidArgument, strings.Join(s.cfg.Masters, ", ")))
	}
	if err := s.fence("master changed to "+url, req.Msg.GetEpoch()); err != nil {
		return nil, rpc.Error(err)
	}
	s.mu.Lock()
	old := s.active
	// The master names itself as its commands do; the worker reaches it
	// at the URL it was given.
	s.active, s.route, s.preferred = named, url, url
	s.masterChanges++
	s.mu.Unlock()
	s.log.Info("master changed", "from", old, "to", url)
	select {
	case s.reregister <- struct{}{}:
	default:
	}
	return connect.NewResponse(&workerv1.MasterChangedResponse{}), nil
}

// fence refuses a command from a master whose leadership epoch is older
// than the newest this worker has seen (a deposed leader: etcd mode), and
// remembers a newer one.
func (s *Server) fence(what string, epoch int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if epoch < s.epoch {
		s.metrics.staleCommands.Inc()
		return fmt.Errorf("%s: %w: it comes from master epoch %d, and epoch %d leads now (a deposed master)", what, fault.ErrFailedPrecondition, epoch, s.epoch)
	}
	s.epoch = epoch
	return nil
}

// acceptCommandLocked refuses commands while the worker shuts down and from
// masters other than the active one.
func (s *Server) acceptCommandLocked(ctx context.Context, masterURL string) error {
	if s.closing {
		return fmt.Errorf("worker %s is shutting down: %w", s.id, fault.ErrUnavailable)
	}
	if err := s.awaitActiveLocked(ctx, masterURL); err != nil {
		return err
	}
	if s.closing {
		return fmt.Errorf("worker %s is shutting down: %w", s.id, fault.ErrUnavailable)
	}
	return nil
}

// reserveLocked takes cores and memory from what is free.
func (s *Server) reserveLocked(cores int32, memoryMiB int64) error {
	freeCores, freeMemory := s.cfg.Cores-s.coresUsed, s.cfg.MemoryMiB-s.memoryUsedMiB
	if cores > freeCores || memoryMiB > freeMemory {
		return fmt.Errorf("%w: wants %d cores and %d MiB, %d cores and %d MiB are free",
			fault.ErrResourceExhausted, cores, memoryMiB, freeCores, freeMemory)
	}
	s.coresUsed += cores
	s.memoryUsedMiB += memoryMiB
	return nil
}
