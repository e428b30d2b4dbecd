package worker

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/protobuf/types/known/timestamppb"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	workerv1 "github.com/glint-cluster/glint/pkg/api/glint/worker/v1"
	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/telemetry"
	"github.com/glint-cluster/glint/pkg/telemetry/prom"
)

// executorKey names an executor on this worker.
type executorKey struct {
	app string
	id  int32
}

// executorRunner runs one executor process (Spark's ExecutorRunner): its
// hooks report RUNNING and the final state to the master.
type executorRunner struct {
	runner[masterv1.ExecutorState]
	appID  string
	execID int32
	// url is where the executor serves once it runs (under the worker's mu).
	url string
}

var _ hooks[masterv1.ExecutorState] = (*executorRunner)(nil)

// newExecutorRunner prepares a runner for a validated LaunchExecutor request;
// the runner's steps are traced under ctx, the request's span.
func (s *Server) newExecutorRunner(ctx context.Context, m *workerv1.LaunchExecutorRequest) *executorRunner {
	execID := strconv.Itoa(int(m.GetExecutorId()))
	dir := filepath.Join(s.cfg.WorkDir, m.GetAppId(), execID)
	r := &executorRunner{appID: m.GetAppId(), execID: m.GetExecutorId()}
	r.runner = runner[masterv1.ExecutorState]{
		kind: &executorKind, hooks: r,
		what:  fmt.Sprintf("executor %s/%d", m.GetAppId(), m.GetExecutorId()),
		log:   s.log.With("app", m.GetAppId(), "executor", m.GetExecutorId()),
		cores: m.GetCores(), memoryMiB: m.GetMemoryMib(),
		spec: launch{
			dir:      dir,
			template: m.GetDescription().GetCommand(),
			defaults: coresEnv(m.GetCores()),
			vars: map[string]string{
				child.VarExecutorID: execID,
				child.VarHostname:   s.host,
				child.VarCores:      strconv.Itoa(int(m.GetCores())),
				child.VarAppID:      m.GetAppId(),
				child.VarWorkerURL:  s.cfg.URL,
			},
			env: append(child.WorkerEnv(childTLS(s.cfg)),
				child.WorkDirEnv+"="+dir,
				child.ExecutorIDEnv+"="+execID,
				child.AppIDEnv+"="+m.GetAppId(),
				child.WorkerURLEnv+"="+s.cfg.URL,
			),
			secrets:    child.Secrets{AppToken: m.GetAppToken()},
			now:        s.cfg.Now,
			listenHost: s.host,
			prestart:   s.prestart,
			relay:      s.cfg.SpanRelay,
			spare:      s.spare,
			redaction:  s.cfg.Redaction,
			cgroups:    s.cgroups,
			cgroupName: "executor-" + m.GetAppId() + "-" + execID,
			owner:      m.GetAppId(),
			limits:     s.limits(m.GetCores(), m.GetMemoryMib()),
			attrs: []attribute.KeyValue{
				telemetry.AppID.String(m.GetAppId()), telemetry.ExecutorID.Int(int(m.GetExecutorId())),
				telemetry.WorkerID.String(s.id), telemetry.Cores.Int(int(m.GetCores())), telemetry.MemoryMiB.Int64(m.GetMemoryMib()),
			},
		},
	}
	r.init(ctx, s)
	return r
}

func (r *executorRunner) key() executorKey { return executorKey{app: r.appID, id: r.execID} }

func (r *executorRunner) addLocked() bool {
	if !r.s.launched.add(r.key(), r.s.executors) {
		return false
	}
	r.s.executors[r.key()] = r
	return true
}

func (r *executorRunner) removeLocked(ended bool) {
	delete(r.s.executors, r.key())
	if ended {
		r.s.finishedExecutors = retain(r.s.finishedExecutors, r)
	} else {
		// Refused, never launched: a resend may launch it.
		delete(r.s.launched[r.appID], r.execID)
	}
}

// poststart tells the master the executor is RUNNING, with its launch and
// start times, and records how long the start took. A claimed executor is
// reported once it registered with its driver (or ended): the report's work
// at the master and the driver does not then compete with its launch for the
// CPU, and its start time is still the claim's.
func (r *executorRunner) poststart(ctx context.Context, l *launch) {
	r.s.mu.Lock()
	r.url = l.url
	r.s.mu.Unlock()
	prom.Observe(r.ctx, r.s.metrics.processStart, l.startedAt.Sub(r.launchedAt).Seconds())
	if l.registered != nil {
		select {
		case <-l.registered:
		case <-ctx.Done():
		}
	}
	// Sent from the reports' mailbox after the report step ended: in the
	// launch's span, which lasts.
	r.reportState(r.ctx, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING, "", nil)
}

// endedLocked keeps the executor's final state until a master acknowledges
// it, and returns its report.
func (r *executorRunner) endedLocked(state masterv1.ExecutorState, message string, status *int32) func(context.Context) {
	req := r.stateRequest(state, message, status)
	r.s.keepLocked(r.what, r.s.finals.addExecutor(req))
	return func(ctx context.Context) {
		r.s.report(ctx, r.what+" "+lifecycle.Name(state), func(ctx context.Context, c masterv1connect.MasterServiceClient) error {
			_, err := c.ExecutorStateChanged(ctx, connect.NewRequest(req))
			return err
		}, func() { r.s.finals.ackExecutor(req) })
	}
}

// reportState queues ExecutorStateChanged for the master.
func (r *executorRunner) reportState(ctx context.Context, state masterv1.ExecutorState, message string, status *int32) {
	req := r.stateRequest(state, message, status)
	r.s.report(ctx, r.what+" "+lifecycle.Name(state), func(ctx context.Context, c masterv1connect.MasterServiceClient) error {
		_, err := c.ExecutorStateChanged(ctx, connect.NewRequest(req))
		return err
	}, nil)
}

// stateRequest is the executor's ExecutorStateChanged.
func (r *executorRunner) stateRequest(state masterv1.ExecutorState, message string, status *int32) *masterv1.ExecutorStateChangedRequest {
	req := &masterv1.ExecutorStateChangedRequest{
		AppId: r.appID, ExecutorId: r.execID, State: state, Message: message, ExitStatus: status,
		WorkerId: r.s.id, LaunchedAt: timestamppb.New(r.launchedAt), ExecutorUrl: r.current.url,
	}
	if !r.current.startedAt.IsZero() {
		req.StartedAt = timestamppb.New(r.current.startedAt)
	}
	return req
}
