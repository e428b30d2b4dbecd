package store

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// A Candidate stands for the election of the master that leads the cluster
// (etcd's concurrency election under prefix/leader, held by a Lease), as
// the master at url, and follows who leads while it waits.
type Candidate struct {
	cli    *clientv3.Client
	prefix string
	url    string
	ttl    time.Duration
	log    *slog.Logger

	mu     sync.Mutex
	leader string // the leader's URL, as last seen; "" once elected
}

// NewCandidate returns a candidate for the master at url.
func NewCandidate(cli *clientv3.Client, prefix, url string, ttl time.Duration, log *slog.Logger) *Candidate {
	return &Candidate{cli: cli, prefix: prefix, url: url, ttl: ttl, log: log}
}

// Leader is the leader's URL as the candidate last saw it while it waited;
// "" when not known, or once it was elected.
func (c *Candidate) Leader() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leader
}

func (c *Candidate) setLeader(leader string) {
	c.mu.Lock()
	c.leader = leader
	c.mu.Unlock()
}

// electionRetry is how long a candidate that could not stand for election
// (etcd unreachable, its lease lapsed while waiting) waits to try again.
const electionRetry = time.Second

// Elect stands for election until this master leads, with the lease that
// holds the leadership and the election (its revision is the leader's
// epoch), or ctx ends (its error).
func (c *Candidate) Elect(ctx context.Context) (*Lease, *concurrency.Election, error) {
	for {
		held, err := NewLease(ctx, c.cli, c.ttl)
		if err == nil {
			election := concurrency.NewElection(held.Session(), c.prefix+"/leader")
			if err = c.campaign(held, election); err == nil {
				c.setLeader("")
				return held, election, nil
			}
			// If etcd cannot be told, the lease lapses by itself.
			_ = held.Close()
		}
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		c.log.Warn("cannot stand for election; trying again", "err", err, "in", electionRetry)
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(electionRetry):
		}
	}
}

// campaign waits until election elects this master while held holds,
// keeping the leader's URL meanwhile. Campaign, stopped while etcd cannot be
// reached, resigns with the client's context and waits for etcd: it runs
// aside, so that a candidate stops without it.
func (c *Candidate) campaign(held *Lease, election *concurrency.Election) error {
	observing, stopObserving := context.WithCancel(held.Context())
	defer stopObserving()
	go c.observe(observing, election)
	won := make(chan error, 1)
	go func() { won <- election.Campaign(held.Context(), c.url) }()
	select {
	case err := <-won:
		return err
	case <-held.Context().Done():
		return errors.New("campaign: the lease ended")
	}
}

// observe keeps the leader's URL, following the election again after a
// break until ctx ends.
func (c *Candidate) observe(ctx context.Context, election *concurrency.Election) {
	for ctx.Err() == nil {
		for resp := range election.Observe(ctx) {
			c.setLeader(LeaderURL(resp.Kvs[0].Value))
		}
		select {
		case <-ctx.Done():
		case <-time.After(electionRetry):
		}
	}
}

// maxLeaderURLBytes bounds a leader's URL as read from etcd.
const maxLeaderURLBytes = 1024

// LeaderURL is the value of a leader's election key as a standby shows it
// (callers are told it, /json says it): a URL of a host, not too long, or
// "" (not known) — etcd's bytes are anyone's who can write there.
func LeaderURL(value []byte) string {
	if len(value) > maxLeaderURLBytes {
		return ""
	}
	u, err := url.Parse(string(value))
	if err != nil || u.Host == "" {
		return ""
	}
	return string(value)
}
