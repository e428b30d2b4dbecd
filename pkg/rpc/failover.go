package rpc

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// failoverAttempt bounds a call to a master that is not the last to try: a
// paused or partitioned one accepts the connection and never answers.
const failoverAttempt = 5 * time.Second

// NewFailoverHTTPClient is NewHTTPClient for a list of masters of which one
// leads: a call goes to the master its URL names (a Connect client made
// with one of urls: the first, or the one known to lead), then, if that
// master cannot be reached, does not answer within failoverAttempt, or
// answers Unavailable (HTTP 503: a standby, whatever token the call
// carries; a leader that cannot confirm its lease; a master recovering),
// the same call goes to each other master in urls' order. The last answer
// stands, to be retried by the caller as it sees fit; any other answer
// (Unauthenticated from a master that leads) is final.
func NewFailoverHTTPClient(urls []string) (*http.Client, error) {
	c := NewHTTPClient()
	f := &failover{base: c.Transport}
	for _, u := range urls {
		p, err := url.Parse(u)
		if err != nil {
			return nil, fmt.Errorf("master %q: %w", u, err)
		}
		f.targets = append(f.targets, p)
	}
	c.Transport = f
	return c, nil
}

type failover struct {
	base    http.RoundTripper
	targets []*url.URL
}

func (f *failover) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(io.LimitReader(req.Body, ReadMaxBytes+1))
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	targets := []*url.URL{req.URL}
	for _, t := range f.targets {
		if t.Host != req.URL.Host || t.Scheme != req.URL.Scheme {
			targets = append(targets, t)
		}
	}
	var resp *http.Response
	var err error
	for i, target := range targets {
		last := i == len(targets)-1
		ctx, cancel := req.Context(), context.CancelFunc(func() {})
		if !last {
			ctx, cancel = context.WithTimeout(ctx, failoverAttempt)
		}
		r := req.Clone(ctx)
		r.URL.Scheme, r.URL.Host, r.Host = target.Scheme, target.Host, target.Host
		r.Body = io.NopCloser(bytes.NewReader(body))
		resp, err = f.base.RoundTrip(r)
		switch {
		case err != nil && !last:
			cancel()
			continue
		case err == nil && resp.StatusCode == http.StatusServiceUnavailable && !last:
			resp.Body.Close()
			cancel()
			continue
		case err != nil:
			cancel()
			return nil, err
		}
		resp.Body = cancelOnClose{resp.Body, cancel}
		return resp, nil
	}
	return resp, err
}

// cancelOnClose ends an attempt's context when its answer was read.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error {
	defer c.cancel()
	return c.ReadCloser.Close()
}
