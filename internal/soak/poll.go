package soak

import (
	"context"
	"net/http"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// polled is one master's answers in a round, with its /json.
type polled struct {
	answer MasterAnswer
	json   *MasterJSON
}

// pollMasters asks every master for /readyz and /json at once.
func pollMasters(ctx context.Context, urls []string, token string) []polled {
	out := make([]polled, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		out[i].answer.URL = u
		wg.Go(func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"/readyz", nil)
			if err != nil {
				return
			}
			if resp, err := pollClient.Do(req); err == nil {
				resp.Body.Close()
				out[i].answer.Ready = resp.StatusCode
			}
		})
		wg.Go(func() {
			var s MasterJSON
			if getJSON(ctx, u+"/json", token, &s) == nil {
				out[i].json = &s
			}
		})
	}
	wg.Wait()
	for i := range out {
		if s := out[i].json; s != nil {
			out[i].answer.Status, out[i].answer.Epoch = s.Status, s.Epoch
		}
	}
	return out
}

// etcdReadTimeout bounds a read of the election: a paused member never
// answers, and the others are asked beside it.
const etcdReadTimeout = 500 * time.Millisecond

// elected returns the master etcd has elected — the value of the oldest
// key of the masters' election ("" when there is none) — as the first
// member that answers a linearizable read says; false when none answered.
func elected(ctx context.Context, members []*clientv3.Client) (string, bool) {
	ctx, cancel := context.WithTimeout(ctx, etcdReadTimeout)
	defer cancel()
	type answer struct {
		leader string
		ok     bool
	}
	answers := make(chan answer, len(members))
	for _, m := range members {
		go func() {
			resp, err := m.Get(ctx, etcdPrefix+"/leader/", clientv3.WithPrefix())
			if err != nil {
				answers <- answer{}
				return
			}
			var leader string
			var rev int64 = -1
			for _, kv := range resp.Kvs {
				if rev < 0 || kv.CreateRevision < rev {
					leader, rev = string(kv.Value), kv.CreateRevision
				}
			}
			answers <- answer{leader, true}
		}()
	}
	for range members {
		if a := <-answers; a.ok {
			return a.leader, true
		}
	}
	return "", false
}
