package store

import (
	"context"
	"net/url"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/glint-cluster/glint/internal/etcdtest"
	"github.com/glint-cluster/glint/internal/fakeclock"
	"github.com/glint-cluster/glint/internal/faultproxy"
	"github.com/glint-cluster/glint/internal/tooltest"
)

func startLease(t *testing.T, cli *clientv3.Client, ttl time.Duration, now func() time.Time) *Lease {
	t.Helper()
	l, err := newLeaseOnClock(context.Background(), cli, ttl, now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// ended fails t unless l ends within a minute (a generous bound: the tests
// wait on the event, the bound only ends a hung test).
func ended(t *testing.T, l *Lease, what string) {
	t.Helper()
	select {
	case <-l.Context().Done():
	case <-time.After(time.Minute):
		t.Fatalf("%s: not within a minute", what)
	}
	if l.Held() {
		t.Fatalf("%s: an ended lease says it is held", what)
	}
}

func TestALeaseEndsWhenItCannotBeRenewedForATTLOrIsGone(t *testing.T) {
	endpoint := etcdtest.Start(t)
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	proxy := faultproxy.New(t, u.Host)
	cut := startLease(t, glintEtcd(t, proxy.URL), time.Second, time.Now)
	// On a clock that stands still, the revoked lease ends only because etcd
	// says it is gone.
	revoked := startLease(t, glintEtcd(t, endpoint), time.Second, fakeclock.New(time.Now()).Now)
	proxy.Cut()
	ended(t, cut, "a lease cut off from etcd ending")
	if _, err := etcdtest.Client(t, endpoint).Revoke(context.Background(), revoked.session.Lease()); err != nil {
		t.Fatal(err)
	}
	ended(t, revoked, "a lease revoked elsewhere ending")
}

// A lease is held until a TTL after the last keep-alive etcd answered was
// sent. The clock is a fake one moved by hand: moving it on by more than a
// TTL is what a process that was stopped (SIGSTOP) sees when it runs again
// — the monotonic clock ran on meanwhile.
func TestALeaseIsHeldUntilATTLAfterItsLastAnsweredKeepAliveWasSent(t *testing.T) {
	const ttl = time.Second
	clock := fakeclock.New(time.Now())
	l := startLease(t, glintEtcd(t, etcdtest.Start(t)), ttl, clock.Now)
	if !l.Held() {
		t.Fatal("a lease just granted is not held")
	}
	// Half a TTL on, a keep-alive is sent and answered: the lease is held a
	// TTL past that send, beyond the grant's TTL.
	clock.Advance(ttl / 2)
	tooltest.Eventually(t, "a keep-alive sent half a TTL on answered", func() bool { return l.heldUntil.Load() >= int64(ttl/2+ttl) })
	clock.Advance(3 * ttl / 4)
	if !l.Held() {
		t.Fatal("a lease renewed less than a TTL ago is not held")
	}
	// A pause longer than a TTL: not held from the first look after it,
	// whatever keep-alive was on its way, and the lease ends.
	clock.Advance(2 * ttl)
	if l.Held() {
		t.Fatal("a lease not renewed for a TTL says it is held")
	}
	ended(t, l, "a lease not renewed for a TTL ending")
}

// keepAlivesOnAClock passes a client's lease calls to etcd but moves the
// fake clock on while the first KeepAliveOnce is on its way, and holds
// every later one until its caller gives up.
type keepAlivesOnAClock struct {
	clientv3.Lease
	clock  *fakeclock.Clock
	by     time.Duration
	calls  int
	second chan struct{}
}

func (k *keepAlivesOnAClock) KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	k.calls++
	switch k.calls {
	case 1:
		k.clock.Advance(k.by)
		return k.Lease.KeepAliveOnce(ctx, id)
	case 2:
		close(k.second)
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// A keep-alive counts from when it was sent, not from when its answer came:
// a process stopped while one was on its way (SIGSTOP after the send, the
// answer read after SIGCONT) must not take the late answer for a renewal
// from then on.
func TestAKeepAliveCountsFromWhenItWasSent(t *testing.T) {
	const ttl = time.Second
	clock := fakeclock.New(time.Now())
	cli := glintEtcd(t, etcdtest.Start(t))
	calls := &keepAlivesOnAClock{Lease: cli.Lease, clock: clock, by: 9 * ttl / 10, second: make(chan struct{})}
	cli.Lease = calls
	l := startLease(t, cli, ttl, clock.Now)
	// The second keep-alive is sent once the first one's answer was taken.
	select {
	case <-calls.second:
	case <-time.After(time.Minute):
		t.Fatal("no second keep-alive within a minute")
	}
	clock.Advance(ttl / 5)
	if l.Held() {
		t.Fatal("a TTL after the last answered keep-alive was sent, the lease says it is held")
	}
}
