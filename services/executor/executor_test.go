package executor_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/glint-cluster/glint/internal/servicetest"
	"github.com/glint-cluster/glint/internal/tooltest"
	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/driver/v1/driverv1connect"
	executorv1 "github.com/glint-cluster/glint/pkg/api/glint/executor/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/executor/v1/executorv1connect"
	"github.com/glint-cluster/glint/pkg/app"
	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/rpc/rpctest"
	"github.com/glint-cluster/glint/pkg/telemetry"
	"github.com/glint-cluster/glint/services/driver"
	"github.com/glint-cluster/glint/services/executor"
	"github.com/glint-cluster/glint/services/master"
)

// waitLimit bounds every wait for something that should happen promptly, so
// that a broken rule fails its test instead of hanging the suite.
const waitLimit = 10 * time.Second

// testApp is the application "t": task "echo" returns its input, "panic"
// panics, and "block" signals started, then runs until released or killed.
type testApp struct {
	app     *app.App
	started chan struct{}
	release chan struct{}
}

func newTestApp(t *testing.T) *testApp {
	ta := &testApp{started: make(chan struct{}, 16), release: make(chan struct{})}
	ta.app = &app.App{
		Name: "t",
		Run:  func(context.Context, app.Context, []string) error { return nil },
		Tasks: map[string]app.TaskFunc{
			"echo":  func(_ context.Context, in []byte) ([]byte, error) { return append([]byte("echo "), in...), nil },
			"panic": func(context.Context, []byte) ([]byte, error) { panic("disk on fire") },
			"block": func(ctx context.Context, in []byte) ([]byte, error) {
				ta.started <- struct{}{}
				select {
				case <-ta.release:
					return in, nil
				case <-ctx.Done():
					return nil, context.Cause(ctx)
				}
			},
		},
	}
	t.Cleanup(func() { close(ta.release) })
	return ta
}

// waitStarted waits until a block task runs.
func (ta *testApp) waitStarted(t *testing.T) {
	t.Helper()
	select {
	case <-ta.started:
	case <-time.After(waitLimit):
		t.Fatal("no block task started")
	}
}

// startDriver starts a driver for a with a real master on loopback; the
// cluster has no workers, so tests start the executor themselves.
func startDriver(t *testing.T, a *app.App, conf map[string]string) *driver.Driver {
	t.Helper()
	return servicetest.Driver(t, driver.Config{
		Masters: []string{servicetest.Master(t, master.Config{})}, App: a,
		ExecutorCommand: []string{"/bin/false"}, Conf: conf,
	})
}

// listener opens a loopback listener on an ephemeral port.
func listener(t *testing.T) net.Listener {
	t.Helper()
	ln, _ := servicetest.Listen(t)
	return ln
}

// runningExecutor is an executor in this process, serving on loopback.
type runningExecutor struct {
	url    string
	client executorv1connect.ExecutorServiceClient
	spans  *tracetest.SpanRecorder
	done   chan struct{}
	err    error // Run's result, once done is closed
	// connected is closed once the executor registered and its
	// LaunchedExecutor call ended (Config.Registered).
	connected chan struct{}
}

// startExecutor runs executor 0 of d's application with cores until ctx ends
// or the test does.
func startExecutor(ctx context.Context, t *testing.T, d *driver.Driver, a *app.App, cores int32) *runningExecutor {
	t.Helper()
	apps, err := app.NewRegistry(a)
	if err != nil {
		t.Fatal(err)
	}
	ln, url := servicetest.Listen(t)
	spans := tracetest.NewSpanRecorder()
	e := &runningExecutor{
		url:       url,
		spans:     spans,
		done:      make(chan struct{}),
		connected: make(chan struct{}),
	}
	e.client = executorv1connect.NewExecutorServiceClient(rpc.NewHTTPClient(), e.url, rpc.ClientOptions(noop.NewTracerProvider(), d.AppToken())...)
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		defer close(e.done)
		e.err = servicetest.RunExecutor(ctx, ln, executor.Config{
			ExecutorArgs: child.ExecutorArgs{
				DriverURL: d.URL(), ExecutorID: 0, Hostname: "127.0.0.1", Cores: cores, AppID: d.AppID(),
				WorkerURL: "http://127.0.0.1:1",
			},
			Apps: apps, AppToken: d.AppToken(), RetryInterval: 10 * time.Millisecond, Registered: func() { close(e.connected) },
			Instruments: telemetry.Instruments{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))},
		})
	}()
	t.Cleanup(func() {
		cancel()
		e.wait(t)
	})
	return e
}

// wait returns Run's result once it returned.
func (e *runningExecutor) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-e.done:
		return e.err
	case <-time.After(waitLimit):
		t.Fatal("executor.Run did not return")
		return nil
	}
}

// waitConnected waits until the executor's start-up sequence is over: its
// LaunchedExecutor call to the driver returned.
func (e *runningExecutor) waitConnected(t *testing.T) {
	t.Helper()
	select {
	case <-e.connected:
	case <-time.After(waitLimit):
		t.Fatal("the executor's LaunchedExecutor call did not end")
	}
}

// launch calls LaunchTask on the executor directly, as a driver would.
func (e *runningExecutor) launch(id int64, task string) error {
	_, err := e.client.LaunchTask(context.Background(), connect.NewRequest(&executorv1.LaunchTaskRequest{Tasks: []*executorv1.TaskDescription{{
		TaskId: id, Name: app.TaskID("t", task), Input: []byte(fmt.Sprint(id)),
	}}}))
	return err
}

// launchBatch calls LaunchTask with one task of the given ids.
func (e *runningExecutor) launchBatch(task string, ids ...int64) error {
	req := &executorv1.LaunchTaskRequest{}
	for _, id := range ids {
		req.Tasks = append(req.Tasks, &executorv1.TaskDescription{TaskId: id, Name: app.TaskID("t", task), Input: []byte(fmt.Sprint(id))})
	}
	_, err := e.client.LaunchTask(context.Background(), connect.NewRequest(req))
	return err
}

// runTasks runs the driver's task over inputs, failing the test if the job
// does not end.
func runTasks(t *testing.T, d *driver.Driver, task string, inputs ...string) ([][]byte, error) {
	t.Helper()
	type result struct {
		out [][]byte
		err error
	}
	res := make(chan result, 1)
	go func() {
		in := make([][]byte, len(inputs))
		for i, s := range inputs {
			in[i] = []byte(s)
		}
		out, err := d.RunTasks(context.Background(), task, in)
		res <- result{out, err}
	}()
	select {
	case r := <-res:
		return r.out, r.err
	case <-time.After(waitLimit):
		t.Fatalf("job %s did not end", task)
		return nil, nil
	}
}

func TestRunRegistersWithTheDriverAndReturnsTaskResults(t *testing.T) {
	ta := newTestApp(t)
	driverSpans := tracetest.NewSpanRecorder()
	d := servicetest.Driver(t, driver.Config{
		Masters: []string{servicetest.Master(t, master.Config{})}, App: ta.app, ExecutorCommand: []string{"/bin/false"},
		Instruments: telemetry.Instruments{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(driverSpans))},
	})
	e := startExecutor(context.Background(), t, d, ta.app, 2)

	out, err := runTasks(t, d, "echo", "a", "b", "c")
	if err != nil {
		t.Fatal(err)
	}
	if want := [][]byte{[]byte("echo a"), []byte("echo b"), []byte("echo c")}; !slices.EqualFunc(out, want, slices.Equal) {
		t.Errorf("results %q, want %q", out, want)
	}
	// The driver offers tasks while it answers LaunchedExecutor, so the job
	// can end before that call's span does.
	e.waitConnected(t)

	// The start-up calls were made in Spark's order: RegisterExecutor
	// follows RetrieveSparkProps without waiting for its answer (the driver
	// keeps the order), LaunchedExecutor follows both answers. (LaunchedExecutor,
	// an anchored call, has the driver's span only.)
	var calls []sdktrace.ReadOnlySpan
	for _, s := range slices.Concat(e.spans.Ended(), driverSpans.Ended()) {
		if strings.HasPrefix(s.Name(), "glint.driver.v1.DriverService/") && !strings.HasSuffix(s.Name(), "/StatusUpdate") &&
			(s.SpanKind() == trace.SpanKindClient || strings.HasSuffix(s.Name(), "/LaunchedExecutor")) {
			calls = append(calls, s)
		}
	}
	slices.SortFunc(calls, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	var names []string
	for i, s := range calls {
		names = append(names, strings.TrimPrefix(s.Name(), "glint.driver.v1.DriverService/"))
		for _, before := range calls[:i] {
			if strings.HasSuffix(s.Name(), "/LaunchedExecutor") && s.StartTime().Before(before.EndTime()) {
				t.Errorf("%s started before %s ended", s.Name(), before.Name())
			}
		}
	}
	if want := []string{"RetrieveSparkProps", "RegisterExecutor", "LaunchedExecutor"}; !slices.Equal(names, want) {
		t.Errorf("calls to the driver %v, want %v", names, want)
	}
	tl := d.Timelines()
	if len(tl) != 1 || tl[0].PropsRetrieved.IsZero() || tl[0].Registered.Before(tl[0].PropsRetrieved) || tl[0].FirstTask.Before(tl[0].Registered) {
		t.Errorf("driver's timelines %+v; want executor 0 with properties retrieved, then registered, then a first task", tl)
	}
}

// runOn runs an executor (of a test app, one core) of driver, served on
// loopback, until ctx ends or it stops; it returns the executor's URL and
// where Run's result arrives.
func runOn(ctx context.Context, t *testing.T, driver driverv1connect.DriverServiceHandler) (string, <-chan error) {
	t.Helper()
	return runOnWith(ctx, t, driver, nil)
}

// runOnWith is runOn with the executor's Waiting hook.
func runOnWith(ctx context.Context, t *testing.T, driver driverv1connect.DriverServiceHandler, waiting func()) (string, <-chan error) {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(driverv1connect.NewDriverServiceHandler(driver))
	durl := rpctest.Serve(t, mux)
	apps, err := app.NewRegistry(newTestApp(t).app)
	if err != nil {
		t.Fatal(err)
	}
	ln, url := servicetest.Listen(t)
	ran := make(chan error, 1)
	go func() {
		ran <- servicetest.RunExecutor(ctx, ln, executor.Config{
			ExecutorArgs: child.ExecutorArgs{DriverURL: durl, ExecutorID: 0, Hostname: "127.0.0.1", Cores: 1, AppID: "app-20260101000000-0000"},
			Apps:         apps, RetryInterval: 10 * time.Millisecond, Waiting: waiting,
		})
	}()
	return url, ran
}

// waitingDriver answers RegisterExecutor only once the executor said it
// waits on its driver.
type waitingDriver struct {
	driverv1connect.UnimplementedDriverServiceHandler
	waited   chan struct{}
	launched chan struct{}
}

func (d *waitingDriver) RetrieveSparkProps(context.Context, *connect.Request[driverv1.RetrieveSparkPropsRequest]) (*connect.Response[driverv1.RetrieveSparkPropsResponse], error) {
	return connect.NewResponse(&driverv1.RetrieveSparkPropsResponse{}), nil
}

func (d *waitingDriver) RegisterExecutor(ctx context.Context, _ *connect.Request[driverv1.RegisterExecutorRequest]) (*connect.Response[driverv1.RegisterExecutorResponse], error) {
	select {
	case <-d.waited:
		return connect.NewResponse(&driverv1.RegisterExecutorResponse{}), nil
	case <-ctx.Done():
		return nil, connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	}
}

func (d *waitingDriver) LaunchedExecutor(context.Context, *connect.Request[driverv1.LaunchedExecutorRequest]) (*connect.Response[driverv1.LaunchedExecutorResponse], error) {
	close(d.launched)
	return connect.NewResponse(&driverv1.LaunchedExecutorResponse{}), nil
}

func TestAnExecutorSaysItWaitsOnItsDriverOnceItsRegistrationIsSent(t *testing.T) {
	d := &waitingDriver{waited: make(chan struct{}), launched: make(chan struct{})}
	runUntilLaunched(t, d, func() { close(d.waited) }, d.launched,
		"the executor did not say it waits on its driver while its registration was on its way")
}

// runUntilLaunched runs an executor on driver until the test ends (with
// the Waiting hook waiting) and fails the test unless launched closes, as
// the driver's LaunchedExecutor does.
func runUntilLaunched(t *testing.T, driver driverv1connect.DriverServiceHandler, waiting func(), launched <-chan struct{}, failure string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	_, ran := runOnWith(ctx, t, driver, waiting)
	t.Cleanup(func() {
		cancel()
		<-ran
	})
	select {
	case <-launched:
	case <-time.After(waitLimit):
		t.Fatal(failure)
	}
}

func TestAnExecutorSaysItWaitsOnItsDriverBeforeTryingACallAgain(t *testing.T) {
	// A reserved port nothing listens on, and nothing will while the test runs.
	url := fmt.Sprintf("http://127.0.0.1:%d", tooltest.FreePorts(t, 1)[0])
	apps, err := app.NewRegistry(newTestApp(t).app)
	if err != nil {
		t.Fatal(err)
	}
	waited := 0
	err = servicetest.RunExecutor(context.Background(), listener(t), executor.Config{
		ExecutorArgs: child.ExecutorArgs{DriverURL: url, ExecutorID: 0, Hostname: "127.0.0.1", Cores: 1, AppID: "app-20260101000000-0001"},
		Apps:         apps, Attempts: 3, RetryInterval: time.Millisecond, Waiting: func() { waited++ },
	})
	if err == nil || waited != 1 {
		t.Errorf("Run = %v, Waiting called %d times; want an unreachable driver and one call, before the first retry", err, waited)
	}
}

// pipelinedDriver answers RetrieveSparkProps only once RegisterExecutor came:
// an executor that waited for its properties before registering would never
// register with it.
type pipelinedDriver struct {
	driverv1connect.UnimplementedDriverServiceHandler
	registering chan *driverv1.RegisterExecutorRequest
	launched    chan struct{}
}

func (d *pipelinedDriver) RetrieveSparkProps(ctx context.Context, _ *connect.Request[driverv1.RetrieveSparkPropsRequest]) (*connect.Response[driverv1.RetrieveSparkPropsResponse], error) {
	select {
	case req := <-d.registering:
		d.registering <- req
		return connect.NewResponse(&driverv1.RetrieveSparkPropsResponse{}), nil
	case <-ctx.Done():
		return nil, connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	}
}

func (d *pipelinedDriver) RegisterExecutor(_ context.Context, req *connect.Request[driverv1.RegisterExecutorRequest]) (*connect.Response[driverv1.RegisterExecutorResponse], error) {
	d.registering <- req.Msg
	return connect.NewResponse(&driverv1.RegisterExecutorResponse{}), nil
}

func (d *pipelinedDriver) LaunchedExecutor(context.Context, *connect.Request[driverv1.LaunchedExecutorRequest]) (*connect.Response[driverv1.LaunchedExecutorResponse], error) {
	close(d.launched)
	return connect.NewResponse(&driverv1.LaunchedExecutorResponse{}), nil
}

func TestAnExecutorRegistersWithoutWaitingForThePropertiesItAskedFor(t *testing.T) {
	d := &pipelinedDriver{registering: make(chan *driverv1.RegisterExecutorRequest, 1), launched: make(chan struct{})}
	runUntilLaunched(t, d, nil, d.launched, "the executor did not register while its properties were on their way")
	if req := <-d.registering; !req.GetPropsAsked() {
		t.Error("RegisterExecutor does not say the properties were asked for: the driver cannot keep Spark's order")
	}
}

func TestAnExecutorWhoseLogFilesNeverCameDoesNotRegister(t *testing.T) {
	ta := newTestApp(t)
	d := startDriver(t, ta.app, nil)
	apps, err := app.NewRegistry(ta.app)
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := servicetest.Listen(t)
	ended := errors.New("the worker ended the launch")
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	err = servicetest.RunExecutor(ctx, ln, executor.Config{
		ExecutorArgs: child.ExecutorArgs{DriverURL: d.URL(), ExecutorID: 0, Hostname: "127.0.0.1", Cores: 1, AppID: d.AppID()},
		Apps:         apps, AppToken: d.AppToken(), RetryInterval: 10 * time.Millisecond,
		Settle: func() error { return ended },
	})
	if !errors.Is(err, ended) {
		t.Errorf("Run: %v, want the claim's failure", err)
	}
	for _, tl := range d.Timelines() {
		if !tl.Registered.IsZero() {
			t.Errorf("executor %d registered without its log files and work dir", tl.ExecutorID)
		}
	}
}

func TestPanickingTaskReportsFailedWithThePanic(t *testing.T) {
	ta := newTestApp(t)
	d := startDriver(t, ta.app, map[string]string{"spark.task.maxFailures": "1"})
	startExecutor(context.Background(), t, d, ta.app, 1)

	_, err := runTasks(t, d, "panic", "x")
	if err == nil || !strings.Contains(err.Error(), "TASK_STATE_FAILED on executor 0: task panicked: disk on fire") {
		t.Errorf("job error %v; want the task FAILED with the panic's message", err)
	}
	// The executor outlived its task.
	if out, err := runTasks(t, d, "echo", "after"); err != nil || string(out[0]) != "echo after" {
		t.Errorf("after the panic: %q, %v", out, err)
	}
}

func TestLaunchTaskIsRefusedForUnknownTasksAndBusyCores(t *testing.T) {
	ta := newTestApp(t)
	d := startDriver(t, ta.app, nil)
	e := startExecutor(context.Background(), t, d, ta.app, 1)

	if err := e.launch(1, "nope"); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("launch of an unknown task: %v, want NotFound", err)
	}
	if err := e.launch(2, "block"); err != nil {
		t.Fatalf("launch on the free core: %v", err)
	}
	ta.waitStarted(t)
	// The core's other slots queue tasks; a batch that would pass them is refused whole.
	queued := make([]int64, child.TaskSlotsPerCore-1)
	for i := range queued {
		queued[i] = int64(10 + i)
	}
	if err := e.launchBatch("block", append(queued, 100)...); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("launch past the core's %d slots: %v, want ResourceExhausted", child.TaskSlotsPerCore, err)
	}
	if err := e.launchBatch("block", queued...); err != nil {
		t.Errorf("launch into the core's free slots: %v", err)
	}
	if err := e.launch(3, "block"); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("launch with every slot taken: %v, want ResourceExhausted", err)
	}
	if err := e.launch(2, "block"); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("second launch of a running task id: %v, want AlreadyExists", err)
	}
	if err := e.launch(10, "block"); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("second launch of a queued task id: %v, want AlreadyExists", err)
	}
}

func TestABatchWithAnUnknownTaskOrARepeatedIDIsRefusedWhole(t *testing.T) {
	ta := newTestApp(t)
	d := startDriver(t, ta.app, nil)
	e := startExecutor(context.Background(), t, d, ta.app, 1)
	if err := e.launchBatch("block", 1, 1); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("a batch naming one task twice: %v, want AlreadyExists", err)
	}
	if err := e.launch(1, "block"); err != nil {
		t.Errorf("the refused batch's task id is free again: %v", err)
	}
	if _, err := e.client.LaunchTask(context.Background(), connect.NewRequest(&executorv1.LaunchTaskRequest{})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("an empty batch: %v, want InvalidArgument", err)
	}
}

func TestKillTaskEndsARunningTaskKilled(t *testing.T) {
	ta := newTestApp(t)
	d := startDriver(t, ta.app, map[string]string{"spark.task.maxFailures": "1"})
	e := startExecutor(context.Background(), t, d, ta.app, 1)

	errc := make(chan error, 1)
	go func() {
		_, err := d.RunTasks(context.Background(), "block", [][]byte{[]byte("x")})
		errc <- err
	}()
	ta.waitStarted(t)
	// The driver's task id, from the executor's LaunchTask span.
	var id int64 = -1
	tooltest.EventuallyWithin(t, waitLimit, "the LaunchTask span", func() bool {
		for _, s := range e.spans.Ended() {
			if s.Name() != "glint.executor.v1.ExecutorService/LaunchTask" {
				continue
			}
			for _, kv := range s.Attributes() {
				if kv.Key == "glint.task.ids" {
					id = kv.Value.AsInt64Slice()[0]
				}
			}
		}
		return id >= 0
	})
	if _, err := e.client.KillTask(context.Background(), connect.NewRequest(&executorv1.KillTaskRequest{TaskId: id, Reason: "test"})); err != nil {
		t.Fatalf("kill task %d: %v", id, err)
	}
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "TASK_STATE_KILLED on executor 0: task killed") {
			t.Errorf("job error %v; want the task KILLED", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("the killed task's job did not end")
	}
	if _, err := e.client.KillTask(context.Background(), connect.NewRequest(&executorv1.KillTaskRequest{TaskId: id})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("kill of an ended task: %v, want NotFound", err)
	}
}

func TestStopExecutorAnswersThenMakesRunReturnNil(t *testing.T) {
	ta := newTestApp(t)
	// The executor stops serving right after it answers; the answer must
	// not race its exit (which showed as an error span on a healthy run).
	// Several executors, as the race came and went.
	for i := range 10 {
		d := startDriver(t, ta.app, nil)
		e := startExecutor(context.Background(), t, d, ta.app, 1)
		e.waitConnected(t)
		if _, err := e.client.StopExecutor(context.Background(), connect.NewRequest(&executorv1.StopExecutorRequest{})); err != nil {
			t.Errorf("StopExecutor %d: %v, want an answer", i, err)
		}
		if err := e.wait(t); err != nil {
			t.Errorf("Run after StopExecutor = %v, want nil", err)
		}
		if resp, err := http.Get(e.url + "/healthz"); err == nil {
			resp.Body.Close()
			t.Error("the executor still serves after Run returned")
		}
	}
}

// slowLaunchDriver answers LaunchedExecutor only once the executor that
// called it ended the call.
type slowLaunchDriver struct {
	driverv1connect.UnimplementedDriverServiceHandler
	launching chan struct{}
}

func (d *slowLaunchDriver) RetrieveSparkProps(context.Context, *connect.Request[driverv1.RetrieveSparkPropsRequest]) (*connect.Response[driverv1.RetrieveSparkPropsResponse], error) {
	return connect.NewResponse(&driverv1.RetrieveSparkPropsResponse{}), nil
}

func (d *slowLaunchDriver) RegisterExecutor(context.Context, *connect.Request[driverv1.RegisterExecutorRequest]) (*connect.Response[driverv1.RegisterExecutorResponse], error) {
	return connect.NewResponse(&driverv1.RegisterExecutorResponse{}), nil
}

func (d *slowLaunchDriver) LaunchedExecutor(ctx context.Context, _ *connect.Request[driverv1.LaunchedExecutorRequest]) (*connect.Response[driverv1.LaunchedExecutorResponse], error) {
	close(d.launching)
	<-ctx.Done()
	return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
}

// A driver may stop an executor whose LaunchedExecutor it has not answered
// yet (a busy machine); that is a stop like any other: Run returns nil.
func TestStopExecutorWhileLaunchedIsOnItsWayMakesRunReturnNil(t *testing.T) {
	d := &slowLaunchDriver{launching: make(chan struct{})}
	url, ran := runOn(context.Background(), t, d)
	<-d.launching
	client := executorv1connect.NewExecutorServiceClient(rpc.NewHTTPClient(), url)
	if _, err := client.StopExecutor(context.Background(), connect.NewRequest(&executorv1.StopExecutorRequest{})); err != nil {
		t.Fatalf("StopExecutor: %v", err)
	}
	if err := <-ran; err != nil {
		t.Errorf("Run after StopExecutor during LaunchedExecutor = %v, want nil", err)
	}
}

func TestRunReturnsTheCauseItsContextEndedWith(t *testing.T) {
	errWorkerGone := errors.New("worker gone")
	for _, tt := range []struct {
		name  string
		cause error
		want  error
	}{
		{"a cause is returned", errWorkerGone, errWorkerGone},
		{"a plain cancel is a clean stop", nil, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ta := newTestApp(t)
			d := startDriver(t, ta.app, nil)
			ctx, cancel := context.WithCancelCause(context.Background())
			e := startExecutor(ctx, t, d, ta.app, 1)
			e.waitConnected(t)
			cancel(tt.cause)
			runErr := e.wait(t)
			if !errors.Is(runErr, tt.want) || (tt.want == nil && runErr != nil) {
				t.Errorf("Run = %v, want %v", runErr, tt.want)
			}
		})
	}
}

func TestRunNamesTheStepAndURLOfAnUnreachableDriver(t *testing.T) {
	// A reserved port nothing listens on, and nothing will while the test runs.
	url := fmt.Sprintf("http://127.0.0.1:%d", tooltest.FreePorts(t, 1)[0])
	apps, err := app.NewRegistry(newTestApp(t).app)
	if err != nil {
		t.Fatal(err)
	}
	ln := listener(t)
	done := make(chan error, 1)
	go func() {
		done <- servicetest.RunExecutor(context.Background(), ln, executor.Config{
			ExecutorArgs: child.ExecutorArgs{DriverURL: url, ExecutorID: 0, Hostname: "127.0.0.1", Cores: 1, AppID: "app-20260101000000-0001"},
			Apps:         apps, Attempts: 2, RetryInterval: 10 * time.Millisecond,
		})
	}()
	select {
	case err := <-done:
		want := "retrieve properties with driver " + url + ": unreachable after 2 attempts"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Run = %v, want an error containing %q", err, want)
		}
	case <-time.After(waitLimit):
		t.Fatal("Run did not give up on the unreachable driver")
	}
}

func TestRunReturnsTheCauseWhenItsContextEndsDuringStartUp(t *testing.T) {
	// A driver that accepts connections and never answers.
	driverLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer driverLn.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := driverLn.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	apps, err := app.NewRegistry(newTestApp(t).app)
	if err != nil {
		t.Fatal(err)
	}
	errWorkerGone := errors.New("worker gone")
	ctx, cancel := context.WithCancelCause(context.Background())
	ln := listener(t)
	done := make(chan error, 1)
	go func() {
		done <- servicetest.RunExecutor(ctx, ln, executor.Config{
			ExecutorArgs: child.ExecutorArgs{DriverURL: "http://" + driverLn.Addr().String(), ExecutorID: 0, Hostname: "127.0.0.1", Cores: 1,
				AppID: "app-20260101000000-0001"},
			Apps: apps,
		})
	}()
	select {
	case c := <-accepted:
		defer c.Close()
	case <-time.After(waitLimit):
		t.Fatal("the executor did not call the driver")
	}
	cancel(errWorkerGone)
	select {
	case err := <-done:
		if !errors.Is(err, errWorkerGone) {
			t.Errorf("Run = %v, want %v", err, errWorkerGone)
		}
	case <-time.After(waitLimit):
		t.Fatal("Run did not return")
	}
}

func TestQueuedTasksWaitForTheCoreAndAKilledOneNeverRuns(t *testing.T) {
	ta := newTestApp(t)
	d := startDriver(t, ta.app, nil)
	e := startExecutor(context.Background(), t, d, ta.app, 1)
	kill := func(id int64) error {
		_, err := e.client.KillTask(context.Background(), connect.NewRequest(&executorv1.KillTaskRequest{TaskId: id, Reason: "test"}))
		return err
	}
	if err := e.launchBatch("block", 1, 2, 3); err != nil {
		t.Fatal(err)
	}
	ta.waitStarted(t) // task 1 holds the only core; 2 and 3 wait
	if err := kill(2); err != nil {
		t.Fatalf("kill the queued task 2: %v", err)
	}
	if err := kill(2); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("kill task 2 again: %v, want NotFound (a killed queued task is gone at once)", err)
	}
	if err := kill(1); err != nil {
		t.Fatalf("kill the running task 1: %v", err)
	}
	ta.waitStarted(t) // the core went to task 3
	if err := kill(3); err != nil {
		t.Errorf("kill task 3, which should be running: %v", err)
	}
	select {
	case <-ta.started:
		t.Error("a fourth block task started: the killed queued task ran")
	default:
	}
	// Each kill, queued or running, is counted as an end, and none runs.
	tooltest.EventuallyWithin(t, waitLimit, "the three kills on /metrics, no task running", func() bool {
		page := tooltest.Get(t, e.url+"/metrics")
		return strings.Contains(page, "\nglint_executor_tasks_total{state=\"killed\"} 3\n") && strings.Contains(page, "\nglint_executor_tasks_running 0\n")
	})
}
