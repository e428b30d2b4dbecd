package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/timestamppb"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	workerv1 "github.com/glint-cluster/glint/pkg/api/glint/worker/v1"
	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/telemetry"
)

// executorKey names an executor on this worker.
type executorKey struct {
	app string
	id  int32
}

// executorRunner runs one executor process (Spark's ExecutorRunner): the
// launch steps, then a wait for the process to end or be killed, then the
// final report. Its mutable fields are guarded by the Server's mu.
type executorRunner struct {
	s          *Server
	appID      string
	execID     int32
	cores      int32
	memoryMiB  int64
	launch     *launch
	launchedAt time.Time
	log        *slog.Logger
	ctx        context.Context
	// kill ends ctx with the reason the executor is killed.
	kill context.CancelCauseFunc

	state      masterv1.ExecutorState
	pid        int
	message    string
	exitStatus *int32
}

// newExecutorRunner prepares a runner for a validated LaunchExecutor request;
// the runner's steps are traced under ctx, the request's span.
func (s *Server) newExecutorRunner(ctx context.Context, m *workerv1.LaunchExecutorRequest) *executorRunner {
	execID := strconv.Itoa(int(m.GetExecutorId()))
	dir := filepath.Join(s.cfg.WorkDir, m.GetAppId(), execID)
	ctx, kill := context.WithCancelCause(context.WithoutCancel(ctx))
	return &executorRunner{
		s: s, appID: m.GetAppId(), execID: m.GetExecutorId(), cores: m.GetCores(), memoryMiB: m.GetMemoryMib(),
		launchedAt: s.cfg.Now(),
		log:        s.log.With("app", m.GetAppId(), "executor", m.GetExecutorId()),
		ctx:        ctx,
		kill:       kill,
		state:      masterv1.ExecutorState_EXECUTOR_STATE_LAUNCHING,
		launch: &launch{
			dir:      dir,
			template: m.GetDescription().GetCommand(),
			vars: map[string]string{
				"EXECUTOR_ID": execID,
				"HOSTNAME":    s.host,
				"CORES":       strconv.Itoa(int(m.GetCores())),
				"APP_ID":      m.GetAppId(),
				"WORKER_URL":  s.cfg.URL,
			},
			env: []string{
				"GLINT_WORK_DIR=" + dir,
				"GLINT_EXECUTOR_ID=" + execID,
				"GLINT_APP_ID=" + m.GetAppId(),
				child.WorkerURLEnv + "=" + s.cfg.URL,
			},
			now:        s.cfg.Now,
			listenHost: s.host,
			attrs: []attribute.KeyValue{
				telemetry.AppID.String(m.GetAppId()), telemetry.ExecutorID.Int(int(m.GetExecutorId())),
				telemetry.WorkerID.String(s.id), telemetry.Cores.Int(int(m.GetCores())), telemetry.MemoryMiB.Int64(m.GetMemoryMib()),
			},
		},
	}
}

func (r *executorRunner) key() executorKey { return executorKey{app: r.appID, id: r.execID} }

// run launches the executor, waits for it to end and reports how it ended.
func (r *executorRunner) run() {
	defer r.s.runners.Done()
	defer r.kill(nil)
	steps := []step{workdirStep{}, commandStep{}, logsStep{}, startStep{}, reportStep{running: r.running}}
	timings, err := runSteps(r.ctx, r.s.tracer, r.log, steps, r.launch)
	if err != nil {
		if r.ctx.Err() != nil {
			r.finish(r.ctx, masterv1.ExecutorState_EXECUTOR_STATE_KILLED,
				fmt.Sprintf("%v before its process started", context.Cause(r.ctx)), nil)
			return
		}
		r.log.WarnContext(r.ctx, "executor failed to launch", "err", err)
		r.finish(r.ctx, masterv1.ExecutorState_EXECUTOR_STATE_FAILED, err.Error(), nil)
		return
	}
	r.log.InfoContext(r.ctx, "executor started", "pid", r.launch.cmd.Process.Pid, "path", r.launch.path,
		"launch", r.launch.startedAt.Sub(r.launchedAt), slog.Group("steps", timings...))
	telemetry.Observe(r.ctx, r.s.metrics.processStart, r.launch.startedAt.Sub(r.launchedAt).Seconds())
	wctx, span := r.s.tracer.Start(r.ctx, "process.wait", trace.WithAttributes(r.launch.attrs...))
	defer span.End()
	e, killed := waitProcess(r.ctx, r.log, r.launch.cmd, r.s.cfg.KillGrace)
	var reason error
	if killed {
		reason = context.Cause(r.ctx)
	}
	state, message := executorOutcome(e, reason)
	endWait(span, e, state == masterv1.ExecutorState_EXECUTOR_STATE_FAILED, message)
	r.finish(wctx, state, message, e.status())
}

// endWait records how a process ended on its process.wait span; a failure
// sets the span's status to Error with an exception event.
func endWait(span trace.Span, e exit, failed bool, message string) {
	if status := e.status(); status != nil {
		span.SetAttributes(attribute.Int("process.exit.code", int(*status)))
	}
	if failed {
		telemetry.Fail(span, errors.New(message))
	}
}

// executorOutcome is the final state of an executor whose process ended as e;
// reason is why it was killed on request, nil if it was not.
func executorOutcome(e exit, reason error) (masterv1.ExecutorState, string) {
	switch {
	case reason != nil:
		return masterv1.ExecutorState_EXECUTOR_STATE_KILLED, fmt.Sprintf("%v; %v", reason, e)
	case e.success():
		return masterv1.ExecutorState_EXECUTOR_STATE_EXITED, e.String()
	default:
		return masterv1.ExecutorState_EXECUTOR_STATE_FAILED, e.String()
	}
}

// running is the report step: the executor is RUNNING, and the master hears so.
func (r *executorRunner) running(ctx context.Context, l *launch) {
	r.s.mu.Lock()
	r.setStateLocked(masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)
	r.pid = l.cmd.Process.Pid
	r.s.mu.Unlock()
	r.reportState(ctx, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING, "", nil)
}

// finish records the executor's final state, frees its cores and memory and
// reports the state to the master.
func (r *executorRunner) finish(ctx context.Context, state masterv1.ExecutorState, message string, status *int32) {
	s := r.s
	s.mu.Lock()
	r.setStateLocked(state)
	r.message, r.exitStatus = message, status
	delete(s.executors, r.key())
	s.coresUsed -= r.cores
	s.memoryUsedMiB -= r.memoryMiB
	s.finishedExecutors = retain(s.finishedExecutors, r)
	s.mu.Unlock()
	r.log.InfoContext(ctx, "executor finished", "state", lifecycle.Name(state), "message", message)
	r.reportState(ctx, state, message, status)
}

func (r *executorRunner) setStateLocked(to masterv1.ExecutorState) {
	if err := executorTransitions.Check(fmt.Sprintf("executor %s/%d", r.appID, r.execID), r.state, to); err != nil {
		r.log.Error("executor state", "err", err)
		return
	}
	r.state = to
}

// reportState queues ExecutorStateChanged for the master.
func (r *executorRunner) reportState(ctx context.Context, state masterv1.ExecutorState, message string, status *int32) {
	req := &masterv1.ExecutorStateChangedRequest{
		AppId: r.appID, ExecutorId: r.execID, State: state, Message: message, ExitStatus: status,
		WorkerId: r.s.id, LaunchedAt: timestamppb.New(r.launchedAt), ExecutorUrl: r.launch.url,
	}
	if !r.launch.startedAt.IsZero() {
		req.StartedAt = timestamppb.New(r.launch.startedAt)
	}
	what := fmt.Sprintf("executor %s/%d %s", r.appID, r.execID, lifecycle.Name(state))
	r.s.report(ctx, what, func(ctx context.Context, c masterv1connect.MasterServiceClient) error {
		_, err := c.ExecutorStateChanged(ctx, connect.NewRequest(req))
		return err
	})
}

// retain appends r to finished, keeping the last retainedFinished.
func retain[R any](finished []R, r R) []R {
	if len(finished) >= retainedFinished {
		finished = finished[len(finished)-retainedFinished+1:]
	}
	return append(finished, r)
}
