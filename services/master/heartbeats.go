package master

import (
	"math"
	"time"
)

// DefaultMaxHeartbeatRate is Config.MaxHeartbeatRate's default, Nomad's
// max_heartbeats_per_second: at Spark's 15 s interval it binds from 750
// workers on.
const DefaultMaxHeartbeatRate = 50

// heartbeatInterval is the interval a master with live workers tells each
// worker to heartbeat at: the quarter of the worker timeout, as Spark's, or
// as many quarters as keep the cluster's heartbeats at or below rate a
// second (rate ≤ 0: no bound). Whole quarters keep the intervals told few,
// so that the longest one is cheap to know (roster.longestInterval).
func heartbeatInterval(timeout time.Duration, rate float64, live int) time.Duration {
	quarter := timeout / 4
	if rate <= 0 || live <= 0 {
		return quarter
	}
	quarters := math.Ceil(float64(live) / rate / quarter.Seconds())
	return time.Duration(max(1, quarters)) * quarter
}

// heartbeatIntervalLocked is the interval the master tells w now, recorded
// on w so that its timeout allows for it.
func (s *Server) heartbeatIntervalLocked(w *workerInfo) time.Duration {
	i := heartbeatInterval(s.cfg.WorkerTimeout, s.cfg.MaxHeartbeatRate, s.workers.liveCount())
	s.workers.tell(w, i)
	return i
}

// workerTimeoutLocked is how long a live worker may be silent before it is
// DEAD: the configured worker timeout, or four of the longest interval a
// live worker was told, when that is longer — so that a worker told a long
// interval while the cluster was large is not timed out by the short one
// the master tells now that it is small.
func (s *Server) workerTimeoutLocked() time.Duration {
	return max(s.cfg.WorkerTimeout, 4*s.workers.longestInterval())
}
