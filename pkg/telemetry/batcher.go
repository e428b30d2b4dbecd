package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The OTEL_BSP_* defaults, as sdktrace's batch span processor has them.
const (
	defaultScheduleDelay = 5 * time.Second
	defaultExportTimeout = 30 * time.Second
	defaultMaxQueueSize  = 2048
	defaultMaxBatchSize  = 512
)

// batcher is the span processor of every traced Glint process: it hands
// ended spans to its exporter in batches, as sdktrace's batch span processor
// does and set by the same variables (OTEL_BSP_SCHEDULE_DELAY,
// OTEL_BSP_EXPORT_TIMEOUT, OTEL_BSP_MAX_QUEUE_SIZE,
// OTEL_BSP_MAX_EXPORT_BATCH_SIZE), but without a goroutine of its own.
// sdktrace's processor passes each span over a channel to its goroutine,
// waking that goroutine — often another thread — for every span (on a
// worker's launch path, for each step of the launch), and its timer wakes the
// process every schedule delay, spans or none. Here an ended span joins the
// queue, the first of a batch arms a timer, and the export runs when that
// timer fires or a batch is full: an idle process is never woken.
type batcher struct {
	exporter sdktrace.SpanExporter
	// relayTo is exporter when it can send relayed frames with its spans;
	// a batcher without one queues none.
	relayTo  relayExporter
	delay    time.Duration
	timeout  time.Duration
	maxQueue int
	maxBatch int

	mu      sync.Mutex
	queue   []sdktrace.ReadOnlySpan
	dropped int
	timer   *time.Timer // armed while spans wait for it
	armed   bool
	stopped bool
	// relayed are the frames of processes started through Relay waiting for the
	// next export, joined; relayDropped counts those over relayHeldMax.
	relayed      []byte
	relayDropped int

	// exporting is held by whoever exports (a timer's tick, a full batch,
	// ForceFlush, Shutdown): an exporter is never called concurrently.
	exporting chan struct{}
}

var _ sdktrace.SpanProcessor = (*batcher)(nil)

// newBatcher returns a batcher exporting to exporter, set by the OTEL_BSP_*
// variables; an unset or invalid one keeps its default.
func newBatcher(exporter sdktrace.SpanExporter) *batcher {
	b := &batcher{
		exporter:  exporter,
		delay:     envMillis("OTEL_BSP_SCHEDULE_DELAY", defaultScheduleDelay),
		timeout:   envMillis("OTEL_BSP_EXPORT_TIMEOUT", defaultExportTimeout),
		maxQueue:  envPositive("OTEL_BSP_MAX_QUEUE_SIZE", defaultMaxQueueSize),
		maxBatch:  envPositive("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", defaultMaxBatchSize),
		exporting: make(chan struct{}, 1),
	}
	b.maxBatch = min(b.maxBatch, b.maxQueue)
	b.relayTo, _ = exporter.(relayExporter)
	return b
}

func envPositive(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

func envMillis(name string, def time.Duration) time.Duration {
	return time.Duration(envPositive(name, int(def/time.Millisecond))) * time.Millisecond
}

// OnStart does nothing: spans are queued when they end.
func (b *batcher) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd queues s if it is sampled, unless the queue is full (s is dropped
// and counted) or the batcher shut down, and arms the timer if it is not.
func (b *batcher) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.stopped:
		return
	case len(b.queue) >= b.maxQueue:
		b.dropped++
		return
	}
	b.queue = append(b.queue, s)
	if len(b.queue) == b.maxBatch {
		go b.tick()
	}
	b.armLocked()
}

// relay queues a frame of relayed spans for the next export, unless the
// batcher shut down (or cannot relay), or holds too many already (it is
// dropped and counted).
func (b *batcher) relay(frame []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.stopped || b.relayTo == nil:
		return
	case len(b.relayed)+len(frame) > relayHeldMax:
		b.relayDropped++
		return
	}
	b.relayed = append(b.relayed, frame...)
	b.armLocked()
}

// armLocked arms the timer of the next export, if it is not armed.
func (b *batcher) armLocked() {
	if b.armed {
		return
	}
	b.armed = true
	if b.timer == nil {
		b.timer = time.AfterFunc(b.delay, b.tick)
	} else {
		b.timer.Reset(b.delay)
	}
}

// tick exports what is queued (nothing once Shutdown exported the rest).
func (b *batcher) tick() {
	b.exporting <- struct{}{}
	defer func() { <-b.exporting }()
	b.mu.Lock()
	b.armed = false
	b.mu.Unlock()
	if err := b.export(context.Background()); err != nil {
		otel.Handle(err)
	}
}

// acquire takes the right to export, or fails when ctx ends first.
func (b *batcher) acquire(ctx context.Context) error {
	select {
	case b.exporting <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// export sends every queued span, a batch at a time, each export bounded by
// the export timeout and by ctx. The caller holds exporting.
func (b *batcher) export(ctx context.Context) error {
	var errs []error
	for ctx.Err() == nil {
		b.mu.Lock()
		n := min(len(b.queue), b.maxBatch)
		batch := make([]sdktrace.ReadOnlySpan, n)
		copy(batch, b.queue)
		b.queue = append(b.queue[:0], b.queue[n:]...)
		relayed := b.relayed
		b.relayed = nil
		b.mu.Unlock()
		if n == 0 && len(relayed) == 0 {
			return errors.Join(errs...)
		}
		ectx, cancel := context.WithTimeout(ctx, b.timeout)
		if err := b.send(ectx, batch, relayed); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	return errors.Join(append(errs, ctx.Err())...)
}

// relayExporter is an exporter that sends relayed frames with its spans.
type relayExporter interface {
	exportRelayed(ctx context.Context, spans []sdktrace.ReadOnlySpan, relayed []byte) error
}

// send exports batch, and relayed with it.
func (b *batcher) send(ctx context.Context, batch []sdktrace.ReadOnlySpan, relayed []byte) error {
	if len(relayed) == 0 {
		return b.exporter.ExportSpans(ctx, batch)
	}
	return b.relayTo.exportRelayed(ctx, batch, relayed)
}

// ForceFlush exports every span queued so far.
func (b *batcher) ForceFlush(ctx context.Context) error {
	if err := b.acquire(ctx); err != nil {
		return err
	}
	defer func() { <-b.exporting }()
	return b.export(ctx)
}

// Shutdown exports what is queued and shuts the exporter down; spans that
// end afterwards are not exported. It says how many spans were dropped, if
// any were. Only the first call does anything.
func (b *batcher) Shutdown(ctx context.Context) error {
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		return nil
	}
	b.stopped = true
	if b.timer != nil {
		b.timer.Stop()
	}
	b.mu.Unlock()
	if err := b.acquire(ctx); err != nil {
		return err
	}
	defer func() { <-b.exporting }()
	err := errors.Join(b.export(ctx), b.exporter.Shutdown(ctx))
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dropped > 0 {
		err = errors.Join(err, fmt.Errorf("%d spans dropped: the queue of %d was full", b.dropped, b.maxQueue))
	}
	if b.relayDropped > 0 {
		err = errors.Join(err, fmt.Errorf("%d exports of started processes dropped: %d bytes of them were waiting", b.relayDropped, relayHeldMax))
	}
	return err
}
