package master

import (
	"context"
	"fmt"
	"time"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/fault"
)

// registerWorkerLocked admits w once kept, unless an ALIVE worker holds
// its address (Spark's registerWorker) or MaxWorkers are listed; kept then
// runs, under mu, with the write's outcome, w admitted if it was kept.
func (s *Server) registerWorkerLocked(ctx context.Context, w *workerInfo, kept func(error)) error {
	for _, p := range s.pendingWorkers {
		if p.id == w.id || p.address() == w.address() {
			return fmt.Errorf("register worker %s: %w: %s's registration at %s is being kept; ask again", w.id, fault.ErrUnavailable, p.id, p.address())
		}
	}
	s.workers.unlistDeadAt(w.address())
	if old, ok := s.workers.at(w.address()); ok {
		if old.state != masterv1.WorkerState_WORKER_STATE_UNKNOWN {
			return fmt.Errorf("register worker %s: worker %s is already registered at %s: %w",
				w.id, old.id, w.address(), fault.ErrAlreadyExists)
		}
		s.removeWorkerLocked(ctx, old, "replaced by a new worker at the same address")
	}
	if n := s.workers.len() + len(s.pendingWorkers); n >= MaxWorkers {
		return fmt.Errorf("register worker %s: %w: %d workers are listed, the limit is %d", w.id, fault.ErrResourceExhausted, n, MaxWorkers)
	}
	s.pendingWorkers[w.id] = w
	s.keepLocked("worker "+w.id, func(err error) {
		delete(s.pendingWorkers, w.id)
		if err != nil {
			kept(fmt.Errorf("register worker %s: %w", w.id, err))
			return
		}
		s.workers.add(w)
		kept(nil)
	})
	return nil
}

// removeWorkerLocked marks w DEAD: its executors are LOST, its drivers
// relaunched (supervised) or ended, and a schedule pass is asked for.
func (s *Server) removeWorkerLocked(ctx context.Context, w *workerInfo, reason string) {
	s.log.Info("removing worker", "worker", w.id, "address", w.address(), "reason", reason)
	if w.state == masterv1.WorkerState_WORKER_STATE_UNKNOWN {
		// A kept worker known to be gone: recovery waits for it no more.
		s.unknownWorkers--
	}
	if err := w.setState(masterv1.WorkerState_WORKER_STATE_DEAD); err != nil {
		s.log.Warn("remove worker", "err", err)
	}
	s.workers.bury(w, s.now())
	s.keepLocked("worker " + w.id)
	for _, e := range w.executors {
		msg := fmt.Sprintf("worker %s lost: %s", w.id, reason)
		before := e.state
		if err := e.setState(masterv1.ExecutorState_EXECUTOR_STATE_LOST); err != nil {
			s.log.Warn("remove worker", "err", err)
		} else {
			s.metrics.executorEnded(e, before, "")
		}
		e.message = msg
		executorSpanWorkerLostLocked(e, reason)
		executorSpanStateLocked(e, e.state, msg, nil)
		s.sendExecutorUpdated(ctx, e, true, nil)
		e.app.removeExecutor(e, s.now())
	}
	w.executors = map[executorKey]*executorInfo{}
	for _, d := range w.drivers {
		if d.launched {
			s.lostDriverLocked(ctx, d, fmt.Sprintf("worker %s lost: %s", w.id, reason))
		} else {
			// Placed on a worker that died before it took the launch:
			// nothing ran, so it is placed again (if the worker did take
			// it, it kills the driver the master no longer knows there).
			s.requeueDriverLocked(ctx, d, fmt.Sprintf("worker %s lost before it took the launch: %s", w.id, reason))
		}
	}
	w.drivers = map[string]*driverInfo{}
	w.coresUsed, w.memoryUsedMiB = 0, 0
	s.needSchedule = true
}

// checkWorkerTimeouts is Spark's timeOutDeadWorkers: a worker without a
// heartbeat for the worker timeout (workerTimeoutLocked) is removed, and a DEAD one stays listed for
// DeadWorkerPersistence × WorkerTimeout after it died — (persistence+1) ×
// WorkerTimeout after its last heartbeat when it timed out, as in Spark. It
// looks only at the workers it removes or culls.
func (s *Server) checkWorkerTimeouts(ctx context.Context) {
	s.mu.Lock()
	defer s.scheduleAndUnlock(ctx)
	now := s.now()
	timeout := s.workerTimeoutLocked()
	for {
		w, ok := s.workers.oldestHeartbeat()
		if !ok || s.silentFor(now, w.lastHeartbeat) <= timeout {
			break
		}
		s.metrics.workerTimeouts.Inc()
		w.timedOut = now
		s.removeWorkerLocked(ctx, w, fmt.Sprintf("no heartbeat in %s", now.Sub(w.lastHeartbeat).Round(time.Millisecond)))
	}
	s.workers.cull(now.Add(-time.Duration(s.cfg.DeadWorkerPersistence) * s.cfg.WorkerTimeout))
}
