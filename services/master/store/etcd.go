package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
)

const (
	// etcdTimeout bounds one store operation.
	etcdTimeout = 10 * time.Second
	// etcdDialTimeout bounds a connection to one etcd member.
	etcdDialTimeout = 5 * time.Second
	// etcdPingInterval is how long a connection to an etcd member may be
	// silent before it is pinged, and etcdPingTimeout how long the ping
	// may take before the connection is dropped for another member's: a
	// paused member takes requests and never answers.
	etcdPingInterval = 2 * time.Second
	etcdPingTimeout  = time.Second
	// maxEtcdAnswerBytes bounds one answer read from etcd (the whole state,
	// loaded at once); each record is bounded again before it is parsed.
	maxEtcdAnswerBytes = 64 << 20
)

// NewEtcdClient returns a client of the etcd cluster at endpoints (http://
// or https:// URLs of client ports; https is checked against the system's
// roots) for HA and EtcdStore. It connects in the background: a member that
// is away is tried again, and calls wait for one that answers.
func NewEtcdClient(endpoints []string) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          etcdDialTimeout,
		DialKeepAliveTime:    etcdPingInterval,
		DialKeepAliveTimeout: etcdPingTimeout,
		MaxCallRecvMsgSize:   maxEtcdAnswerBytes,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd %v: %w", endpoints, err)
	}
	return cli, nil
}

// ErrDeposed says a write was refused because the writer no longer leads.
var ErrDeposed = errors.New("this master no longer leads (its election key is gone)")

// EtcdStore keeps the master's state in etcd under a prefix (--recovery-mode
// etcd). Every write is a transaction that holds only while the writer's
// election key still exists with the revision it won with, so a deposed
// leader — paused, partitioned, not yet aware — cannot change the state.
type EtcdStore struct {
	cli       *clientv3.Client
	prefix    string
	leaderKey string
	leaderRev int64
}

var _ Store = (*EtcdStore)(nil)

// NewEtcdStore keeps state under prefix, fenced by the election key
// leaderKey created at leaderRev.
func NewEtcdStore(cli *clientv3.Client, prefix, leaderKey string, leaderRev int64) *EtcdStore {
	return &EtcdStore{cli: cli, prefix: strings.TrimSuffix(prefix, "/") + "/state/", leaderKey: leaderKey, leaderRev: leaderRev}
}

// Load reads every record back.
func (e *EtcdStore) Load() (*Recovered, error) {
	ctx, cancel := context.WithTimeout(context.Background(), etcdTimeout)
	defer cancel()
	resp, err := e.cli.Get(ctx, e.prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("load state from etcd: %w", err)
	}
	r := &Recovered{Counters: &masterv1.PersistedCounters{}}
	for _, kv := range resp.Kvs {
		kind, _, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), e.prefix), "/")
		var err error
		switch kind {
		case "workers":
			err = appendRecord(kv.Value, &r.Workers)
		case "applications":
			err = appendRecord(kv.Value, &r.Applications)
		case "drivers":
			err = appendRecord(kv.Value, &r.Drivers)
		case "counters":
			err = loadOne(kv.Value, r.Counters)
		}
		if err != nil {
			return nil, fmt.Errorf("load state from etcd: record %q: %w", kv.Key, err)
		}
	}
	return r, nil
}

func appendRecord[T any, P interface {
	*T
	proto.Message
}](v []byte, out *[]P) error {
	m := P(new(T))
	if err := loadOne(v, m); err != nil {
		return err
	}
	*out = append(*out, m)
	return nil
}

// commit applies op if the writer still leads.
func (e *EtcdStore) commit(op clientv3.Op) error {
	ctx, cancel := context.WithTimeout(context.Background(), etcdTimeout)
	defer cancel()
	resp, err := e.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(e.leaderKey), "=", e.leaderRev)).Then(op).Commit()
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	if !resp.Succeeded {
		return ErrDeposed
	}
	return nil
}

func (e *EtcdStore) put(kind, id string, m proto.Message) error {
	v, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	return e.commit(clientv3.OpPut(e.prefix+kind+"/"+id, string(v)))
}

func (e *EtcdStore) delete(kind, id string) error {
	return e.commit(clientv3.OpDelete(e.prefix + kind + "/" + id))
}

func (e *EtcdStore) PutWorker(w *masterv1.PersistedWorker) error {
	return e.put("workers", w.GetId(), w)
}
func (e *EtcdStore) DeleteWorker(id string) error { return e.delete("workers", id) }
func (e *EtcdStore) PutApplication(a *masterv1.PersistedApplication) error {
	return e.put("applications", a.GetId(), a)
}
func (e *EtcdStore) DeleteApplication(id string) error { return e.delete("applications", id) }
func (e *EtcdStore) PutDriver(d *masterv1.PersistedDriver) error {
	return e.put("drivers", d.GetId(), d)
}
func (e *EtcdStore) DeleteDriver(id string) error { return e.delete("drivers", id) }
func (e *EtcdStore) PutCounters(c *masterv1.PersistedCounters) error {
	return e.put("counters", "counters", c)
}

// Close does nothing: the client belongs to whoever made the store.
func (e *EtcdStore) Close() error { return nil }
