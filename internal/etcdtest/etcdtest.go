// Package etcdtest runs a real etcd server (embedded, one member) for tests,
// on ports of its own, until the test ends.
package etcdtest

import (
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/glint-cluster/glint/internal/tooltest"
)

// Start runs an etcd member in a temporary directory and returns its client
// URL. Its ports come from tooltest.FreePorts: the member must be told its
// peer URL before it starts.
func Start(t testing.TB) string {
	url, _ := StartStoppable(t)
	return url
}

// StartStoppable is Start, with a function that stops the member early (an
// etcd that goes away); it is stopped when the test ends in any case.
func StartStoppable(t testing.TB) (string, func()) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short is the fast loop (make test-short): this test runs an etcd member; make test runs it")
	}
	ports := tooltest.FreePorts(t, 2)
	client := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[0])}
	peer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[1])}
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	cfg.Name = "test"
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	var once sync.Once
	stop := func() { once.Do(e.Close) }
	t.Cleanup(stop)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(time.Minute):
		t.Fatal("etcd did not become ready within a minute")
	}
	return client.String(), stop
}

// Client returns a client of the etcd at endpoint, closed when the test ends.
func Client(t testing.TB, endpoint string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}
