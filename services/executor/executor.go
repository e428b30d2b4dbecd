// Package executor is Glint's executor backend (Spark's
// CoarseGrainedExecutorBackend): a process a worker starts for one application,
// which fetches the application's properties from the driver, registers with it
// and runs the tasks the driver launches on its cores.
package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/driver/v1/driverv1connect"
	executorv1 "github.com/glint-cluster/glint/pkg/api/glint/executor/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/executor/v1/executorv1connect"
	"github.com/glint-cluster/glint/pkg/app"
	"github.com/glint-cluster/glint/pkg/fault"
	"github.com/glint-cluster/glint/pkg/ids"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry"
)

// Config configures an executor; the fields mirror the command-line flags a
// worker passes (--driver-url, --executor-id, --hostname, --cores, --app-id,
// --worker-url).
type Config struct {
	DriverURL  string
	ExecutorID int32
	Hostname   string
	Cores      int32
	AppID      string
	WorkerURL  string
	// Apps holds the task functions this binary can run.
	Apps *app.Registry
	// Listener, when set, is the socket to serve on (the worker opens it and
	// hands it over); otherwise the executor listens on Listen.
	Listener net.Listener
	// Listen is the address to serve on without a Listener; default ":0".
	Listen string
	// Attempts is how often each call to the driver is tried before giving up; default 3.
	Attempts int
	// RetryInterval is the pause between attempts; default 1s.
	RetryInterval time.Duration
	// Instruments are the logger, tracer provider and metrics registry.
	telemetry.Instruments
}

func (c *Config) validate() error {
	var err error
	if c.DriverURL, err = rpc.NormalizeURL(c.DriverURL); err != nil {
		return fmt.Errorf("--driver-url: %w", err)
	}
	if err := ids.ValidateApp(c.AppID); err != nil {
		return fmt.Errorf("--app-id: %w", err)
	}
	if err := ids.ValidateExecutor(c.ExecutorID); err != nil {
		return fmt.Errorf("--executor-id: %w", err)
	}
	if c.Cores <= 0 {
		return fmt.Errorf("--cores %d: must be positive", c.Cores)
	}
	if c.Hostname == "" {
		return fmt.Errorf("--hostname: must be set")
	}
	if c.Apps == nil {
		return fmt.Errorf("no applications registered")
	}
	if c.Listen == "" {
		c.Listen = ":0"
	}
	if c.Attempts <= 0 {
		c.Attempts = 3
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = time.Second
	}
	c.Instruments.SetDefaults()
	return nil
}

// backend serves ExecutorService and runs tasks on Cores slots.
type backend struct {
	cfg    Config
	log    *slog.Logger
	driver driverv1connect.DriverServiceClient
	// updates delivers StatusUpdates to the driver in order.
	updates *rpc.Mailbox
	metrics *metrics
	// stop ends Run: nil for StopExecutor, an error when the driver is lost.
	stop func(error)

	mu    sync.Mutex
	tasks map[int64]context.CancelFunc
	wg    sync.WaitGroup
}

var _ executorv1connect.ExecutorServiceHandler = (*backend)(nil)

// Run is the executor's whole life: serve, fetch properties, register, run
// tasks until the driver stops it (nil), ctx ends (nil unless it ended with a
// cause, such as its worker's death), or the driver is lost (an error naming
// the step and the URL).
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	b := &backend{
		cfg:     cfg,
		log:     cfg.Logger.With("app", cfg.AppID, "executor", cfg.ExecutorID),
		driver:  driverv1connect.NewDriverServiceClient(rpc.NewHTTPClient(), cfg.DriverURL, rpc.ClientOptions(cfg.TracerProvider)...),
		updates: rpc.NewMailbox(ctx),
		metrics: newMetrics(cfg.Registry),
		stop:    cancel,
		tasks:   map[int64]context.CancelFunc{},
	}

	ln := cfg.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.Listen); err != nil {
			return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle(executorv1connect.NewExecutorServiceHandler(b, rpc.HandlerOptions(cfg.TracerProvider)...))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.Handle("GET /metrics", telemetry.MetricsHandler(cfg.Registry))
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan error, 1)
	go func() { served <- rpc.Serve(serveCtx, ln, mux) }()
	defer func() {
		stopServing()
		if err := <-served; err != nil {
			b.log.Warn("stop serving", "err", err)
		}
	}()

	url := rpc.URL(ln.Addr(), cfg.Hostname)
	if err := b.connect(ctx, url); err != nil {
		return err
	}
	b.log.Info("executor registered", "url", url, "cores", cfg.Cores)
	<-ctx.Done()
	b.killAll("executor stopping")
	b.wg.Wait()
	b.updates.Wait()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return nil
}

// connect is the start-up sequence of CoarseGrainedExecutorBackend:
// RetrieveSparkProps, RegisterExecutor, LaunchedExecutor.
func (b *backend) connect(ctx context.Context, url string) error {
	var props *driverv1.RetrieveSparkPropsResponse
	err := b.call(ctx, "retrieve properties", func(ctx context.Context) error {
		resp, err := b.driver.RetrieveSparkProps(ctx, connect.NewRequest(&driverv1.RetrieveSparkPropsRequest{
			AppId: b.cfg.AppID, ExecutorId: b.cfg.ExecutorID,
		}))
		if err == nil {
			props = resp.Msg
		}
		return err
	})
	if err != nil {
		return err
	}
	b.log.Debug("retrieved properties", "count", len(props.GetProperties()))
	err = b.call(ctx, "register", func(ctx context.Context) error {
		_, err := b.driver.RegisterExecutor(ctx, connect.NewRequest(&driverv1.RegisterExecutorRequest{
			AppId: b.cfg.AppID, ExecutorId: b.cfg.ExecutorID, Hostname: b.cfg.Hostname,
			Cores: b.cfg.Cores, ExecutorUrl: url, WorkerUrl: b.cfg.WorkerURL,
		}))
		return err
	})
	if err != nil {
		return err
	}
	return b.call(ctx, "report launched", func(ctx context.Context) error {
		_, err := b.driver.LaunchedExecutor(ctx, connect.NewRequest(&driverv1.LaunchedExecutorRequest{ExecutorId: b.cfg.ExecutorID}))
		return err
	})
}

// call tries fn up to Attempts times while the driver is unreachable; a
// rejection by the driver is final.
func (b *backend) call(ctx context.Context, step string, fn func(context.Context) error) error {
	var err error
	for attempt := 1; attempt <= b.cfg.Attempts; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = fn(cctx)
		cancel()
		if err == nil {
			return nil
		}
		if code := connect.CodeOf(err); code != connect.CodeUnavailable && code != connect.CodeDeadlineExceeded {
			return fmt.Errorf("%s with driver %s: rejected: %w", step, b.cfg.DriverURL, err)
		}
		b.log.Warn("driver unreachable", "step", step, "driver_url", b.cfg.DriverURL, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s with driver %s: %w", step, b.cfg.DriverURL, context.Cause(ctx))
		case <-time.After(b.cfg.RetryInterval):
		}
	}
	return fmt.Errorf("%s with driver %s: unreachable after %d attempts: %w", step, b.cfg.DriverURL, b.cfg.Attempts, err)
}

// LaunchTask starts a task on a free core.
func (b *backend) LaunchTask(ctx context.Context, req *connect.Request[executorv1.LaunchTaskRequest]) (*connect.Response[executorv1.LaunchTaskResponse], error) {
	m := req.Msg
	trace.SpanFromContext(ctx).SetAttributes(telemetry.AppID.String(b.cfg.AppID), telemetry.ExecutorID.Int(int(b.cfg.ExecutorID)),
		attribute.Int64("glint.task.id", m.GetTaskId()), attribute.String("glint.task.name", m.GetName()))
	fn, ok := b.cfg.Apps.Task(m.GetName())
	if !ok {
		return nil, rpc.Error(fmt.Errorf("launch task %d: %w: no task function %q in this binary", m.GetTaskId(), fault.ErrNotFound, m.GetName()))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, dup := b.tasks[m.GetTaskId()]; dup {
		return nil, rpc.Error(fmt.Errorf("launch task %d: %w", m.GetTaskId(), fault.ErrAlreadyExists))
	}
	if len(b.tasks) >= int(b.cfg.Cores) {
		return nil, rpc.Error(fmt.Errorf("launch task %d: %w: all %d cores are busy", m.GetTaskId(), fault.ErrResourceExhausted, b.cfg.Cores))
	}
	tctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	b.tasks[m.GetTaskId()] = func() { cancel(errKilled) }
	b.metrics.tasksRunning.Inc()
	b.wg.Go(func() { b.runTask(tctx, m, fn) })
	return connect.NewResponse(&executorv1.LaunchTaskResponse{}), nil
}

var errKilled = errors.New("task killed")

func (b *backend) runTask(ctx context.Context, m *executorv1.LaunchTaskRequest, fn app.TaskFunc) {
	out, err := safeRun(ctx, fn, m.GetInput())
	b.mu.Lock()
	delete(b.tasks, m.GetTaskId())
	b.mu.Unlock()
	b.metrics.tasksRunning.Dec()
	update := &driverv1.StatusUpdateRequest{ExecutorId: b.cfg.ExecutorID, TaskId: m.GetTaskId()}
	switch {
	case err == nil:
		update.State, update.Result = driverv1.TaskState_TASK_STATE_FINISHED, out
	case errors.Is(context.Cause(ctx), errKilled):
		update.State, update.Message = driverv1.TaskState_TASK_STATE_KILLED, err.Error()
	default:
		update.State, update.Message = driverv1.TaskState_TASK_STATE_FAILED, err.Error()
	}
	b.metrics.tasks.WithLabelValues(lifecycle.Label(update.State)).Inc()
	b.updates.Post(ctx, func(ctx context.Context) {
		if _, err := b.driver.StatusUpdate(ctx, connect.NewRequest(update)); err != nil {
			if connect.CodeOf(err) == connect.CodeUnavailable {
				b.stop(fmt.Errorf("status update to driver %s: driver lost: %w", b.cfg.DriverURL, err))
				return
			}
			b.log.Warn("status update", "task", update.GetTaskId(), "err", err)
		}
	})
}

// safeRun runs a task function, turning a panic into the task's error.
func safeRun(ctx context.Context, fn app.TaskFunc, input []byte) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("task panicked: %v", r)
		}
	}()
	return fn(ctx, input)
}

// KillTask cancels a running task; it then reports KILLED.
func (b *backend) KillTask(_ context.Context, req *connect.Request[executorv1.KillTaskRequest]) (*connect.Response[executorv1.KillTaskResponse], error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	kill, ok := b.tasks[req.Msg.GetTaskId()]
	if !ok {
		return nil, rpc.Error(fmt.Errorf("kill task %d: %w", req.Msg.GetTaskId(), fault.ErrNotFound))
	}
	kill()
	return connect.NewResponse(&executorv1.KillTaskResponse{}), nil
}

// StopExecutor makes Run return nil, so the process exits with status 0.
func (b *backend) StopExecutor(context.Context, *connect.Request[executorv1.StopExecutorRequest]) (*connect.Response[executorv1.StopExecutorResponse], error) {
	b.log.Info("driver commanded a shutdown")
	b.stop(nil)
	return connect.NewResponse(&executorv1.StopExecutorResponse{}), nil
}

func (b *backend) killAll(reason string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, kill := range b.tasks {
		b.log.Info("killing task", "task", id, "reason", reason)
		kill()
	}
}
