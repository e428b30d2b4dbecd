package worker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"connectrpc.com/connect"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/fault"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// Spark's registration schedule (Worker.scala): 6 retries at the base interval,
// then prolonged retries at 6× the base, 16 retries in all, each jittered by a
// factor in [0.5, 1.5).
const (
	initialRegistrationRetries = 6
	totalRegistrationRetries   = 16
	prolongedIntervalFactor    = 6
)

// Timeouts of the worker's calls to a master.
const (
	registerTimeout = 10 * time.Second
	// defaultHeartbeatInterval is used when a master names no interval
	// (Spark: spark.worker.timeout / 4).
	defaultHeartbeatInterval = 15 * time.Second
	// minHeartbeatInterval and maxHeartbeatInterval bound the interval a
	// master names: none makes the worker call it in a tight loop or stay
	// silent for more than a day.
	minHeartbeatInterval = 10 * time.Millisecond
	maxHeartbeatInterval = 24 * time.Hour
	// heartbeatFailuresToReconnect consecutive failed heartbeats make the worker
	// treat its master as disconnected and register again.
	heartbeatFailuresToReconnect = 3
)

// retryDelay returns how long to wait before registration retry n (1 is the
// first retry after the immediate first attempt) given jitter r in [0, 1),
// and false once n is past Spark's 16 retries: the worker gives up.
func retryDelay(base time.Duration, n int, r float64) (time.Duration, bool) {
	if n < 1 || n > totalRegistrationRetries {
		return 0, false
	}
	interval := base
	if n > initialRegistrationRetries {
		interval = prolongedIntervalFactor * base
	}
	return time.Duration(float64(interval) * (0.5 + r)), true
}

// connect keeps the worker registered until ctx ends: it registers, heartbeats,
// and registers again whenever the heartbeat loop says so. It fails only when
// registration gives up.
func (s *Server) connect(ctx context.Context) error {
	for {
		interval, err := s.register(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		reason := s.heartbeat(ctx, interval)
		if ctx.Err() != nil {
			return nil
		}
		s.log.Info("registering again", "worker", s.id, "reason", reason)
	}
}

// register registers with a master, retrying on Spark's schedule, and returns
// the heartbeat interval the master asked for.
func (s *Server) register(ctx context.Context) (time.Duration, error) {
	var lastErr error
	for retry := 0; ; retry++ {
		if retry > 0 {
			wait, ok := retryDelay(s.cfg.RegisterInterval, retry, rand.Float64())
			if !ok {
				return 0, fmt.Errorf("register worker %s: all masters are unresponsive after %d attempts, giving up: %w",
					s.id, retry, lastErr)
			}
			s.log.Warn("registration failed; retrying", "worker", s.id, "retry", retry, "wait", wait, "err", lastErr)
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return 0, ctx.Err()
			case <-s.reregister:
				// MasterChanged named a new master: try it now.
				timer.Stop()
			case <-timer.C:
			}
		}
		interval, err := s.registerOnce(ctx)
		if err == nil {
			return interval, nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		lastErr = err
	}
}

// registerOnce tries each master in turn and stops at the first that accepts
// the worker; that master becomes the active one. The worker then kills what it
// runs that the master does not know (SPARK-13604).
func (s *Server) registerOnce(ctx context.Context) (time.Duration, error) {
	req, targets, changes := s.beginRegistration()
	var errs []error
	for _, url := range targets {
		cctx, cancel := context.WithTimeout(ctx, registerTimeout)
		sent := time.Now()
		resp, err := s.client(url).RegisterWorker(cctx, connect.NewRequest(req))
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("register with %s: %w", url, err))
			continue
		}
		if err := s.fence("register with "+url, resp.Msg.GetEpoch()); err != nil {
			errs = append(errs, err)
			continue
		}
		active, err := rpc.NormalizeURL(resp.Msg.GetMasterUrl())
		if err != nil {
			// A master that cannot name itself is reached where we found it.
			active = url
		}
		s.endRegistration(active, url, resp.Msg.GetRegistration(), changes)
		s.acknowledged(req.GetFinishedExecutors(), req.GetFinishedDrivers())
		s.metrics.masterConnected.Set(1)
		s.log.Info("registered with master", "worker", s.id, "master", active, "duplicate", resp.Msg.GetDuplicate())
		s.killUnknown(resp.Msg.GetUnknownExecutors(), resp.Msg.GetUnknownDriverIds())
		s.redecommission()
		interval := heartbeatInterval(resp.Msg.GetHeartbeatIntervalMs())
		s.heard(sent, interval)
		return interval, nil
	}
	s.endRegistration("", "", 0, changes)
	return 0, errors.Join(errs...)
}

// beginRegistration marks a registration in flight and returns the request
// (with what the worker runs now), the masters to try, in order, and the
// count of MasterChanged announcements so far.
func (s *Server) beginRegistration() (*masterv1.RegisterWorkerRequest, []string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.registering == nil {
		s.registering = make(chan struct{})
	}
	req := &masterv1.RegisterWorkerRequest{
		WorkerId: s.id, Host: s.host, Port: int32(s.port), Cores: s.cfg.Cores, MemoryMib: s.cfg.MemoryMiB,
		WorkerUrl: s.cfg.URL,
	}
	req.Executors, req.DriverIds = s.runsLocked()
	req.FinishedExecutors, req.FinishedDrivers = s.finals.snapshot()
	var targets []string
	for _, u := range append([]string{s.preferred, s.route}, s.cfg.Masters...) {
		if u != "" && !slices.Contains(targets, u) {
			targets = append(targets, u)
		}
	}
	return req, targets, s.masterChanges
}

// endRegistration ends the registration in flight; active, unless empty, is
// the master that accepted the worker, reached at route. If a master announced itself with
// MasterChanged since the registration began (changes is the count when it
// began), that newer word stands: the worker registers with it next.
func (s *Server) endRegistration(active, route string, registration int64, changes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if active != "" && changes == s.masterChanges {
		s.active, s.route, s.registration = active, route, registration
		s.preferred = ""
	}
	if s.registering != nil {
		close(s.registering)
		s.registering = nil
	}
}

// runsLocked lists the executors and drivers the worker runs, as registration
// and heartbeats tell the master.
func (s *Server) runsLocked() ([]*masterv1.RunningExecutor, []string) {
	var executors []*masterv1.RunningExecutor
	var drivers []string
	for _, r := range s.sortedExecutorsLocked() {
		executors = append(executors, &masterv1.RunningExecutor{
			AppId: r.appID, ExecutorId: r.execID, Cores: r.cores, MemoryMib: r.memoryMiB, Url: r.url,
		})
	}
	for _, r := range s.sortedDriversLocked() {
		drivers = append(drivers, r.id)
	}
	return executors, drivers
}

// heartbeatRequest is a heartbeat with what the worker runs.
func (s *Server) heartbeatRequest() *masterv1.HeartbeatRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	req := &masterv1.HeartbeatRequest{WorkerId: s.id}
	req.Executors, req.DriverIds = s.runsLocked()
	req.FinishedExecutors, req.FinishedDrivers = s.finals.snapshot()
	req.Usage = s.usageReportLocked()
	return req
}

// acknowledged forgets the final states a master's answer acknowledged.
func (s *Server) acknowledged(executors []*masterv1.ExecutorStateChangedRequest, drivers []*masterv1.DriverStateChangedRequest) {
	if len(executors)+len(drivers) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finals.ack(executors, drivers)
}

// killUnknown kills the executors and drivers a master said it does not know.
func (s *Server) killUnknown(executors []*masterv1.RunningExecutor, drivers []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range executors {
		if r, ok := s.executors[executorKey{app: e.GetAppId(), id: e.GetExecutorId()}]; ok {
			s.log.Warn("killing executor unknown to the master", "app", r.appID, "executor", r.execID)
			r.kill(errUnknownToMaster)
		}
	}
	for _, id := range drivers {
		if r, ok := s.drivers[id]; ok {
			s.log.Warn("killing driver unknown to the master", "driver", id)
			r.kill(errUnknownToMaster)
		}
	}
}

// heartbeat heartbeats the active master every interval until ctx ends or the
// worker must register again, and says why.
func (s *Server) heartbeat(ctx context.Context, interval time.Duration) string {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	// Whatever ends the loop, the worker is not connected until it registers again.
	defer s.metrics.masterConnected.Set(0)
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return "worker stopping"
		case <-s.reregister:
			return "the active master changed"
		case <-ticker.C:
		}
		url := s.activeMaster()
		req := s.heartbeatRequest()
		cctx, cancel := context.WithTimeout(ctx, interval)
		sent := time.Now()
		resp, err := s.client(url).Heartbeat(cctx, connect.NewRequest(req))
		cancel()
		switch {
		case ctx.Err() != nil:
			return "worker stopping"
		case err == nil && resp.Msg.GetReregister():
			return fmt.Sprintf("master %s asked the worker to register again", url)
		case err == nil:
			failures = 0
			if next := heartbeatInterval(resp.Msg.GetHeartbeatIntervalMs()); next != interval {
				// The cluster grew or shrank past the master's heartbeat rate.
				interval = next
				ticker.Reset(interval)
			}
			s.heard(sent, interval)
			s.acknowledged(req.GetFinishedExecutors(), req.GetFinishedDrivers())
			s.metrics.masterConnected.Set(1)
			s.killUnknown(resp.Msg.GetUnknownExecutors(), resp.Msg.GetUnknownDriverIds())
		case connect.CodeOf(err) == connect.CodeNotFound:
			s.metrics.heartbeatFailures.Inc()
			return fmt.Sprintf("master %s does not know this worker", url)
		default:
			failures++
			s.metrics.heartbeatFailures.Inc()
			s.metrics.masterConnected.Set(0)
			s.log.Warn("heartbeat failed", "worker", s.id, "master", url, "failures", failures, "err", err)
			if failures >= heartbeatFailuresToReconnect {
				return fmt.Sprintf("master %s unreachable: %v", url, err)
			}
		}
	}
}

// heartbeatInterval is the interval a master named in ms: the default when
// it named none, within the bounds otherwise.
func heartbeatInterval(ms int64) time.Duration {
	if ms <= 0 {
		return defaultHeartbeatInterval
	}
	ms = min(ms, maxHeartbeatInterval.Milliseconds())
	return max(time.Duration(ms)*time.Millisecond, minHeartbeatInterval)
}

// heard records that the active master answered a registration or
// heartbeat the worker sent at sent, heartbeating every interval. The master
// declares a worker lost after four intervals without a heartbeat (its
// worker timeout) counted from when it received one — after sent — so for
// two intervals after sent it cannot have.
func (s *Server) heard(sent time.Time, interval time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.heardAt, s.heardWithin = sent, 2*interval
}

// heardRecentlyLocked refuses a launch when the active master last answered
// the worker so long ago that it may have declared the worker lost and
// placed the launch elsewhere: a worker that was paused (SIGSTOP, a frozen
// VM) with a launch on its way must not run it when it wakes, beside the
// one the master placed since. It launches again once the master answers
// its next heartbeat or registration.
func (s *Server) heardRecentlyLocked() error {
	if since := time.Since(s.heardAt); since > s.heardWithin {
		return fmt.Errorf("worker %s: %w: its master last answered it %s ago, long enough to have declared it lost; it launches again once the master answers it",
			s.id, fault.ErrUnavailable, since.Round(time.Millisecond))
	}
	return nil
}

// awaitActiveLocked returns nil once url is the active master. A master may
// send a command before its answer to RegisterWorker has reached the worker,
// so a registration in flight is waited out first. s.mu is held on entry and
// on return.
func (s *Server) awaitActiveLocked(ctx context.Context, url string) error {
	for url == "" || url != s.active {
		wait := s.registering
		if wait == nil {
			active := s.active
			if active == "" {
				active = "none: the worker is not registered"
			}
			return fmt.Errorf("master %q is not the worker's active master (%s): %w", url, active, fault.ErrFailedPrecondition)
		}
		s.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
		}
		s.mu.Lock()
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("wait for registration with %s: %w", url, err)
		}
	}
	return nil
}
