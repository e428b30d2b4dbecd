package master

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/telemetry"
)

// ExecutorSpan is the name of the span of executor id in its application's
// trace: "executor 3". Jaeger shows span names, so each executor's subtree
// is told from the others by it.
func ExecutorSpan(id int32) string { return "executor " + strconv.Itoa(int(id)) }

// startExecutorSpanLocked starts e's span as it is placed, in its
// application's trace (a.trace, the submission's span: the executor's life
// fits in the application's, where the schedule pass that placed it ends
// before its launch does) and linked to the pass (ctx's span). It lasts
// until the executor ends; its launch calls are made in it, and what
// happens to it — each state its worker reports, its worker lost — is an
// event on it. It returns ctx with the span.
func (s *Server) startExecutorSpanLocked(ctx context.Context, e *executorInfo) context.Context {
	opts := []trace.SpanStartOption{trace.WithAttributes(telemetry.AppID.String(e.app.id), telemetry.ExecutorID.Int(int(e.id)),
		telemetry.WorkerID.String(e.worker.id), telemetry.Cores.Int(int(e.cores)), telemetry.MemoryMiB.Int64(e.memoryMiB))}
	if pass := trace.SpanContextFromContext(ctx); pass.IsValid() && e.app.trace.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: pass}))
		ctx = trace.ContextWithRemoteSpanContext(ctx, e.app.trace)
	}
	ctx, e.span = s.tracer.Start(ctx, ExecutorSpan(e.id), opts...)
	return ctx
}

// executorSpanStateLocked records that e reached state, with message and
// its exit status if it ran, as an event on its span, and ends the span
// when the state is final: with an Error status if the executor failed or
// was lost. An executor the master recovered from its store has no span.
func executorSpanStateLocked(e *executorInfo, state masterv1.ExecutorState, message string, exitStatus *int32) {
	if e.span == nil {
		return
	}
	attrs := []attribute.KeyValue{attribute.String("glint.executor.state", lifecycle.Name(state))}
	if message != "" {
		attrs = append(attrs, attribute.String("glint.message", message))
	}
	if exitStatus != nil {
		attrs = append(attrs, attribute.Int("process.exit.code", int(*exitStatus)))
	}
	e.span.AddEvent(lifecycle.Name(state), trace.WithAttributes(attrs...))
	if !lifecycle.ExecutorFinished(state) {
		return
	}
	switch state {
	case masterv1.ExecutorState_EXECUTOR_STATE_FAILED, masterv1.ExecutorState_EXECUTOR_STATE_LOST:
		e.span.SetStatus(codes.Error, message)
	}
	e.span.End()
	e.span = nil
}

// executorSpanWorkerLostLocked records on e's span that its worker was
// lost, and why; the LOST state follows.
func executorSpanWorkerLostLocked(e *executorInfo, reason string) {
	if e.span != nil {
		e.span.AddEvent("worker lost", trace.WithAttributes(telemetry.WorkerID.String(e.worker.id), attribute.String("glint.message", reason)))
	}
}

// DriverSpan is the name of the span of a cluster-mode driver's run: "driver
// driver-20261202190000-0000".
func DriverSpan(id string) string { return "driver " + id }

// startDriverSpanLocked starts d's span as it is placed on w, in its
// submission's trace and linked to the schedule pass (ctx's span), and
// returns ctx with it: the driver's launch, its process and so its
// application's spans are under it, and it lasts until the driver ends or
// its launch failed.
func (s *Server) startDriverSpanLocked(ctx context.Context, w *workerInfo, d *driverInfo) context.Context {
	opts := []trace.SpanStartOption{trace.WithAttributes(telemetry.DriverID.String(d.id), telemetry.WorkerID.String(w.id),
		telemetry.Cores.Int(int(d.desc.GetCores())), telemetry.MemoryMiB.Int64(d.desc.GetMemoryMib()))}
	if pass := trace.SpanContextFromContext(ctx); pass.IsValid() && d.trace.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: pass}))
		ctx = trace.ContextWithRemoteSpanContext(ctx, d.trace)
	}
	ctx, d.span = s.tracer.Start(ctx, DriverSpan(d.id), opts...)
	return ctx
}

// endDriverSpanLocked ends d's span, if it has one, with state as an event
// (SUBMITTED: its launch failed, and it waits to be placed again); an Error
// status unless it FINISHED or waits.
func endDriverSpanLocked(d *driverInfo, state masterv1.DriverState, message string) {
	if d.span == nil {
		return
	}
	d.span.AddEvent(lifecycle.Name(state), trace.WithAttributes(attribute.String("glint.driver.state", lifecycle.Name(state)),
		attribute.String("glint.message", message)))
	switch state {
	case masterv1.DriverState_DRIVER_STATE_FINISHED, masterv1.DriverState_DRIVER_STATE_SUBMITTED, masterv1.DriverState_DRIVER_STATE_KILLED:
	default:
		d.span.SetStatus(codes.Error, message)
	}
	d.span.End()
	d.span = nil
}

// appContext is ctx in a's trace, under its submission's span: what the
// master tells a driver of its executors, and its workers of its end, is
// sent from a mailbox after the event that caused it ended (a report from a
// worker, in that report's trace; a worker that timed out, in none; the
// driver's unregistration), so it goes under the span that still runs, where
// the application's trace is found.
func appContext(ctx context.Context, a *appInfo) context.Context {
	return telemetry.ContextWithSpanContextOf(ctx, a.trace)
}
