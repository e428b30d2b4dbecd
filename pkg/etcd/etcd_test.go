package etcd

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/glint-cluster/glint/internal/etcdtest"
	"github.com/glint-cluster/glint/internal/fakeclock"
	"github.com/glint-cluster/glint/internal/faultproxy"
)

func newClient(t *testing.T, endpoints ...string) *Client {
	t.Helper()
	c, err := New(endpoints)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func newSession(t *testing.T, c *Client, ttl time.Duration) *Session {
	t.Helper()
	s, err := NewSession(context.Background(), c, ttl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// within fails t unless ch is closed within d (a generous bound: the tests
// wait on the event, the bound only ends a hung test).
func within(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s: not within %s", what, d)
	}
}

func TestWritesHoldOnlyWhileTheGuardKeyHasItsRevisionAndReadsTakeThePrefix(t *testing.T) {
	c := newClient(t, etcdtest.Start(t))
	ctx := context.Background()
	s := newSession(t, c, 5*time.Second)
	won, err := c.Campaign(ctx, "/t/leader", s.Lease(), "http://a")
	if err != nil {
		t.Fatal(err)
	}
	for key, value := range map[string]string{"/t/state/a": "1", "/t/state/b": "2", "/t/statf": "outside"} {
		if ok, err := c.IfCreatedAt(ctx, string(won.Key), int64(won.Rev), Put(key, []byte(value))); err != nil || !ok {
			t.Fatalf("put %s while leading: %v %v", key, ok, err)
		}
	}
	if ok, err := c.IfCreatedAt(ctx, string(won.Key), int64(won.Rev), Delete("/t/state/b")); err != nil || !ok {
		t.Fatalf("delete while leading: %v %v", ok, err)
	}
	if ok, err := c.IfCreatedAt(ctx, string(won.Key), int64(won.Rev)+1, Put("/t/state/c", nil)); err != nil || ok {
		t.Fatalf("put under another revision: applied %v (%v), want refused", ok, err)
	}
	kvs, err := c.GetPrefix(ctx, "/t/state/")
	if err != nil {
		t.Fatal(err)
	}
	if len(kvs) != 1 || string(kvs[0].Key) != "/t/state/a" || string(kvs[0].Value) != "1" {
		t.Fatalf("prefix read %+v, want only /t/state/a=1", kvs)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.IfCreatedAt(ctx, string(won.Key), int64(won.Rev), Put("/t/state/d", nil)); err != nil || ok {
		t.Fatalf("put after the leader's lease was revoked: applied %v (%v), want refused", ok, err)
	}
}

func TestPrefixEnd(t *testing.T) {
	for prefix, want := range map[string]string{"/a/": "/a0", "a\xff": "b", "\xff\xff": "\x00"} {
		if got := string(prefixEnd(prefix)); got != want {
			t.Errorf("prefixEnd(%q) = %q, want %q", prefix, got, want)
		}
	}
}

func TestTheElectionHasOneLeaderAtATimeInTurnAndIsObserved(t *testing.T) {
	c := newClient(t, etcdtest.Start(t))
	ctx := context.Background()
	first, second := newSession(t, c, 5*time.Second), newSession(t, c, 5*time.Second)
	leaders := make(chan string, 4)
	observing, stop := context.WithCancel(ctx)
	defer stop()
	go c.Observe(observing, "/t/leader", func(v string) { leaders <- v })

	won1, err := c.Campaign(ctx, "/t/leader", first.Lease(), "http://first")
	if err != nil {
		t.Fatal(err)
	}
	if got := <-leaders; got != "http://first" {
		t.Fatalf("observed %q, want http://first", got)
	}
	elected := make(chan Leader, 1)
	go func() {
		won2, err := c.Campaign(ctx, "/t/leader", second.Lease(), "http://second")
		if err != nil {
			t.Error(err)
		}
		elected <- won2
	}()
	// The second candidate waits while the first leads.
	select {
	case <-elected:
		t.Fatal("a second leader was elected while the first held its lease")
	case <-time.After(200 * time.Millisecond):
	}
	if err := c.Resign(ctx, won1); err != nil {
		t.Fatal(err)
	}
	var won2 Leader
	select {
	case won2 = <-elected:
	case <-time.After(time.Minute):
		t.Fatal("the second candidate was not elected within a minute of the first resigning")
	}
	if won2.Rev <= won1.Rev {
		t.Errorf("the second leader's revision %d is not after the first's %d", won2.Rev, won1.Rev)
	}
	if got := <-leaders; got != "http://second" {
		t.Fatalf("observed %q, want http://second", got)
	}
}

func TestASessionEndsWhenItsLeaseCannotBeRenewedForATTLOrIsGone(t *testing.T) {
	endpoint := etcdtest.Start(t)
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	proxy := faultproxy.New(t, u.Host)
	cut := newSession(t, newClient(t, proxy.URL), time.Second)
	revoked := newSession(t, newClient(t, endpoint), time.Second)
	proxy.Cut()
	within(t, cut.Done(), time.Minute, "a session cut off from etcd ending")
	if err := newClient(t, endpoint).Revoke(context.Background(), revoked.Lease()); err != nil {
		t.Fatal(err)
	}
	within(t, revoked.Done(), time.Minute, "a session whose lease was revoked elsewhere ending")
	if cut.Held() || revoked.Held() {
		t.Fatal("an ended session says its lease is held")
	}
}

// A session's lease is held until a TTL after the last keep-alive etcd
// answered was sent. The clock is a fake one moved by hand: moving it on
// by more than a TTL is what a process that was stopped (SIGSTOP) sees
// when it runs again — the monotonic clock ran on meanwhile.
func TestASessionIsHeldUntilATTLAfterItsLastAnsweredKeepAliveWasSent(t *testing.T) {
	const ttl = time.Second
	clock := fakeclock.New(time.Now())
	s, err := newSessionOnClock(context.Background(), newClient(t, etcdtest.Start(t)), ttl, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if !s.Held() {
		t.Fatal("a session just granted is not held")
	}
	// Half a TTL on, a keep-alive is sent and answered: the lease is held a
	// TTL past that send, beyond the grant's TTL.
	clock.Advance(ttl / 2)
	waitFor(t, "a keep-alive sent half a TTL on answered", func() bool { return s.heldUntil.Load() >= int64(ttl/2+ttl) })
	clock.Advance(3 * ttl / 4)
	if !s.Held() {
		t.Fatal("a session renewed less than a TTL ago is not held")
	}
	// A pause longer than a TTL: not held from the first look after it,
	// whatever keep-alive was on its way, and the session ends.
	clock.Advance(2 * ttl)
	if s.Held() {
		t.Fatal("a session not renewed for a TTL says its lease is held")
	}
	within(t, s.Done(), time.Minute, "a session not renewed for a TTL ending")
	if s.Held() {
		t.Fatal("an ended session says its lease is held")
	}
}

// A keep-alive counts from when it was sent, not from when its answer came:
// a process stopped while one was on its way (SIGSTOP after the send, the
// answer read after SIGCONT) must not take the late answer for a renewal
// from then on. A proxy in front of etcd moves the fake clock on while the
// first keep-alive is on its way, and holds every later one.
func TestAKeepAliveCountsFromWhenItWasSent(t *testing.T) {
	const ttl = time.Second
	clock := fakeclock.New(time.Now())
	target, err := url.Parse(etcdtest.Start(t))
	if err != nil {
		t.Fatal(err)
	}
	forward := httputil.NewSingleHostReverseProxy(target)
	forward.FlushInterval = -1 // the keep-alive's answer is a stream
	var keepAlives atomic.Int32
	second, stop := make(chan struct{}), make(chan struct{})
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v3/lease/keepalive" {
			switch keepAlives.Add(1) {
			case 1:
				clock.Advance(9 * ttl / 10)
			case 2:
				close(second)
				fallthrough
			default:
				select {
				case <-r.Context().Done():
				case <-stop:
				}
				return
			}
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { close(stop); proxy.Close() })
	s, err := newSessionOnClock(context.Background(), newClient(t, proxy.URL), ttl, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	// The second keep-alive is sent once the first one's answer was taken.
	within(t, second, time.Minute, "a second keep-alive")
	clock.Advance(ttl / 5)
	if s.Held() {
		t.Fatal("a TTL after the last answered keep-alive was sent, the session says its lease is held")
	}
}

// waitFor polls cond until it holds (a generous bound ends a hung test).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestAnUnreachableEndpointIsPassedAndARefusalIsEtcds(t *testing.T) {
	endpoint := etcdtest.Start(t)
	c := newClient(t, "http://127.0.0.1:1", endpoint)
	if _, err := c.GetPrefix(context.Background(), "/x/"); err != nil {
		t.Fatalf("with the second endpoint up: %v", err)
	}
	var refused *StatusError
	if err := c.Revoke(context.Background(), 12345); !errors.As(err, &refused) || !strings.Contains(refused.Message, "lease not found") {
		t.Fatalf("revoking an unknown lease: %v, want etcd's refusal", err)
	}
	if _, err := newClient(t, "http://127.0.0.1:1").GetPrefix(context.Background(), "/x/"); err == nil {
		t.Fatal("no endpoint up, and no error")
	}
	if _, err := New([]string{"etcd-0:2379"}); err == nil {
		t.Fatal("an endpoint without a scheme was accepted")
	}
}

// A paused member takes connections and never answers. Listed first, it
// gets only its share of a call's time, so a short call — a lease's
// keep-alive — still reaches the member that answers; and the next call
// starts with that member.
func TestAPausedMemberDoesNotUseUpAShortCall(t *testing.T) {
	paused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { paused.Close() })
	c := newClient(t, "http://"+paused.Addr().String(), etcdtest.Start(t))
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := c.Grant(ctx, 10*time.Second)
		cancel()
		if err != nil {
			t.Fatalf("grant %d with the first member paused: %v", i, err)
		}
	}
	if got := c.answered.Load(); got != 1 {
		t.Fatalf("the next call starts at endpoint %d, want 1, the one that answered", got)
	}
}
