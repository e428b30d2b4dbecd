package worker

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	workerv1 "github.com/glint-cluster/glint/pkg/api/glint/worker/v1"
	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/telemetry"
)

// Spark's --supervise restart policy (DriverRunner): wait 1s before the first
// restart and double the wait after each quick failure; a run that lasted
// longer than healthyRun resets the wait to 1s. Glint caps the wait.
const (
	firstRestartWait = time.Second
	healthyRun       = 5 * time.Second
)

// restartWait returns how long to wait before restarting a supervised driver
// that failed after running for ran, given the wait before its previous
// restart (0 if it has not been restarted).
func restartWait(prev, ran, limit time.Duration) time.Duration {
	next := 2 * prev
	if prev == 0 || ran > healthyRun {
		next = firstRestartWait
	}
	return min(next, limit)
}

// driverRunner runs one cluster-mode driver (Spark's DriverRunner), restarting
// it when it is supervised and fails. Only its final state is reported to the
// master. Its mutable fields are guarded by the Server's mu.
type driverRunner struct {
	s    *Server
	id   string
	desc *masterv1.DriverDescription
	dir  string
	log  *slog.Logger
	ctx  context.Context
	// kill ends ctx with the reason the driver is killed.
	kill context.CancelCauseFunc

	state      masterv1.DriverState
	pid        int
	restarts   int
	message    string
	exitStatus *int32
}

// newDriverRunner prepares a runner for a validated LaunchDriver request.
func (s *Server) newDriverRunner(ctx context.Context, m *workerv1.LaunchDriverRequest) *driverRunner {
	ctx, kill := context.WithCancelCause(context.WithoutCancel(ctx))
	return &driverRunner{
		s: s, id: m.GetDriverId(), desc: m.GetDescription(),
		dir:   filepath.Join(s.cfg.WorkDir, m.GetDriverId()),
		log:   s.log.With("driver", m.GetDriverId()),
		ctx:   ctx,
		kill:  kill,
		state: masterv1.DriverState_DRIVER_STATE_SUBMITTED,
	}
}

// newLaunch prepares one start of the driver's process.
func (r *driverRunner) newLaunch() *launch {
	return &launch{
		dir:      r.dir,
		template: r.desc.GetCommand(),
		vars:     map[string]string{"DRIVER_ID": r.id, "WORKER_URL": r.s.cfg.URL},
		env: []string{
			"GLINT_WORK_DIR=" + r.dir,
			"GLINT_DRIVER_ID=" + r.id,
			child.WorkerURLEnv + "=" + r.s.cfg.URL,
		},
		now: r.s.cfg.Now,
		attrs: []attribute.KeyValue{
			telemetry.DriverID.String(r.id), telemetry.WorkerID.String(r.s.id),
			telemetry.Cores.Int(int(r.desc.GetCores())), telemetry.MemoryMiB.Int64(r.desc.GetMemoryMib()),
		},
	}
}

// run starts the driver, restarting it while it is supervised and fails, and
// reports its final state.
func (r *driverRunner) run() {
	defer r.s.runners.Done()
	defer r.kill(nil)
	var wait time.Duration
	for {
		l := r.newLaunch()
		steps := []step{workdirStep{}, commandStep{}, logsStep{}, startStep{}, reportStep{running: r.running}}
		timings, err := runSteps(r.ctx, r.s.tracer, r.log, steps, l)
		if err != nil {
			if r.ctx.Err() != nil {
				r.finish(masterv1.DriverState_DRIVER_STATE_KILLED, fmt.Sprintf("%v before its process started", context.Cause(r.ctx)), nil)
				return
			}
			r.log.Warn("driver failed to launch", "err", err)
			r.finish(masterv1.DriverState_DRIVER_STATE_ERROR, err.Error(), nil)
			return
		}
		r.log.Info("driver started", "pid", l.cmd.Process.Pid, "path", l.path, slog.Group("steps", timings...))
		began := time.Now()
		e, killed := waitProcess(r.ctx, r.log, l.cmd, r.s.cfg.KillGrace)
		switch {
		case killed:
			r.finish(masterv1.DriverState_DRIVER_STATE_KILLED, fmt.Sprintf("%v; %v", context.Cause(r.ctx), e), e.status())
			return
		case e.success():
			r.finish(masterv1.DriverState_DRIVER_STATE_FINISHED, e.String(), e.status())
			return
		case !r.desc.GetSupervise():
			r.finish(masterv1.DriverState_DRIVER_STATE_FAILED, e.String(), e.status())
			return
		}
		wait = restartWait(wait, time.Since(began), r.s.cfg.SuperviseBackoffCap)
		r.relaunching(e, wait)
		timer := time.NewTimer(wait)
		select {
		case <-r.ctx.Done():
			timer.Stop()
			r.finish(masterv1.DriverState_DRIVER_STATE_KILLED,
				fmt.Sprintf("%v while waiting to restart; last run %v", context.Cause(r.ctx), e), e.status())
			return
		case <-timer.C:
		}
	}
}

// running is the report step: the driver is RUNNING. The master already shows
// it RUNNING since it launched it, so it is not told.
func (r *driverRunner) running(_ context.Context, l *launch) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	r.setStateLocked(masterv1.DriverState_DRIVER_STATE_RUNNING)
	r.pid = l.cmd.Process.Pid
}

// relaunching records that a supervised driver failed as e and will be
// restarted after wait.
func (r *driverRunner) relaunching(e exit, wait time.Duration) {
	r.s.mu.Lock()
	r.setStateLocked(masterv1.DriverState_DRIVER_STATE_RELAUNCHING)
	r.restarts++
	r.pid = 0
	r.message, r.exitStatus = e.String(), e.status()
	restarts := r.restarts
	r.s.mu.Unlock()
	r.log.Warn("supervised driver failed; restarting", "exit", e.String(), "wait", wait, "restarts", restarts)
}

// finish records the driver's final state, frees its cores and memory and
// reports the state to the master.
func (r *driverRunner) finish(state masterv1.DriverState, message string, status *int32) {
	s := r.s
	s.mu.Lock()
	r.setStateLocked(state)
	r.message, r.exitStatus = message, status
	delete(s.drivers, r.id)
	s.coresUsed -= r.desc.GetCores()
	s.memoryUsedMiB -= r.desc.GetMemoryMib()
	s.finishedDrivers = retain(s.finishedDrivers, r)
	s.mu.Unlock()
	r.log.Info("driver finished", "state", lifecycle.Name(state), "message", message)
	req := &masterv1.DriverStateChangedRequest{DriverId: r.id, State: state, Message: message, WorkerId: s.id}
	s.report(r.ctx, fmt.Sprintf("driver %s %s", r.id, lifecycle.Name(state)), func(ctx context.Context, c masterv1connect.MasterServiceClient) error {
		_, err := c.DriverStateChanged(ctx, connect.NewRequest(req))
		return err
	})
}

func (r *driverRunner) setStateLocked(to masterv1.DriverState) {
	if err := driverTransitions.Check("driver "+r.id, r.state, to); err != nil {
		r.log.Error("driver state", "err", err)
		return
	}
	r.state = to
}
