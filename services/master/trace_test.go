package master

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry"
)

// tracedCluster is a master tracing into a recorder, with a client whose
// calls carry the test's spans.
func tracedCluster(t *testing.T) (*cluster, *tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	c := newCluster(t, Config{Instruments: telemetry.Instruments{TracerProvider: tp}})
	c.client = masterv1connect.NewMasterServiceClient(rpc.NewHTTPClient(), c.url, rpc.ClientOptions(tp, "")...)
	return c, recorder, tp
}

// spanNamed waits for an ended span called name for which match holds: client
// spans end only after the peer answered.
func spanNamed(t *testing.T, r *tracetest.SpanRecorder, name string, match func(sdktrace.ReadOnlySpan) bool) sdktrace.ReadOnlySpan {
	t.Helper()
	var found sdktrace.ReadOnlySpan
	tooltest.Eventually(t, "a "+name+" span", func() bool {
		for _, s := range r.Ended() {
			if s.Name() == name && match(s) {
				found = s
				return true
			}
		}
		return false
	})
	return found
}

func anySpan(sdktrace.ReadOnlySpan) bool { return true }

// The application's trace: its registration has a server span only, the
// child of the submission's span, and so do the schedule pass and each
// executor's span, linked to the pass; each executor's launch calls are made
// in its span.
func TestScheduleAndExecutorSpansAreChildrenOfTheSubmission(t *testing.T) {
	c, recorder, tp := tracedCluster(t)
	wp, dp := newPeer(t), newPeer(t)
	c.registerWorker(t, wp, 7078, 2, 4096)
	ctx, submit := tp.Tracer("test").Start(context.Background(), "submit")
	_, err := c.client.RegisterApplication(ctx, connect.NewRequest(&masterv1.RegisterApplicationRequest{AppToken: rpc.NewToken(), MasterToken: rpc.NewToken(), Description: appDesc(512, 1), DriverUrl: dp.url}))
	if err != nil {
		t.Fatal(err)
	}
	wp.expect(t, "LaunchExecutor")
	dp.expect(t, "ExecutorAdded")

	server := spanNamed(t, recorder, "glint.master.v1.MasterService/RegisterApplication", func(s sdktrace.ReadOnlySpan) bool {
		return s.SpanKind().String() == "server"
	})
	if server.Parent().SpanID() != submit.SpanContext().SpanID() {
		t.Fatal("RegisterApplication's server span is not a child of the submit span")
	}
	schedule := spanNamed(t, recorder, "schedule", anySpan)
	if schedule.Parent().SpanID() != submit.SpanContext().SpanID() {
		t.Errorf("schedule's parent is not the submit span")
	}
	if len(schedule.Events()) != 2 || schedule.Events()[0].Name != "executor placed" {
		t.Errorf("schedule events %v, want two executors placed", schedule.Events())
	}
	if n := len(spansNamed(recorder, "glint.worker.v1.WorkerService/LaunchExecutor")); n != 0 {
		t.Errorf("%d LaunchExecutor client spans, want none: the launch is made in the executor's span", n)
	}
	dp.expect(t, "ExecutorAdded")
	executors := map[trace.SpanID]bool{c.executorSpanID(t, 0): true, c.executorSpanID(t, 1): true}
	for _, added := range spansNamed(recorder, "glint.driver.v1.DriverService/ExecutorAdded") {
		if !executors[added.Parent().SpanID()] {
			t.Errorf("ExecutorAdded is not a child of an executor's span")
		}
	}
	c.srv.mu.Lock()
	var executor sdktrace.ReadOnlySpan
	for _, a := range c.srv.apps {
		executor = a.executors[0].span.(sdktrace.ReadOnlySpan)
	}
	c.srv.mu.Unlock()
	if executor.Name() != ExecutorSpan(0) || executor.Parent().SpanID() != submit.SpanContext().SpanID() ||
		len(executor.Links()) != 1 || executor.Links()[0].SpanContext.SpanID() != schedule.SpanContext().SpanID() {
		t.Errorf("executor span %q under %v linked to %v; want %q under the submit span, linked to schedule",
			executor.Name(), executor.Parent().SpanID(), executor.Links(), ExecutorSpan(0))
	}
	submit.End()
}

// spansNamed is the ended spans called name.
func spansNamed(r *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// executorSpanID is the span id of executor id's span, of the one application.
func (c *cluster) executorSpanID(t *testing.T, id int32) trace.SpanID {
	t.Helper()
	c.srv.mu.Lock()
	defer c.srv.mu.Unlock()
	for _, a := range c.srv.apps {
		if e := a.executors[id]; e != nil && e.span != nil {
			return e.span.SpanContext().SpanID()
		}
	}
	t.Fatalf("executor %d has no span", id)
	return trace.SpanID{}
}

// An executor's span records each state its worker reports as an event and
// ends with its final one; a lost worker is an event, then LOST, with an
// Error status, and what the driver is told of it is in the application's
// trace, not a trace of its own.
func TestAnExecutorsSpanRecordsItsStatesAndItsWorkersLoss(t *testing.T) {
	c, recorder, tp := tracedCluster(t)
	wp, kept, dp := newPeer(t), newPeer(t), newPeer(t)
	worker := c.registerWorker(t, wp, 7078, 2, 4096)
	ctx, submit := tp.Tracer("test").Start(context.Background(), "submit")
	defer submit.End()
	desc := appDesc(512, 1)
	desc.MaxCores = ptr[int32](2)
	resp, err := c.client.RegisterApplication(ctx, connect.NewRequest(&masterv1.RegisterApplicationRequest{AppToken: rpc.NewToken(), MasterToken: rpc.NewToken(), Description: desc, DriverUrl: dp.url}))
	if err != nil {
		t.Fatal(err)
	}
	app := resp.Msg.GetAppId()
	wp.expectAll(t, "LaunchExecutor "+app+"/0", "LaunchExecutor "+app+"/1")
	report := func(id int32, state masterv1.ExecutorState) {
		t.Helper()
		if _, err := c.client.ExecutorStateChanged(context.Background(), connect.NewRequest(&masterv1.ExecutorStateChangedRequest{
			AppId: app, ExecutorId: id, State: state, WorkerId: worker, ExitStatus: ptr[int32](0),
		})); err != nil {
			t.Fatal(err)
		}
	}
	report(1, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)
	report(0, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)
	report(0, masterv1.ExecutorState_EXECUTOR_STATE_EXITED)
	exited := spanNamed(t, recorder, ExecutorSpan(0), anySpan)
	if got := eventNames(exited); !slices.Equal(got, []string{"RUNNING", "EXITED"}) || exited.Status().Code == codes.Error {
		t.Errorf("executor 0's span: events %v, status %v; want RUNNING, EXITED and no error", got, exited.Status())
	}
	if !slices.Contains(exited.Attributes(), telemetry.ExecutorID.Int(0)) {
		t.Errorf("executor 0's span has no %s", telemetry.ExecutorID)
	}

	// Executor 1's worker falls silent; the other one stays.
	keptID := c.registerWorker(t, kept, 7079, 1, 4096)
	c.clock.Advance(61 * time.Second)
	if _, err := c.client.Heartbeat(context.Background(), connect.NewRequest(&masterv1.HeartbeatRequest{WorkerId: keptID})); err != nil {
		t.Fatal(err)
	}
	c.srv.checkWorkerTimeouts(context.Background())
	lost := spanNamed(t, recorder, ExecutorSpan(1), anySpan)
	if got := eventNames(lost); !slices.Equal(got, []string{"RUNNING", "worker lost", "LOST"}) || lost.Status().Code != codes.Error {
		t.Errorf("executor 1's span: events %v, status %v; want RUNNING, worker lost, LOST and an error", got, lost.Status())
	}
	updated := spanNamed(t, recorder, "glint.driver.v1.DriverService/ExecutorUpdated", func(s sdktrace.ReadOnlySpan) bool {
		return s.SpanKind().String() == "client" && !s.StartTime().Before(lost.EndTime())
	})
	if updated.SpanContext().TraceID() != submit.SpanContext().TraceID() || updated.Parent().SpanID() != submit.SpanContext().SpanID() {
		t.Errorf("the driver is told of the lost executor in trace %s under %s, want the application's %s under the submit span",
			updated.SpanContext().TraceID(), updated.Parent().SpanID(), submit.SpanContext().TraceID())
	}
}

func eventNames(s sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, e := range s.Events() {
		out = append(out, e.Name)
	}
	return out
}

func TestExecutorsLaunchedLaterJoinTheAppsTraceWithALinkToTheirTrigger(t *testing.T) {
	c, recorder, tp := tracedCluster(t)
	wp, dp := newPeer(t), newPeer(t)
	appCtx, submit := tp.Tracer("test").Start(context.Background(), "submit")
	_, err := c.client.RegisterApplication(appCtx, connect.NewRequest(&masterv1.RegisterApplicationRequest{AppToken: rpc.NewToken(), MasterToken: rpc.NewToken(), Description: appDesc(512, 1), DriverUrl: dp.url}))
	submit.End()
	if err != nil {
		t.Fatal(err)
	}
	// A worker joins, in a trace of its own, and the app gets its executors.
	joinCtx, join := tp.Tracer("test").Start(context.Background(), "worker joins")
	_, err = c.client.RegisterWorker(joinCtx, connect.NewRequest(&masterv1.RegisterWorkerRequest{
		WorkerId: "worker-20261129140000-127.0.0.1-7078", Host: "127.0.0.1", Port: 7078, Cores: 1, MemoryMib: 1024, WorkerUrl: wp.url,
	}))
	join.End()
	if err != nil {
		t.Fatal(err)
	}
	wp.expect(t, "LaunchExecutor")
	schedule := spanNamed(t, recorder, "schedule", anySpan)
	if schedule.SpanContext().TraceID() != submit.SpanContext().TraceID() {
		t.Errorf("schedule is in trace %s, want the app's %s", schedule.SpanContext().TraceID(), submit.SpanContext().TraceID())
	}
	register := spanNamed(t, recorder, "glint.master.v1.MasterService/RegisterWorker", func(s sdktrace.ReadOnlySpan) bool {
		return s.SpanKind().String() == "server"
	})
	links := schedule.Links()
	if len(links) != 1 || links[0].SpanContext.SpanID() != register.SpanContext().SpanID() {
		t.Errorf("schedule links %v, want one to the RegisterWorker span", links)
	}
	for _, kv := range schedule.Attributes() {
		if kv.Key == telemetry.AppID {
			return
		}
	}
	t.Errorf("schedule has no %s", telemetry.AppID)
}

// TestScheduleOncePerEvent loses a worker that ran a supervised driver and
// executors of two applications: the driver is relaunched, both applications
// lose an executor, and all of it is placed again in one schedule pass — one
// schedule span per driver and application placed, all timed as that pass,
// and one observation of the pass's duration.
func TestScheduleOncePerEvent(t *testing.T) {
	c, recorder, _ := tracedCluster(t)
	lost, kept, dp := newPeer(t), newPeer(t), newPeer(t)
	c.registerWorker(t, lost, 7078, 4, 4096)
	resp, err := c.client.SubmitDriver(context.Background(), connect.NewRequest(&masterv1.SubmitDriverRequest{Description: &masterv1.DriverDescription{
		Name: "d", Cores: 1, MemoryMib: 512, Supervise: true, Command: &masterv1.Command{Args: []string{"/bin/true"}},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	lost.expect(t, "LaunchDriver "+resp.Msg.GetDriverId())
	var apps []string
	for range 2 {
		desc := appDesc(512, 1)
		desc.MaxCores = ptr[int32](1)
		app := c.registerApp(t, dp, desc)
		lost.expect(t, "LaunchExecutor "+app+"/0")
		apps = append(apps, app)
	}
	keptID := c.registerWorker(t, kept, 7079, 4, 4096)

	c.clock.Advance(61 * time.Second)
	if _, err := c.client.Heartbeat(context.Background(), connect.NewRequest(&masterv1.HeartbeatRequest{WorkerId: keptID})); err != nil {
		t.Fatal(err)
	}
	passes := scheduleDurationCount(t, c)
	spansBefore := len(recorder.Ended())
	c.srv.checkWorkerTimeouts(context.Background())

	relaunched := c.srv.clusterState().GetActiveDrivers()
	if len(relaunched) != 1 || relaunched[0].GetWorkerId() != keptID {
		t.Fatalf("active drivers %v, want the relaunched one on %s", relaunched, keptID)
	}
	want := map[string]bool{string(telemetry.DriverID) + "=" + relaunched[0].GetId(): true}
	launches := []string{"LaunchDriver " + relaunched[0].GetId()}
	for _, app := range apps {
		launches = append(launches, "LaunchExecutor "+app+"/1")
		want[string(telemetry.AppID)+"="+app] = true
	}
	kept.expectAll(t, launches...)
	var pass []sdktrace.ReadOnlySpan
	for _, s := range recorder.Ended()[spansBefore:] {
		if s.Name() == "schedule" {
			pass = append(pass, s)
		}
	}
	got := map[string]bool{}
	for _, s := range pass {
		for _, kv := range s.Attributes() {
			if kv.Key == telemetry.DriverID || kv.Key == telemetry.AppID {
				got[string(kv.Key)+"="+kv.Value.AsString()] = true
			}
		}
		if !s.StartTime().Equal(pass[0].StartTime()) || !s.EndTime().Equal(pass[0].EndTime()) {
			t.Errorf("schedule span %v runs %v–%v, not with the pass's first span (%v–%v)",
				s.Attributes(), s.StartTime(), s.EndTime(), pass[0].StartTime(), pass[0].EndTime())
		}
	}
	if len(pass) != len(want) || !maps.Equal(got, want) {
		t.Errorf("%d schedule spans for %v, want one each for %v", len(pass), got, want)
	}
	if n := scheduleDurationCount(t, c) - passes; n != 1 {
		t.Errorf("losing a worker ran %d schedule passes, want 1", n)
	}
}

// scheduleDurationCount is how many schedule passes the master's registry
// has observed.
func scheduleDurationCount(t *testing.T, c *cluster) uint64 {
	t.Helper()
	families, err := c.srv.cfg.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "glint_master_schedule_duration_seconds" {
			return f.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatal("no glint_master_schedule_duration_seconds in the registry")
	return 0
}

// A cluster-mode driver has a span from its placement to its end, under its
// submission's span and linked to the pass that placed it: its launch is made
// in it, so its process's spans, its application's among them, are too.
func TestADriversSpanRunsFromItsPlacementToItsEnd(t *testing.T) {
	c, recorder, tp := tracedCluster(t)
	wp := newPeer(t)
	worker := c.registerWorker(t, wp, 7078, 2, 4096)
	ctx, submit := tp.Tracer("test").Start(context.Background(), "submit")
	defer submit.End()
	resp, err := c.client.SubmitDriver(ctx, connect.NewRequest(&masterv1.SubmitDriverRequest{Description: &masterv1.DriverDescription{
		Name: "d", Cores: 1, MemoryMib: 512, Command: &masterv1.Command{Args: []string{"/bin/true"}},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	id := resp.Msg.GetDriverId()
	wp.expect(t, "LaunchDriver "+id)
	if _, err := c.client.DriverStateChanged(context.Background(), connect.NewRequest(&masterv1.DriverStateChangedRequest{
		DriverId: id, State: masterv1.DriverState_DRIVER_STATE_FINISHED, WorkerId: worker,
	})); err != nil {
		t.Fatal(err)
	}
	span := spanNamed(t, recorder, DriverSpan(id), anySpan)
	schedule := spanNamed(t, recorder, "schedule", anySpan)
	if span.Parent().SpanID() != submit.SpanContext().SpanID() || len(span.Links()) != 1 ||
		span.Links()[0].SpanContext.SpanID() != schedule.SpanContext().SpanID() {
		t.Errorf("driver span under %v linked to %v, want under the submit span, linked to schedule", span.Parent().SpanID(), span.Links())
	}
	if got := eventNames(span); !slices.Equal(got, []string{"FINISHED"}) || span.Status().Code == codes.Error {
		t.Errorf("driver span: events %v, status %v; want FINISHED and no error", got, span.Status())
	}
}
