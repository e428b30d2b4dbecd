package master

import (
	"container/list"
	"iter"
	"time"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
)

// roster holds the registered workers so that every event costs O(1) at any
// cluster size: registering, a heartbeat, finding a worker by id or address,
// and removing one. It keeps the workers in registration order (DEAD ones
// until culled), the live ones in heartbeat order — least recent first, so a
// timeout sweep looks only at the workers it times out, where Spark's
// timeOutDeadWorkers scans them all — and the DEAD ones in the order they
// died, so culling them looks only at those it culls.
type roster struct {
	order  []*workerInfo // registration order; nil where a worker was culled
	holes  int           // nil entries in order
	live   list.List     // non-DEAD workers, least recent heartbeat first
	dead   list.List     // DEAD workers, oldest death first
	byID   map[string]*workerInfo
	byAddr map[string]*workerInfo // live workers by host:port
	gone   map[string]*workerInfo // DEAD workers by id
	goneAt map[string]*workerInfo // DEAD workers by host:port
	told   map[time.Duration]int  // live workers by the heartbeat interval they were told
}

// rosterEntry is a worker's place in the roster.
type rosterEntry struct {
	index  int           // in roster.order
	elem   *list.Element // in roster.live or roster.dead
	diedAt time.Time
}

func newRoster() *roster {
	return &roster{byID: map[string]*workerInfo{}, byAddr: map[string]*workerInfo{},
		gone: map[string]*workerInfo{}, goneAt: map[string]*workerInfo{}, told: map[time.Duration]int{}}
}

// len counts the listed workers, DEAD ones included.
func (r *roster) len() int { return len(r.order) - r.holes }

// all yields the listed workers in registration order.
func (r *roster) all() iter.Seq[*workerInfo] {
	return func(yield func(*workerInfo) bool) {
		for _, w := range r.order {
			if w != nil && !yield(w) {
				return
			}
		}
	}
}

// alive looks up a registered worker that is not DEAD.
func (r *roster) alive(id string) (*workerInfo, bool) {
	w, ok := r.byID[id]
	return w, ok
}

// at returns the live worker at host:port.
func (r *roster) at(address string) (*workerInfo, bool) {
	w, ok := r.byAddr[address]
	return w, ok
}

// removed reports whether a worker with id was removed and is still listed.
func (r *roster) removed(id string) bool {
	_, ok := r.gone[id]
	return ok
}

// add lists w, live, as the most recent heartbeat.
func (r *roster) add(w *workerInfo) {
	w.roster = rosterEntry{index: len(r.order), elem: r.live.PushBack(w)}
	r.order = append(r.order, w)
	r.byID[w.id] = w
	r.byAddr[w.address()] = w
}

// heartbeat records w's heartbeat at now.
func (r *roster) heartbeat(w *workerInfo, now time.Time) {
	w.lastHeartbeat = now
	r.live.MoveToBack(w.roster.elem)
}

// liveCount counts the workers that are not DEAD.
func (r *roster) liveCount() int { return r.live.Len() }

// tell records that live w was told to heartbeat every interval.
func (r *roster) tell(w *workerInfo, interval time.Duration) {
	if w.interval == interval {
		return
	}
	r.untell(w)
	w.interval = interval
	r.told[interval]++
}

// untell forgets the interval w was told.
func (r *roster) untell(w *workerInfo) {
	if w.interval == 0 {
		return
	}
	if r.told[w.interval]--; r.told[w.interval] == 0 {
		delete(r.told, w.interval)
	}
	w.interval = 0
}

// longestInterval is the longest heartbeat interval a live worker was told;
// 0 when none was. The intervals told are whole quarters of the worker
// timeout (heartbeatInterval), so there are few of them.
func (r *roster) longestInterval() time.Duration {
	var longest time.Duration
	for i := range r.told {
		longest = max(longest, i)
	}
	return longest
}

// oldestHeartbeat returns the live worker heard from least recently.
func (r *roster) oldestHeartbeat() (*workerInfo, bool) {
	if e := r.live.Front(); e != nil {
		return e.Value.(*workerInfo), true
	}
	return nil, false
}

// bury moves live w among the DEAD, died at now; it stays listed until culled.
func (r *roster) bury(w *workerInfo, now time.Time) {
	r.live.Remove(w.roster.elem)
	r.untell(w)
	delete(r.byID, w.id)
	if r.byAddr[w.address()] == w {
		delete(r.byAddr, w.address())
	}
	w.roster.diedAt = now
	w.roster.elem = r.dead.PushBack(w)
	r.gone[w.id] = w
	r.goneAt[w.address()] = w
}

// unlistDeadAt unlists the DEAD worker that was at host:port, if any.
func (r *roster) unlistDeadAt(address string) {
	if w, ok := r.goneAt[address]; ok {
		r.unlist(w)
	}
}

// cull unlists the DEAD workers that died before cutoff, oldest first.
func (r *roster) cull(cutoff time.Time) {
	for e := r.dead.Front(); e != nil; e = r.dead.Front() {
		w := e.Value.(*workerInfo)
		if !w.roster.diedAt.Before(cutoff) {
			return
		}
		r.unlist(w)
	}
}

// unlist removes DEAD w from the roster.
func (r *roster) unlist(w *workerInfo) {
	if w.state != masterv1.WorkerState_WORKER_STATE_DEAD || r.order[w.roster.index] != w {
		return
	}
	r.dead.Remove(w.roster.elem)
	if r.gone[w.id] == w {
		delete(r.gone, w.id)
	}
	if r.goneAt[w.address()] == w {
		delete(r.goneAt, w.address())
	}
	r.order[w.roster.index] = nil
	r.holes++
	if r.holes > len(r.order)/2 {
		r.compact()
	}
}

// compact drops the holes from order, keeping registration order.
func (r *roster) compact() {
	kept := r.order[:0]
	for _, w := range r.order {
		if w != nil {
			w.roster.index = len(kept)
			kept = append(kept, w)
		}
	}
	clear(r.order[len(kept):])
	r.order, r.holes = kept, 0
}
