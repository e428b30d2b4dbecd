// Package executor is Glint's executor backend (Spark's
// CoarseGrainedExecutorBackend): a process a worker starts for one application,
// which fetches the application's properties from the driver, registers with it
// and runs the tasks the driver launches on its cores.
package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/timestamppb"

	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	executorv1 "github.com/glint-cluster/glint/pkg/api/glint/executor/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/executor/v1/executorv1connect"
	"github.com/glint-cluster/glint/pkg/app"
	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/fault"
	"github.com/glint-cluster/glint/pkg/ids"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry"
)

// Config configures an executor: the flags a worker passes (child.ExecutorArgs)
// and where the executor serves.
type Config struct {
	child.ExecutorArgs
	// URL is where this executor serves ExecutorService; the driver is told it
	// at registration.
	URL string
	// Apps holds the task functions this binary can run.
	Apps *app.Registry
	// AppToken is the application's token (child.AppTokenEnv): the executor
	// calls its driver with it and accepts calls only with it. Empty: no
	// authentication.
	AppToken string
	// Attempts is how often each call to the driver is tried before giving up; default 3.
	Attempts int
	// RetryInterval is the pause between attempts; default 1s.
	RetryInterval time.Duration
	// Settle, if set, is called before the executor registers with its
	// driver, and an error from it ends the executor: a claimed executor
	// waits there for its work directory and log files.
	Settle func() error
	// Registered, if set, is called once the executor registered with its
	// driver (a prestarted executor tells its worker so).
	Registered func()
	// Waiting, if set, is called once the executor's start-up first waits
	// on its driver: its registration sent, or a call to be tried again
	// (the executor command then watches SIGTERM and SIGINT).
	Waiting func()
	// Booted is when the executor process reached its main, told to its
	// driver with RetrieveSparkProps; zero for a prestarted executor, which
	// booted before its launch.
	Booted time.Time
	// Instruments are the logger and tracer provider (its metrics are its
	// own: metrics).
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
	if c.URL, err = rpc.NormalizeURL(c.URL); err != nil {
		return fmt.Errorf("executor URL: %w", err)
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

// Server is an executor: it serves ExecutorService and runs tasks on Cores
// slots.
type Server struct {
	cfg    Config
	log    *slog.Logger
	driver *driverClient
	// reports delivers the tasks' ends to the driver in order, batched.
	reports reports
	metrics *metrics
	// life ends when the executor stops; stop ends it: with nil for
	// StopExecutor, with the reason when the driver is lost or Run's context
	// ends.
	life context.Context
	stop context.CancelCauseFunc
	// waiting calls Config.Waiting, once.
	waiting func()
	// handler is built once: by Run once the executor registered, as
	// Spark's executor makes its Executor on RegisteredExecutor, or by a
	// request that comes first.
	handler func() http.Handler

	mu sync.Mutex
	// launch is the span the executor runs within (Run's context: its span
	// in its application's trace).
	launch trace.SpanContext
	// tasks are the tasks launched and not yet ended, running or queued.
	tasks map[int64]*task
	// queue is the tasks waiting for a core, in launch order.
	queue   []*task
	running int
	wg      sync.WaitGroup
}

// task is a launched task; ctx carries its LaunchTask call's trace (or, in
// the application's trace, the executor's span) and ends with errKilled or
// errStopping.
type task struct {
	desc   *executorv1.TaskDescription
	fn     app.TaskFunc
	ctx    context.Context
	cancel context.CancelCauseFunc
}

var _ executorv1connect.ExecutorServiceHandler = (*Server)(nil)

// New returns an executor for cfg; Run starts it.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	life, stop := context.WithCancelCause(context.Background())
	s := &Server{
		cfg:     cfg,
		log:     cfg.Logger.With("app", cfg.AppID, "executor", cfg.ExecutorID),
		driver:  newDriverClient(rpc.NewHTTPClient(), cfg.DriverURL, rpc.ClientOptions(cfg.TracerProvider, cfg.AppToken)...),
		metrics: &metrics{},
		life:    life,
		stop:    stop,
		tasks:   map[int64]*task{},
	}
	s.handler = sync.OnceValue(s.newHandler)
	s.waiting = func() {}
	if cfg.Waiting != nil {
		s.waiting = sync.OnceFunc(cfg.Waiting)
	}
	return s, nil
}

// Handler serves ExecutorService, /healthz and /metrics.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.handler().ServeHTTP(w, r) })
}

func (s *Server) newHandler() http.Handler {
	return rpc.NewHandler(rpc.Endpoints{
		Service: func(o ...connect.HandlerOption) (string, http.Handler) {
			return executorv1connect.NewExecutorServiceHandler(s, o...)
		},
		TracerProvider: s.cfg.TracerProvider,
		Metrics:        s.metrics,
		Tokens:         s.tokens(),
		Access:         rpc.Access{"/" + executorv1connect.ExecutorServiceName + "/": rpc.App},
	})
}

// tokens accepts the application's token, only; none without one.
func (s *Server) tokens() *rpc.Tokens {
	if s.cfg.AppToken == "" {
		return nil
	}
	t := rpc.NewTokens()
	t.Add(rpc.App, s.cfg.AppToken)
	return t
}

// Run is the executor's life, served by Handler: fetch properties, register,
// run tasks until the driver stops it (nil), ctx ends (nil unless it ended
// with a cause, such as its worker's death, which Run returns), or the driver
// is lost (an error naming the step and the URL).
func (s *Server) Run(ctx context.Context) error {
	defer context.AfterFunc(ctx, func() { s.stop(context.Cause(ctx)) })()
	defer s.stop(nil)
	// The start-up calls continue ctx's trace (the executor's span in its
	// application's trace) and end with the executor.
	s.mu.Lock()
	s.launch = trace.SpanContextFromContext(ctx)
	s.mu.Unlock()
	callCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(s.life, func() { cancel(context.Cause(s.life)) })()
	switch err := s.connect(callCtx); {
	case err == nil:
		if s.cfg.Registered != nil {
			s.cfg.Registered()
		}
		s.log.Info("executor registered", "url", s.cfg.URL, "cores", s.cfg.Cores)
	case !errors.Is(context.Cause(s.life), context.Canceled):
		return err
	}
	// Stopped, or stopped while it was still starting: the driver may stop
	// an executor whose LaunchedExecutor it has not answered yet, and that
	// is an end like any other.
	<-s.life.Done()
	s.killAll()
	s.wg.Wait()
	s.reports.wait()
	if cause := context.Cause(s.life); !errors.Is(cause, context.Canceled) {
		return cause
	}
	return nil
}

// connect is the start-up sequence of CoarseGrainedExecutorBackend:
// RetrieveSparkProps, RegisterExecutor, LaunchedExecutor. RegisterExecutor
// follows RetrieveSparkProps on the same connection as soon as that is sent,
// without waiting for its answer: the executor does not use its properties to
// register, and the driver registers it only once they were retrieved
// (props_asked), so the order is Spark's, less a round trip.
func (s *Server) connect(ctx context.Context) error {
	asked := make(chan struct{})
	var askOnce sync.Once
	ask := func() { askOnce.Do(func() { close(asked) }) }
	propsCtx, stopProps := context.WithCancel(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { ask() },
	}))
	registerCtx, stopRegister := context.WithCancelCause(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { s.waiting() },
	}))
	defer stopRegister(nil)
	propsDone := make(chan error, 1)
	var booted *timestamppb.Timestamp
	if !s.cfg.Booted.IsZero() {
		booted = timestamppb.New(s.cfg.Booted)
	}
	go func() {
		defer ask()
		err := s.call(propsCtx, "retrieve properties", func(ctx context.Context) error {
			resp, err := s.driver.retrieveSparkProps.CallUnary(ctx, connect.NewRequest(&driverv1.RetrieveSparkPropsRequest{
				AppId: s.cfg.AppID, ExecutorId: s.cfg.ExecutorID, BootedAt: booted,
			}))
			if err == nil {
				s.log.Debug("retrieved properties", "count", len(resp.Msg.GetProperties()))
			}
			return err
		})
		if err != nil {
			stopRegister(err)
		}
		propsDone <- err
	}()
	defer stopProps()
	// The properties' answer is awaited. A failure after they were asked
	// for ends that call, unless it is theirs (a failed props call ended
	// the registration): then theirs is the error.
	propsErr := func(err error) error {
		if err == nil {
			return <-propsDone
		}
		stopProps()
		if perr := <-propsDone; perr != nil && errors.Is(err, perr) {
			return perr
		}
		return err
	}
	<-asked
	if s.cfg.Settle != nil {
		if err := s.cfg.Settle(); err != nil {
			return propsErr(err)
		}
	}
	err := s.call(registerCtx, "register", func(ctx context.Context) error {
		_, err := s.driver.registerExecutor.CallUnary(ctx, connect.NewRequest(&driverv1.RegisterExecutorRequest{
			AppId: s.cfg.AppID, ExecutorId: s.cfg.ExecutorID, Hostname: s.cfg.Hostname,
			Cores: s.cfg.Cores, ExecutorUrl: s.cfg.URL, WorkerUrl: s.cfg.WorkerURL, PropsAsked: true,
		}))
		return err
	})
	if err := propsErr(err); err != nil {
		return err
	}
	// Registered: the executor makes what serves the driver's calls (the
	// driver offers it tasks once it says it is launched).
	s.handler()
	return s.call(ctx, "report launched", func(ctx context.Context) error {
		_, err := s.driver.launchedExecutor.CallUnary(ctx, connect.NewRequest(&driverv1.LaunchedExecutorRequest{ExecutorId: s.cfg.ExecutorID}))
		return err
	})
}

// call tries fn up to Attempts times while the driver is unreachable; a
// rejection by the driver is final.
func (s *Server) call(ctx context.Context, step string, fn func(context.Context) error) error {
	var err error
	for attempt := 1; attempt <= s.cfg.Attempts; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = fn(cctx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			// Cut short by the executor's own end, not refused by the driver.
			return fmt.Errorf("%s with driver %s: %w", step, s.cfg.DriverURL, context.Cause(ctx))
		}
		if code := connect.CodeOf(err); code != connect.CodeUnavailable && code != connect.CodeDeadlineExceeded {
			return fmt.Errorf("%s with driver %s: rejected: %w", step, s.cfg.DriverURL, err)
		}
		s.log.Warn("driver unreachable", "step", step, "driver_url", s.cfg.DriverURL, "attempt", attempt, "err", err)
		s.waiting()
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s with driver %s: %w", step, s.cfg.DriverURL, context.Cause(ctx))
		case <-time.After(s.cfg.RetryInterval):
		}
	}
	return fmt.Errorf("%s with driver %s: unreachable after %d attempts: %w", step, s.cfg.DriverURL, s.cfg.Attempts, err)
}

// LaunchTask takes a batch of tasks, all or none: each starts on a free core
// or waits in the queue for one.
func (s *Server) LaunchTask(ctx context.Context, req *connect.Request[executorv1.LaunchTaskRequest]) (*connect.Response[executorv1.LaunchTaskResponse], error) {
	batch := req.Msg.GetTasks()
	if len(batch) == 0 {
		return nil, rpc.Error(fmt.Errorf("launch tasks: %w: no tasks", fault.ErrInvalidArgument))
	}
	ids := make([]int64, len(batch))
	for i, m := range batch {
		ids[i] = m.GetTaskId()
	}
	trace.SpanFromContext(ctx).SetAttributes(telemetry.AppID.String(s.cfg.AppID), telemetry.ExecutorID.Int(int(s.cfg.ExecutorID)),
		attribute.Int64Slice("glint.task.ids", ids), attribute.String("glint.task.name", batch[0].GetName()))
	fns := make([]app.TaskFunc, len(batch))
	for i, m := range batch {
		fn, ok := s.cfg.Apps.Task(m.GetName())
		if !ok {
			return nil, rpc.Error(fmt.Errorf("launch task %d: %w: no task function %q in this binary", m.GetTaskId(), fault.ErrNotFound, m.GetName()))
		}
		fns[i] = fn
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := make(map[int64]bool, len(batch))
	for _, m := range batch {
		if _, dup := s.tasks[m.GetTaskId()]; dup || seen[m.GetTaskId()] {
			return nil, rpc.Error(fmt.Errorf("launch task %d: %w", m.GetTaskId(), fault.ErrAlreadyExists))
		}
		seen[m.GetTaskId()] = true
	}
	if slots := int(s.cfg.Cores) * child.TaskSlotsPerCore; len(s.tasks)+len(batch) > slots {
		return nil, rpc.Error(fmt.Errorf("launch %d tasks: %w: %d of %d task slots (%d per core) are taken",
			len(batch), fault.ErrResourceExhausted, len(s.tasks), slots, child.TaskSlotsPerCore))
	}
	// A task in the application's trace (an executor's first) reports under
	// the executor's span, which lasts: its LaunchTask call ends first.
	taskCtx := context.WithoutCancel(ctx)
	if sc := trace.SpanContextFromContext(ctx); s.launch.IsValid() && sc.TraceID() == s.launch.TraceID() {
		taskCtx = trace.ContextWithRemoteSpanContext(taskCtx, s.launch)
	}
	for i, m := range batch {
		tctx, cancel := context.WithCancelCause(taskCtx)
		t := &task{desc: m, fn: fns[i], ctx: tctx, cancel: cancel}
		s.tasks[m.GetTaskId()] = t
		s.queue = append(s.queue, t)
	}
	s.startQueuedLocked()
	return connect.NewResponse(&executorv1.LaunchTaskResponse{}), nil
}

// startQueuedLocked starts queued tasks on the free cores.
func (s *Server) startQueuedLocked() {
	for s.running < int(s.cfg.Cores) && len(s.queue) > 0 {
		t := s.queue[0]
		s.queue = s.queue[1:]
		s.running++
		s.metrics.running.Add(1)
		s.wg.Go(func() { s.runTask(t) })
	}
}

// A task's context ends with errKilled when the driver kills it, and with
// errStopping when the executor stops with tasks still running: the driver
// then learns from the master that the executor ended, and the task is not
// reported (its report would count as the task's failure).
var (
	errKilled   = errors.New("task killed")
	errStopping = errors.New("executor stopping")
)

func (s *Server) runTask(t *task) {
	began := time.Now()
	out, err := safeRun(t.ctx, t.fn, t.desc.GetInput())
	ran := time.Since(began)
	s.mu.Lock()
	delete(s.tasks, t.desc.GetTaskId())
	s.running--
	s.metrics.running.Add(-1)
	s.startQueuedLocked()
	s.mu.Unlock()
	if errors.Is(context.Cause(t.ctx), errStopping) {
		s.metrics.end(driverv1.TaskState_TASK_STATE_KILLED, 1)
		return
	}
	status := &driverv1.TaskStatus{TaskId: t.desc.GetTaskId(), RunTimeUs: ran.Microseconds()}
	switch {
	case err == nil:
		status.State, status.Result = driverv1.TaskState_TASK_STATE_FINISHED, out
	case errors.Is(context.Cause(t.ctx), errKilled):
		status.State, status.Message = driverv1.TaskState_TASK_STATE_KILLED, err.Error()
	default:
		status.State, status.Message = driverv1.TaskState_TASK_STATE_FAILED, err.Error()
	}
	s.report(t.ctx, status)
}

// report sends a task's end to the driver, with the others that ended while
// the previous report was on its way.
func (s *Server) report(ctx context.Context, status *driverv1.TaskStatus) {
	s.metrics.end(status.GetState(), 1)
	s.reports.add(ctx, status, func(ctx context.Context, batch []*driverv1.TaskStatus) {
		_, err := s.driver.statusUpdate.CallUnary(ctx, connect.NewRequest(&driverv1.StatusUpdateRequest{ExecutorId: s.cfg.ExecutorID, Updates: batch}))
		if err == nil {
			return
		}
		if connect.CodeOf(err) == connect.CodeUnavailable {
			s.stop(fmt.Errorf("status update to driver %s: driver lost: %w", s.cfg.DriverURL, err))
			return
		}
		s.log.Warn("status update", "tasks", len(batch), "err", err)
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

// KillTask cancels a running task, which then reports KILLED; a queued task
// is reported KILLED at once.
func (s *Server) KillTask(_ context.Context, req *connect.Request[executorv1.KillTaskRequest]) (*connect.Response[executorv1.KillTaskResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := req.Msg.GetTaskId()
	t, ok := s.tasks[id]
	if !ok {
		return nil, rpc.Error(fmt.Errorf("kill task %d: %w", id, fault.ErrNotFound))
	}
	t.cancel(errKilled)
	if i := slices.Index(s.queue, t); i >= 0 {
		s.queue = slices.Delete(s.queue, i, i+1)
		delete(s.tasks, id)
		s.report(t.ctx, &driverv1.TaskStatus{TaskId: id, State: driverv1.TaskState_TASK_STATE_KILLED, Message: "killed before it started: " + req.Msg.GetReason()})
	}
	return connect.NewResponse(&executorv1.KillTaskResponse{}), nil
}

// StopExecutor makes Run return nil, so the process exits with status 0; the
// answer still reaches the driver, as serving stops only once it was written.
func (s *Server) StopExecutor(context.Context, *connect.Request[executorv1.StopExecutorRequest]) (*connect.Response[executorv1.StopExecutorResponse], error) {
	s.log.Info("driver commanded a shutdown")
	s.stop(nil)
	return connect.NewResponse(&executorv1.StopExecutorResponse{}), nil
}

// killAll ends every running task as the executor stops, and drops the
// queued ones; none is reported.
func (s *Server) killAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, t := range s.tasks {
		s.log.Info("killing task", "task", id, "reason", errStopping)
		t.cancel(errStopping)
	}
	s.metrics.end(driverv1.TaskState_TASK_STATE_KILLED, len(s.queue))
	s.queue = nil
}
