package etcd

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/glint-cluster/glint/internal/etcdtest"
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
