package etcd

import (
	"context"
	"sync/atomic"
	"time"
)

// Session is a lease kept alive: renewed every third of its TTL until it is
// closed, found gone, or not renewed for a whole TTL (etcd unreachable, or
// this process paused) — then it is done, because etcd may have let it lapse
// and whatever was held under it (a leadership) may be another's.
//
// Held says, on every call and at the cost of a clock read and an atomic
// load, whether the lease is known to be held now. A process learns that it
// was paused only once it runs again, and then its first work (answering a
// request that waited in its listen queue) comes before its keep-alive
// goroutine can notice; Held, read by that work, already says no.
type Session struct {
	c   *Client
	id  LeaseID
	ttl time.Duration
	// now is the clock (time.Now: its monotonic reading, which runs on
	// while the process is stopped); base is when the session began.
	now  func() time.Time
	base time.Time
	// heldUntil is when, as an offset from base, the lease may lapse: a
	// TTL after the last keep-alive etcd answered was sent (the grant's
	// request before the first). Zero once the session ended.
	heldUntil atomic.Int64
	ctx       context.Context
	cancel    context.CancelFunc
	ended     chan struct{}
}

// revokeTimeout bounds the revoke of a closing session: the lease lapses by
// itself anyway, and a process stopping while etcd is away must not wait.
const revokeTimeout = 2 * time.Second

// NewSession grants a lease of ttl (whole seconds, at least one) and keeps
// it alive until ctx ends or Close.
func NewSession(ctx context.Context, c *Client, ttl time.Duration) (*Session, error) {
	return newSessionOnClock(ctx, c, ttl, time.Now)
}

// newSessionOnClock is NewSession on the clock now.
func newSessionOnClock(ctx context.Context, c *Client, ttl time.Duration, now func() time.Time) (*Session, error) {
	ttl = max(ttl.Round(time.Second), time.Second)
	sent := now()
	id, err := c.Grant(ctx, ttl)
	if err != nil {
		return nil, err
	}
	s := &Session{c: c, id: id, ttl: ttl, now: now, base: sent, ended: make(chan struct{})}
	s.heldUntil.Store(int64(ttl))
	s.ctx, s.cancel = context.WithCancel(ctx)
	go s.keepAlive()
	return s, nil
}

// Lease is the session's lease.
func (s *Session) Lease() LeaseID { return s.id }

// Context ends when the session does: work that holds only under the lease
// (a campaign, a leadership) runs in it.
func (s *Session) Context() context.Context { return s.ctx }

// Done is closed once the lease may have lapsed or the session ended.
func (s *Session) Done() <-chan struct{} { return s.ctx.Done() }

// Held reports whether the lease is known to be held now: less than a TTL
// has passed since a keep-alive that etcd answered was sent (etcd counts
// the TTL from when it received it, later), and the session has not ended.
// It turns false the instant that TTL has passed, before the session ends,
// and stays false: a session not renewed for a TTL never is again.
func (s *Session) Held() bool {
	until := s.heldUntil.Load()
	return until > 0 && int64(s.now().Sub(s.base)) < until
}

func (s *Session) keepAlive() {
	defer close(s.ended)
	defer s.cancel()
	defer s.heldUntil.Store(0)
	tick := time.NewTicker(s.ttl / 3)
	defer tick.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-tick.C:
		}
		// The keep-alive counts only if sent before the lease may lapse.
		sent := s.now().Sub(s.base)
		left := time.Duration(s.heldUntil.Load()) - sent
		if left <= 0 {
			return
		}
		call, cancel := context.WithTimeout(s.ctx, left)
		ttl, err := s.c.KeepAliveOnce(call, s.id)
		cancel()
		switch {
		case err == nil && ttl <= 0:
			return
		case err == nil:
			s.heldUntil.Store(int64(sent + min(ttl, s.ttl)))
		}
	}
}

// Close stops renewing and revokes the lease, which deletes the keys held
// under it (a leadership ends at once instead of after the TTL).
func (s *Session) Close() error {
	s.cancel()
	<-s.ended
	ctx, cancel := context.WithTimeout(context.Background(), revokeTimeout)
	defer cancel()
	return s.c.Revoke(ctx, s.id)
}
