package store

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Lease is the etcd session (concurrency.Session) a master campaigns and
// leads under, and the knowledge of whether its lease is held now.
//
// The session renews the lease; lease checks it besides, every third of
// its TTL, with a keep-alive of its own whose send time it knows, and ends
// once a whole TTL passed since the last one etcd answered was sent (etcd
// counts the TTL from when it received it, later) or the lease is gone:
// etcd may have let the lease lapse then, and the leadership held under it
// may be another's. The session's keep-alives stop with it.
//
// Held says, on every call and at the cost of a clock read and an atomic
// load, whether the lease is known to be held now. A process learns that it
// was paused only once it runs again, and then its first work (answering a
// request that waited in its listen queue) comes before any goroutine of
// its own can notice; Held, read by that work, already says no. The
// session's own end is not enough: etcd's client counts a lease's TTL from
// when a keep-alive's answer was read, which after a pause may be long
// after etcd let it lapse.
type Lease struct {
	cli     *clientv3.Client
	session *concurrency.Session
	ttl     time.Duration
	// now is the clock (time.Now: its monotonic reading, which runs on
	// while the process is stopped); base is when the lease was asked for.
	now  func() time.Time
	base time.Time
	// heldUntil is when, as an offset from base, the lease may lapse: a
	// TTL after the last keep-alive etcd answered was sent (the grant's
	// request before the first). Zero once the lease ended.
	heldUntil atomic.Int64
	ctx       context.Context
	cancel    context.CancelFunc
	ended     chan struct{}
}

// revokeTimeout bounds the revoke of a closing lease: the lease lapses by
// itself anyway, and a process stopping while etcd is away must not wait.
const revokeTimeout = 2 * time.Second

// NewLease grants a lease of ttl (whole seconds, at least one) and keeps it
// alive until ctx ends or Close.
func NewLease(ctx context.Context, cli *clientv3.Client, ttl time.Duration) (*Lease, error) {
	return newLeaseOnClock(ctx, cli, ttl, time.Now)
}

// newLeaseOnClock is NewLease on the clock now.
func newLeaseOnClock(ctx context.Context, cli *clientv3.Client, ttl time.Duration, now func() time.Time) (*Lease, error) {
	ttl = max(ttl.Round(time.Second), time.Second)
	sent := now()
	grant, cancel := context.WithTimeout(ctx, etcdTimeout)
	granted, err := cli.Grant(grant, int64(ttl/time.Second))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("grant a lease: %w", err)
	}
	l := &Lease{cli: cli, ttl: ttl, now: now, base: sent, ended: make(chan struct{})}
	l.heldUntil.Store(int64(ttl))
	l.ctx, l.cancel = context.WithCancel(ctx)
	l.session, err = concurrency.NewSession(cli, concurrency.WithLease(granted.ID), concurrency.WithContext(l.ctx))
	if err != nil {
		l.cancel()
		return nil, errors.Join(fmt.Errorf("keep a lease alive: %w", err), l.revoke(granted.ID))
	}
	go l.check()
	return l, nil
}

// Context ends when the lease does: work that holds only under the lease
// (a campaign, a leadership) runs in it.
func (l *Lease) Context() context.Context { return l.ctx }

// Session is the etcd session the lease holds, to campaign under.
func (l *Lease) Session() *concurrency.Session { return l.session }

// Held reports whether the lease is known to be held now: less than a TTL
// has passed since a keep-alive that etcd answered was sent, and the lease
// has not ended. It turns false the instant that TTL has passed, before
// the lease ends, and stays false: a lease not renewed for a TTL never is
// again.
func (l *Lease) Held() bool {
	until := l.heldUntil.Load()
	return until > 0 && int64(l.now().Sub(l.base)) < until
}

func (l *Lease) check() {
	defer close(l.ended)
	defer l.cancel()
	defer l.heldUntil.Store(0)
	tick := time.NewTicker(l.ttl / 3)
	defer tick.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-tick.C:
		}
		// The keep-alive counts only if sent before the lease may lapse;
		// one that etcd does not answer (a paused member) is sent again at
		// the next tick.
		sent := l.now().Sub(l.base)
		left := time.Duration(l.heldUntil.Load()) - sent
		if left <= 0 {
			return
		}
		call, cancel := context.WithTimeout(l.ctx, min(left, l.ttl/3))
		resp, err := l.cli.KeepAliveOnce(call, l.session.Lease())
		cancel()
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			return
		case err == nil:
			l.heldUntil.Store(int64(sent + min(time.Duration(resp.TTL)*time.Second, l.ttl)))
		}
	}
}

// Close stops renewing and revokes the lease, which deletes the keys held
// under it (a leadership ends at once instead of after the TTL).
func (l *Lease) Close() error {
	l.cancel()
	<-l.ended
	l.session.Orphan()
	return l.revoke(l.session.Lease())
}

func (l *Lease) revoke(id clientv3.LeaseID) error {
	ctx, cancel := context.WithTimeout(context.Background(), revokeTimeout)
	defer cancel()
	if _, err := l.cli.Revoke(ctx, id); err != nil {
		return fmt.Errorf("revoke the lease: %w", err)
	}
	return nil
}
