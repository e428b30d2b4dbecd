package telemetry

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/glint-cluster/glint/internal/tooltest"
)

// batches is an exporter that records what it was given, batch by batch; a
// non-nil gate holds each export until it is closed (entered is signalled
// as each export begins).
type batches struct {
	mu       sync.Mutex
	names    [][]string
	relayed  []byte
	shutdown bool
	gate     chan struct{}
	entered  chan struct{}
}

func (e *batches) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	if e.gate != nil {
		e.entered <- struct{}{}
		<-e.gate
	}
	var names []string
	for _, s := range spans {
		names = append(names, s.Name())
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.names = append(e.names, names)
	return nil
}

// exportRelayed records the relayed frames, and the spans as ExportSpans.
func (e *batches) exportRelayed(ctx context.Context, spans []sdktrace.ReadOnlySpan, relayed []byte) error {
	e.mu.Lock()
	e.relayed = append(e.relayed, relayed...)
	e.mu.Unlock()
	return e.ExportSpans(ctx, spans)
}

func (e *batches) Shutdown(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.shutdown = true
	return nil
}

// exported is every span name exported so far, in order, and the size of
// the largest batch.
func (e *batches) exported() (names []string, largest int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, b := range e.names {
		names = append(names, b...)
		largest = max(largest, len(b))
	}
	return names, largest
}

// waitFor waits until n spans were exported.
func (e *batches) waitFor(t *testing.T, n int) {
	t.Helper()
	if !tooltest.Poll(10*time.Second, time.Millisecond, func() bool { got, _ := e.exported(); return len(got) >= n }) {
		got, _ := e.exported()
		t.Fatalf("%d spans exported after 10 s, want %d", len(got), n)
	}
}

// batched starts a provider whose batcher exports to e, with the OTEL_BSP_*
// settings given, and ends a span named after each of names.
func batched(t *testing.T, e *batches, settings map[string]string) (*batcher, *sdktrace.TracerProvider, func(names ...string)) {
	t.Helper()
	for k, v := range settings {
		t.Setenv(k, v)
	}
	b := newBatcher(e)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	end := func(names ...string) {
		for _, name := range names {
			_, span := Tracer(tp).Start(context.Background(), name)
			span.End()
		}
	}
	return b, tp, end
}

func spanNames(from, to int) []string {
	var names []string
	for i := from; i < to; i++ {
		names = append(names, fmt.Sprint("span-", i))
	}
	return names
}

const anHour = "3600000"

func TestTheBatcherExportsEverySpanInOrderInBatchesOfTheSizeSet(t *testing.T) {
	e := &batches{}
	_, tp, end := batched(t, e, map[string]string{"OTEL_BSP_SCHEDULE_DELAY": anHour, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "4"})
	end(spanNames(0, 10)...)
	if err := tp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, largest := e.exported()
	if !slices.Equal(got, spanNames(0, 10)) || largest > 4 {
		t.Errorf("exported %v, largest batch %d; want span-0 … span-9 in batches of at most 4", got, largest)
	}
}

// A batch is full at its size set, or at the queue's size if that is smaller.
func TestAFullBatchIsExportedWithoutWaitingForTheScheduleDelay(t *testing.T) {
	for _, queue := range []string{"2048", "3"} {
		e := &batches{}
		_, _, end := batched(t, e, map[string]string{"OTEL_BSP_SCHEDULE_DELAY": anHour, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "5", "OTEL_BSP_MAX_QUEUE_SIZE": queue})
		end(spanNames(0, 5)...)
		e.waitFor(t, 3)
	}
}

// Each span that finds no timer armed arms one.
func TestQueuedSpansAreExportedOnceTheScheduleDelayPassed(t *testing.T) {
	e := &batches{}
	_, _, end := batched(t, e, map[string]string{"OTEL_BSP_SCHEDULE_DELAY": "20"})
	end("first")
	e.waitFor(t, 1)
	end("second") // the timer is armed again
	e.waitFor(t, 2)
}

// While an export is under way, spans queue up to the queue's size; the
// rest are dropped, and Shutdown says how many.
func TestSpansBeyondTheQueueSizeAreDroppedAndCounted(t *testing.T) {
	e := &batches{gate: make(chan struct{}), entered: make(chan struct{}, 10)}
	_, tp, end := batched(t, e, map[string]string{"OTEL_BSP_SCHEDULE_DELAY": anHour, "OTEL_BSP_MAX_QUEUE_SIZE": "4", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "4"})
	end(spanNames(0, 4)...)
	select { // the full batch is being exported, held at the gate
	case <-e.entered:
	case <-time.After(10 * time.Second):
		close(e.gate)
		t.Fatal("the full batch was not exported within 10 s")
	}
	end(spanNames(4, 10)...)
	close(e.gate)
	err := tp.Shutdown(context.Background())
	if err == nil || !strings.Contains(err.Error(), "2 spans dropped") {
		t.Errorf("shutdown: %v, want 2 spans dropped", err)
	}
	if got, _ := e.exported(); !slices.Equal(got, spanNames(0, 8)) {
		t.Errorf("exported %v, want span-0 … span-7", got)
	}
}

func TestShutdownExportsWhatIsQueuedAndNothingAfterwards(t *testing.T) {
	e := &batches{}
	b, _, end := batched(t, e, map[string]string{"OTEL_BSP_SCHEDULE_DELAY": anHour})
	end("one", "two")
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.exported(); !slices.Equal(got, []string{"one", "two"}) {
		t.Errorf("exported %v on shutdown, want one, two", got)
	}
	end("late")
	if err := b.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, _ := e.exported()
	if !slices.Equal(got, []string{"one", "two"}) || !e.shutdown {
		t.Errorf("exported %v, exporter shut down: %v; want one, two and shut down", got, e.shutdown)
	}
}

// recordOnly records every span without sampling it.
type recordOnly struct{}

func (recordOnly) ShouldSample(sdktrace.SamplingParameters) sdktrace.SamplingResult {
	return sdktrace.SamplingResult{Decision: sdktrace.RecordOnly}
}
func (recordOnly) Description() string { return "record only" }

func TestSpansRecordedButNotSampledAreNotExported(t *testing.T) {
	rec := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(recordOnly{}), sdktrace.WithSpanProcessor(newBatcher(rec)))
	_, span := Tracer(tp).Start(context.Background(), "unsampled")
	span.End()
	if err := tp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := rec.GetSpans(); len(got) != 0 {
		t.Errorf("exported %d unsampled spans", len(got))
	}
}
