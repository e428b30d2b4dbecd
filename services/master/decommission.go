package master

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	workerv1 "github.com/glint-cluster/glint/pkg/api/glint/worker/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/worker/v1/workerv1connect"
	"github.com/glint-cluster/glint/pkg/fault"
	"github.com/glint-cluster/glint/pkg/ids"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// WorkerDecommissioning is Spark's WorkerDecommissioning: the worker is
// stopping, or was sent SIGPWR. See decommissionWorkerLocked.
func (s *Server) WorkerDecommissioning(ctx context.Context, req *connect.Request[masterv1.WorkerDecommissioningRequest]) (*connect.Response[masterv1.WorkerDecommissioningResponse], error) {
	if _, err := s.decommission(ctx, req.Msg.GetWorkerId(), "worker is stopping"); err != nil {
		return nil, rpc.Error(err)
	}
	return connect.NewResponse(&masterv1.WorkerDecommissioningResponse{}), nil
}

// DecommissionWorker is an operator's `glint decommission WORKER_ID` (Spark's
// DecommissionWorkers). See decommissionWorkerLocked.
func (s *Server) DecommissionWorker(ctx context.Context, req *connect.Request[masterv1.DecommissionWorkerRequest]) (*connect.Response[masterv1.DecommissionWorkerResponse], error) {
	already, err := s.decommission(ctx, req.Msg.GetWorkerId(), "worker decommissioned on request")
	if err != nil {
		return nil, rpc.Error(err)
	}
	return connect.NewResponse(&masterv1.DecommissionWorkerResponse{Already: already}), nil
}

// decommission decommissions the registered worker id, and reports whether
// it already was.
func (s *Server) decommission(ctx context.Context, id, reason string) (bool, error) {
	if err := ids.ValidateWorker(id); err != nil {
		return false, err
	}
	marks := s.lockKept()
	defer s.unlockKept(ctx, marks)
	w, ok := s.workers.alive(id)
	if !ok {
		return false, fmt.Errorf("decommission worker %s: %w", id, fault.ErrNotFound)
	}
	if w.state == masterv1.WorkerState_WORKER_STATE_DECOMMISSIONED {
		return true, nil
	}
	return false, s.decommissionWorkerLocked(ctx, w, reason)
}

// decommissionWorkerLocked is Spark's decommissionWorker: w becomes
// DECOMMISSIONED and gets nothing more. Its executors become DECOMMISSIONED
// and their drivers are told: the drivers give them no new tasks and stop
// them once their tasks are done, and their ends do not count against their
// applications. Their cores are released from their applications at once,
// so replacements can be placed on other workers. The worker is told to
// take no new launches, after whatever was sent to it before.
func (s *Server) decommissionWorkerLocked(ctx context.Context, w *workerInfo, reason string) error {
	if err := w.setState(masterv1.WorkerState_WORKER_STATE_DECOMMISSIONED); err != nil {
		return err
	}
	s.log.Info("worker decommissioning", "worker", w.id, "reason", reason)
	for _, e := range w.executors {
		if err := e.setState(masterv1.ExecutorState_EXECUTOR_STATE_DECOMMISSIONED); err == nil {
			e.message = fmt.Sprintf("worker %s decommissioned: %s", w.id, reason)
			e.app.releaseExecutor(e)
			s.sendExecutorUpdated(ctx, e, false, nil)
		}
	}
	s.sendDecommissionWorker(ctx, w)
	s.needSchedule = true
	return nil
}

// sendDecommissionWorker tells w to take no new launches.
func (s *Server) sendDecommissionWorker(ctx context.Context, w *workerInfo) {
	req := &workerv1.DecommissionWorkerRequest{MasterUrl: s.cfg.URL, Epoch: s.cfg.Epoch}
	s.postToWorker(ctx, w, func(ctx context.Context, c workerv1connect.WorkerServiceClient) {
		if _, err := c.DecommissionWorker(ctx, connect.NewRequest(req)); err != nil {
			s.log.Warn("tell worker it is decommissioned", "worker", w.id, "err", err)
		}
	})
}
