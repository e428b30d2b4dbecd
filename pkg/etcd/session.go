package etcd

import (
	"context"
	"time"
)

// Session is a lease kept alive: renewed every third of its TTL until it is
// closed, found gone, or not renewed for a whole TTL (etcd unreachable, or
// this process paused) — then it is done, because etcd may have let it lapse
// and whatever was held under it (a leadership) may be another's.
type Session struct {
	c      *Client
	id     LeaseID
	ttl    time.Duration
	ctx    context.Context
	cancel context.CancelFunc
	ended  chan struct{}
}

// revokeTimeout bounds the revoke of a closing session: the lease lapses by
// itself anyway, and a process stopping while etcd is away must not wait.
const revokeTimeout = 2 * time.Second

// NewSession grants a lease of ttl (whole seconds, at least one) and keeps
// it alive until ctx ends or Close.
func NewSession(ctx context.Context, c *Client, ttl time.Duration) (*Session, error) {
	ttl = max(ttl.Round(time.Second), time.Second)
	id, err := c.Grant(ctx, ttl)
	if err != nil {
		return nil, err
	}
	s := &Session{c: c, id: id, ttl: ttl, ended: make(chan struct{})}
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

func (s *Session) keepAlive() {
	defer close(s.ended)
	defer s.cancel()
	renewed := time.Now()
	tick := time.NewTicker(s.ttl / 3)
	defer tick.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-tick.C:
		}
		deadline := renewed.Add(s.ttl)
		if time.Now().After(deadline) {
			return
		}
		call, cancel := context.WithDeadline(s.ctx, deadline)
		sent := time.Now()
		left, err := s.c.KeepAliveOnce(call, s.id)
		cancel()
		switch {
		case err == nil && left <= 0:
			return
		case err == nil:
			renewed = sent
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
