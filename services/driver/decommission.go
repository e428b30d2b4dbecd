package driver

import (
	"context"
	"time"
)

// decommissionExecutorLocked is the driver's part of decommissioning a
// worker (Spark's executor decommissioning): e gets no new tasks, finishes
// those it runs, and is then stopped (coresFreedLocked). The master has
// released its cores, so its replacement may already be starting elsewhere;
// its end, like a lost worker's, counts against neither the application nor
// its tasks.
func (d *Driver) decommissionExecutorLocked(ctx context.Context, e *executorData) {
	if e.decommissioned {
		return
	}
	e.decommissioned = true
	d.log.Info("executor decommissioned: it finishes its tasks and stops", "executor", e.id)
	d.coresFreedLocked(ctx, e)
}

// coresFreedLocked is called when e's cores may have become free (it
// became ready, or a task of it ended). An idle executor starts its idle
// time; a decommissioned one that is idle is stopped.
func (d *Driver) coresFreedLocked(ctx context.Context, e *executorData) {
	if !e.launched || e.removed || e.assigned > 0 {
		return
	}
	if e.idleSince.IsZero() {
		e.idleSince = time.Now()
	}
	if e.decommissioned {
		d.stopExecutorLocked(ctx, e, "its worker is decommissioned")
	}
}

// stopExecutorLocked tells e to stop (after whatever was sent to it
// before). It exits and its worker reports the end, which the master passes
// on (ExecutorUpdated).
func (d *Driver) stopExecutorLocked(ctx context.Context, e *executorData, why string) {
	if e.stopping {
		return
	}
	e.stopping = true
	d.log.Info("stopping executor", "executor", e.id, "reason", why)
	e.mailbox.Post(ctx, func(ctx context.Context) {
		if _, err := e.client.StopExecutor(ctx, stopRequest()); err != nil {
			d.log.Debug("stop executor", "executor", e.id, "err", err)
		}
	})
}
