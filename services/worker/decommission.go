package worker

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	workerv1 "github.com/glint-cluster/glint/pkg/api/glint/worker/v1"
	"github.com/glint-cluster/glint/pkg/fault"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// decommissionTimeout bounds telling the master the worker is stopping.
const decommissionTimeout = 3 * time.Second

// errDecommissioned refuses launches on a decommissioned worker.
var errDecommissioned = fault.New(fault.ErrFailedPrecondition, "decommissioned: it takes no new launches")

// Decommission is Spark's worker decommissioning (SIGPWR): the master is
// told, so it places nothing more here and has the drivers stop this
// worker's executors once their tasks are done, and the worker takes no new
// launches. What it runs goes on until stopped.
func (s *Server) Decommission() {
	s.tellDecommissioning()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.decommissionLocked()
}

// DecommissionWorker is the master's order to take no new launches (an
// operator decommissioned the worker); it comes after every launch the
// master sent before.
func (s *Server) DecommissionWorker(ctx context.Context, req *connect.Request[workerv1.DecommissionWorkerRequest]) (*connect.Response[workerv1.DecommissionWorkerResponse], error) {
	if err := s.fence("decommission worker", req.Msg.GetEpoch()); err != nil {
		return nil, rpc.Error(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.awaitActiveLocked(ctx, req.Msg.GetMasterUrl()); err != nil {
		return nil, rpc.Error(fmt.Errorf("decommission worker %s: %w", s.id, err))
	}
	s.decommissionLocked()
	return connect.NewResponse(&workerv1.DecommissionWorkerResponse{}), nil
}

// redecommission tells the master the worker just registered with that it
// is decommissioned, if it is: a restarted or new master does not know.
func (s *Server) redecommission() {
	s.mu.Lock()
	decommissioned := s.decommissioned
	s.mu.Unlock()
	if decommissioned {
		s.tellDecommissioning()
	}
}

func (s *Server) decommissionLocked() {
	if !s.decommissioned {
		s.decommissioned = true
		s.log.Info("worker decommissioned: no new launches", "worker", s.id)
	}
}

// tellDecommissioning tells the active master that this worker is
// decommissioning (it is stopping, or was sent SIGPWR), so it schedules
// nothing more here and does not count the ends of its executors as
// application failures.
func (s *Server) tellDecommissioning() {
	url := s.activeMaster()
	if url == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), decommissionTimeout)
	defer cancel()
	req := connect.NewRequest(&masterv1.WorkerDecommissioningRequest{WorkerId: s.id})
	if _, err := s.client(url).WorkerDecommissioning(ctx, req); err != nil {
		s.log.Warn("tell master the worker is decommissioning", "master", url, "err", err)
	}
}
