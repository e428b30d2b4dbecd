package master

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

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
	c.client = masterv1connect.NewMasterServiceClient(rpc.NewHTTPClient(), c.url, rpc.ClientOptions(tp)...)
	return c, recorder, tp
}

// spanNamed waits for an ended span called name for which match holds: client
// spans end only after the peer answered.
func spanNamed(t *testing.T, r *tracetest.SpanRecorder, name string, match func(sdktrace.ReadOnlySpan) bool) sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, s := range r.Ended() {
			if s.Name() == name && match(s) {
				return s
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no %s span within 5s", name)
	return nil
}

func anySpan(sdktrace.ReadOnlySpan) bool { return true }

func TestScheduleSpanIsInTheAppsTraceAndParentsTheLaunchCalls(t *testing.T) {
	c, recorder, tp := tracedCluster(t)
	wp, dp := newPeer(t), newPeer(t)
	c.registerWorker(t, wp, 7078, 2, 4096)
	ctx, submit := tp.Tracer("test").Start(context.Background(), "submit")
	_, err := c.client.RegisterApplication(ctx, connect.NewRequest(&masterv1.RegisterApplicationRequest{Description: appDesc(512, 1), DriverUrl: dp.url}))
	submit.End()
	if err != nil {
		t.Fatal(err)
	}
	wp.expect(t, "LaunchExecutor")
	dp.expect(t, "ExecutorAdded")

	server := spanNamed(t, recorder, "glint.master.v1.MasterService/RegisterApplication", func(s sdktrace.ReadOnlySpan) bool {
		return s.SpanKind().String() == "server"
	})
	if server.SpanContext().TraceID() != submit.SpanContext().TraceID() {
		t.Fatal("RegisterApplication is not in the submit's trace")
	}
	schedule := spanNamed(t, recorder, "schedule", anySpan)
	if schedule.Parent().SpanID() != server.SpanContext().SpanID() {
		t.Errorf("schedule's parent is not RegisterApplication")
	}
	if len(schedule.Events()) != 2 || schedule.Events()[0].Name != "executor placed" {
		t.Errorf("schedule events %v, want two executors placed", schedule.Events())
	}
	for _, call := range []string{"glint.worker.v1.WorkerService/LaunchExecutor", "glint.driver.v1.DriverService/ExecutorAdded"} {
		if s := spanNamed(t, recorder, call, anySpan); s.Parent().SpanID() != schedule.SpanContext().SpanID() {
			t.Errorf("%s is not a child of schedule", call)
		}
	}
}

func TestExecutorsLaunchedLaterJoinTheAppsTraceWithALinkToTheirTrigger(t *testing.T) {
	c, recorder, tp := tracedCluster(t)
	wp, dp := newPeer(t), newPeer(t)
	appCtx, submit := tp.Tracer("test").Start(context.Background(), "submit")
	_, err := c.client.RegisterApplication(appCtx, connect.NewRequest(&masterv1.RegisterApplicationRequest{Description: appDesc(512, 1), DriverUrl: dp.url}))
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
