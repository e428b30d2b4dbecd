// Package etcd is the little of etcd v3 the master's high availability needs
// — leases kept alive, a fenced transaction, a prefix read and leader
// election — spoken to etcd's HTTP/JSON gateway (/v3/…, served on every
// etcd's client port). It replaces go.etcd.io/etcd/client/v3, which links gRPC
// and etcd's protobuf packages into every Glint process, whose package
// initialisation each executor then paid on the launch path. The election is
// etcd's own (its v3election service, the same algorithm as the Go client's
// concurrency.Election), so masters using either interoperate.
package etcd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// answerLimit bounds one answer (or one message of a stream) read from etcd.
const answerLimit = 64 << 20

// Client calls etcd at the first of its endpoints that answers, starting
// with the one that answered last.
type Client struct {
	endpoints []string
	http      *http.Client
	// answered is the index of the endpoint that answered last.
	answered atomic.Int32
}

// New returns a client of the etcd cluster at endpoints (http:// or https://
// URLs of client ports).
func New(endpoints []string) (*Client, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("etcd: no endpoints")
	}
	out := make([]string, len(endpoints))
	for i, e := range endpoints {
		if !strings.HasPrefix(e, "http://") && !strings.HasPrefix(e, "https://") {
			return nil, fmt.Errorf("etcd endpoint %q: want an http:// or https:// URL", e)
		}
		out[i] = strings.TrimSuffix(e, "/")
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	return &Client{endpoints: out, http: &http.Client{Transport: transport}}, nil
}

// Close lets the client's idle connections go.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// StatusError is etcd's refusal of a call: its gRPC code and message.
type StatusError struct {
	Code    int
	Message string
}

func (e *StatusError) Error() string { return fmt.Sprintf("etcd: %s (code %d)", e.Message, e.Code) }

// post sends in as JSON to path at each endpoint in turn until one answers,
// starting with the one that answered last, and returns the answer's body
// for the caller to read and close, and what to call once it is read. A
// refusal by etcd is a *StatusError and not tried elsewhere. When share is
// set and ctx has a deadline, each endpoint gets an equal share of the time
// left for those not tried yet, so a paused member (one that takes the
// connection and never answers) cannot use up a short call — a lease's
// keep-alive — that another member would have answered.
func (c *Client) post(ctx context.Context, path string, in any, share bool) (io.ReadCloser, context.CancelFunc, error) {
	body, err := json.Marshal(in)
	if err != nil {
		return nil, nil, err
	}
	var errs []error
	first := int(c.answered.Load())
	for i := range c.endpoints {
		n := (first + i) % len(c.endpoints)
		attempt, cancel := ctx, context.CancelFunc(func() {})
		if deadline, ok := ctx.Deadline(); ok && share {
			attempt, cancel = context.WithTimeout(ctx, time.Until(deadline)/time.Duration(len(c.endpoints)-i))
		}
		req, err := http.NewRequestWithContext(attempt, http.MethodPost, c.endpoints[n]+path, bytes.NewReader(body))
		if err != nil {
			cancel()
			return nil, nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.http.Do(req)
		if err != nil {
			cancel()
			if ctx.Err() != nil {
				return nil, nil, err
			}
			errs = append(errs, err)
			continue
		}
		c.answered.Store(int32(n))
		if resp.StatusCode != http.StatusOK {
			defer cancel()
			defer resp.Body.Close()
			st := &StatusError{Code: -1}
			b, _ := io.ReadAll(io.LimitReader(resp.Body, answerLimit))
			if json.Unmarshal(b, st) != nil || st.Message == "" {
				st.Message = fmt.Sprintf("%s: %.200q", resp.Status, b)
			}
			return nil, nil, fmt.Errorf("%s: %w", path, st)
		}
		return resp.Body, cancel, nil
	}
	return nil, nil, fmt.Errorf("etcd %s: no endpoint answered: %w", path, errors.Join(errs...))
}

// call posts in and decodes the one answer into out; each endpoint gets its
// share of ctx's time (post).
func (c *Client) call(ctx context.Context, path string, in, out any) error {
	body, done, err := c.post(ctx, path, in, true)
	if err != nil {
		return err
	}
	defer done()
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, answerLimit+1))
	if err != nil {
		return fmt.Errorf("etcd %s: %w", path, err)
	}
	if len(b) > answerLimit {
		return fmt.Errorf("etcd %s: answer over %d bytes", path, answerLimit)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("etcd %s: %w", path, err)
	}
	return nil
}

// stream posts in and decodes each message of the streamed answer (one JSON
// object a line, {"result": …} or {"error": …}) into a new T, passing it to
// each until it returns false or the stream ends.
func stream[T any](ctx context.Context, c *Client, path string, in any, each func(*T) bool) error {
	body, done, err := c.post(ctx, path, in, false)
	if err != nil {
		return err
	}
	defer done()
	defer body.Close()
	lines := bufio.NewScanner(body)
	lines.Buffer(make([]byte, 0, 4096), answerLimit)
	for lines.Scan() {
		var msg struct {
			Result *T           `json:"result"`
			Error  *StatusError `json:"error"`
		}
		if err := json.Unmarshal(lines.Bytes(), &msg); err != nil {
			return fmt.Errorf("etcd %s: %w", path, err)
		}
		if msg.Error != nil {
			return fmt.Errorf("etcd %s: %w", path, msg.Error)
		}
		if msg.Result != nil && !each(msg.Result) {
			return nil
		}
	}
	if err := lines.Err(); err != nil {
		return fmt.Errorf("etcd %s: %w", path, err)
	}
	return fmt.Errorf("etcd %s: the stream ended", path)
}

// Int64 is an int64 as the gateway writes it: a JSON string (or number).
type Int64 int64

func (n Int64) MarshalJSON() ([]byte, error) {
	return []byte(strconv.Quote(strconv.FormatInt(int64(n), 10))), nil
}

func (n *Int64) UnmarshalJSON(b []byte) error {
	v, err := strconv.ParseInt(strings.Trim(string(b), `"`), 10, 64)
	*n = Int64(v)
	return err
}

// KeyValue is a key as etcd keeps it.
type KeyValue struct {
	Key            []byte `json:"key"`
	Value          []byte `json:"value"`
	CreateRevision Int64  `json:"create_revision"`
	ModRevision    Int64  `json:"mod_revision"`
	Lease          Int64  `json:"lease"`
}

// GetPrefix returns every key starting with prefix, in key order.
func (c *Client) GetPrefix(ctx context.Context, prefix string) ([]KeyValue, error) {
	var out struct {
		Kvs []KeyValue `json:"kvs"`
	}
	err := c.call(ctx, "/v3/kv/range", map[string]any{"key": []byte(prefix), "range_end": prefixEnd(prefix)}, &out)
	return out.Kvs, err
}

// prefixEnd is the first key after every key starting with prefix.
func prefixEnd(prefix string) []byte {
	end := []byte(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return []byte{0}
}

// Op is one write of a transaction.
type Op map[string]any

// Put writes key.
func Put(key string, value []byte) Op {
	return Op{"request_put": map[string]any{"key": []byte(key), "value": value}}
}

// Delete removes key.
func Delete(key string) Op {
	return Op{"request_delete_range": map[string]any{"key": []byte(key)}}
}

// IfCreatedAt applies ops only while key exists with the create revision rev
// (its holder has not lost it since), and reports whether they were applied.
func (c *Client) IfCreatedAt(ctx context.Context, key string, rev int64, ops ...Op) (bool, error) {
	var out struct {
		Succeeded bool `json:"succeeded"`
	}
	err := c.call(ctx, "/v3/kv/txn", map[string]any{
		"compare": []map[string]any{{"target": "CREATE", "result": "EQUAL", "key": []byte(key), "create_revision": Int64(rev)}},
		"success": ops,
	}, &out)
	return out.Succeeded, err
}

// LeaseID names a lease.
type LeaseID int64

// Grant makes a lease of ttl (whole seconds).
func (c *Client) Grant(ctx context.Context, ttl time.Duration) (LeaseID, error) {
	var out struct {
		ID    Int64  `json:"ID"`
		Error string `json:"error"`
	}
	if err := c.call(ctx, "/v3/lease/grant", map[string]any{"TTL": Int64(ttl / time.Second)}, &out); err != nil {
		return 0, err
	}
	if out.Error != "" || out.ID == 0 {
		return 0, fmt.Errorf("etcd: grant a lease: %q", out.Error)
	}
	return LeaseID(out.ID), nil
}

// KeepAliveOnce renews a lease and returns its time left; 0 means it is gone.
func (c *Client) KeepAliveOnce(ctx context.Context, id LeaseID) (time.Duration, error) {
	var ttl time.Duration
	err := stream(ctx, c, "/v3/lease/keepalive", map[string]any{"ID": Int64(id)}, func(r *struct {
		TTL Int64 `json:"TTL"`
	}) bool {
		ttl = time.Duration(r.TTL) * time.Second
		return false
	})
	return ttl, err
}

// Revoke ends a lease and deletes the keys attached to it.
func (c *Client) Revoke(ctx context.Context, id LeaseID) error {
	var out struct{}
	return c.call(ctx, "/v3/lease/revoke", map[string]any{"ID": Int64(id)}, &out)
}

// Leader is the key a campaign won.
type Leader struct {
	Name  []byte `json:"name"`
	Key   []byte `json:"key"`
	Rev   Int64  `json:"rev"`
	Lease Int64  `json:"lease"`
}

// Campaign waits until this lease's candidacy for the election name, with
// value, leads, and returns its key; its revision orders the leaders. It
// returns when ctx ends (the candidacy is withdrawn then).
func (c *Client) Campaign(ctx context.Context, name string, lease LeaseID, value string) (Leader, error) {
	var out struct {
		Leader Leader `json:"leader"`
	}
	err := c.call(ctx, "/v3/election/campaign", map[string]any{"name": []byte(name), "lease": Int64(lease), "value": []byte(value)}, &out)
	if err == nil && len(out.Leader.Key) == 0 {
		err = errors.New("etcd: campaign answered without a leader key")
	}
	return out.Leader, err
}

// Resign gives up leadership won as l.
func (c *Client) Resign(ctx context.Context, l Leader) error {
	var out struct{}
	return c.call(ctx, "/v3/election/resign", map[string]any{"leader": l}, &out)
}

// Observe calls seen with the value of each leader of the election name in
// turn, the current one first, until ctx ends or the stream breaks.
func (c *Client) Observe(ctx context.Context, name string, seen func(value string)) error {
	return stream(ctx, c, "/v3/election/observe", map[string]any{"name": []byte(name)}, func(r *struct {
		KV KeyValue `json:"kv"`
	}) bool {
		seen(string(r.KV.Value))
		return true
	})
}
