package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/protobuf/proto"

	"github.com/glint-cluster/glint/internal/etcdtest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
)

// glintEtcd is the master's client of the etcd at endpoint (NewEtcdClient),
// closed when the test ends.
func glintEtcd(t testing.TB, endpoint string) *clientv3.Client {
	t.Helper()
	cli, err := NewEtcdClient([]string{endpoint})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func TestADeposedLeadersWritesAreRefusedByEtcd(t *testing.T) {
	endpoint := etcdtest.Start(t)
	cli, ours := etcdtest.Client(t, endpoint), glintEtcd(t, endpoint)
	ctx := context.Background()
	elect := func() (*concurrency.Session, *concurrency.Election) {
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(5))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s, concurrency.NewElection(s, "/glint-test/leader")
	}
	first, e1 := elect()
	if err := e1.Campaign(ctx, "http://a"); err != nil {
		t.Fatal(err)
	}
	old := NewEtcdStore(ours, "/glint-test", e1.Key(), e1.Rev())
	if err := old.PutWorker(&masterv1.PersistedWorker{Id: "w1"}); err != nil {
		t.Fatalf("the leader's write: %v", err)
	}
	// The first leader's lease ends (as it would lapse); a second is elected.
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	_, e2 := elect()
	if err := e2.Campaign(ctx, "http://b"); err != nil {
		t.Fatal(err)
	}
	if err := old.PutWorker(&masterv1.PersistedWorker{Id: "w2"}); !errors.Is(err, ErrDeposed) {
		t.Fatalf("the deposed leader's write: %v, want ErrDeposed", err)
	}
	current := NewEtcdStore(ours, "/glint-test", e2.Key(), e2.Rev())
	if err := current.PutApplication(&masterv1.PersistedApplication{Id: "app-20261130120000-0000"}); err != nil {
		t.Fatal(err)
	}
	rec, err := current.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Workers) != 1 || rec.Workers[0].GetId() != "w1" || len(rec.Applications) != 1 {
		t.Fatalf("kept %v, want worker w1 and the application", rec)
	}
}

// The state is read back from etcd in one answer, bounded: records that
// together pass maxEtcdAnswerBytes are refused, not read into memory.
func TestAStateOverTheAnswerBoundIsRefused(t *testing.T) {
	endpoint := etcdtest.Start(t)
	raw := etcdtest.Client(t, endpoint)
	// etcd takes requests of up to 1.5 MiB: records of 1 MiB each.
	record, err := proto.Marshal(&masterv1.PersistedApplication{DriverUrl: strings.Repeat("x", 1<<20)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range maxEtcdAnswerBytes/len(record) + 1 {
		if _, err := raw.Put(context.Background(), fmt.Sprintf("/glint-test/state/applications/app-%d", i), string(record)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := NewEtcdStore(glintEtcd(t, endpoint), "/glint-test", "/glint-test/leader/x", 1).Load(); err == nil || !strings.Contains(err.Error(), "larger than max") {
		t.Fatalf("loading a state of over %d bytes: %v, want it refused", maxEtcdAnswerBytes, err)
	}
}

// BenchmarkEtcdStateWritePerLaunch is what --recovery-mode etcd adds to one
// executor launch: one fenced transaction on a real (embedded, one-member) etcd.
func BenchmarkEtcdStateWritePerLaunch(b *testing.B) {
	endpoint := etcdtest.Start(b)
	s, err := concurrency.NewSession(etcdtest.Client(b, endpoint))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	e := concurrency.NewElection(s, "/glint-bench/leader")
	if err := e.Campaign(context.Background(), "http://a"); err != nil {
		b.Fatal(err)
	}
	st := NewEtcdStore(glintEtcd(b, endpoint), "/glint-bench", e.Key(), e.Rev())
	p := &masterv1.PersistedApplication{Id: "app-20261130120000-0000", Description: &masterv1.ApplicationDescription{Name: "bench", CoresPerExecutor: proto.Int32(1), MemoryPerExecutorMib: 512}, DriverUrl: "http://127.0.0.1:1", AppToken: "t"}
	for b.Loop() {
		p.NextExecutorId++
		if err := st.PutApplication(p); err != nil {
			b.Fatal(err)
		}
	}
}
