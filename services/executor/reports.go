package executor

import (
	"context"
	"sync"
	"time"

	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
)

// reportTimeout bounds one StatusUpdate call.
const reportTimeout = 10 * time.Second

// reports batches the tasks' ends for the driver: one call at a time, each
// carrying every end that came while the previous call was on its way, in
// order. Its goroutine runs only while there is something to send. The calls
// continue the trace of the first task in their batch, and are not cut off
// when the executor stops (Run waits for them).
type reports struct {
	mu      sync.Mutex
	pending []*driverv1.TaskStatus
	ctx     context.Context // the first pending task's
	sending bool
	idle    sync.Cond
}

// add queues status; send delivers a batch.
func (r *reports) add(ctx context.Context, status *driverv1.TaskStatus, send func(context.Context, []*driverv1.TaskStatus)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pending) == 0 {
		r.ctx = context.WithoutCancel(ctx)
	}
	r.pending = append(r.pending, status)
	if !r.sending {
		r.sending = true
		go r.drain(send)
	}
}

func (r *reports) drain(send func(context.Context, []*driverv1.TaskStatus)) {
	for {
		r.mu.Lock()
		batch, ctx := r.pending, r.ctx
		r.pending, r.ctx = nil, nil
		if len(batch) == 0 {
			r.sending = false
			r.idleCond().Broadcast()
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, reportTimeout)
		send(cctx, batch)
		cancel()
	}
}

// wait blocks until every queued end was sent.
func (r *reports) wait() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.sending {
		r.idleCond().Wait()
	}
}

// idleCond is idle, tied to mu on first use (reports' zero value is ready).
func (r *reports) idleCond() *sync.Cond {
	if r.idle.L == nil {
		r.idle.L = &r.mu
	}
	return &r.idle
}
