package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/pflag"
)

// defaultRetryTimeout is how long a client command retries a call to the
// masters that failed for a reason that passes (--retry-timeout): as long as
// a master's recovery after a restart can take, which is one worker timeout
// (the master's --worker-timeout, 60 s by default), and longer than a
// standby's election (an etcd lease, 10 s by default).
const defaultRetryTimeout = 60 * time.Second

const (
	// retryFirst is the wait after a call's first failure; each wait after
	// doubles, up to retryMax. Each is drawn from its upper half at random,
	// so that clients that failed together do not come back together.
	retryFirst = 100 * time.Millisecond
	retryMax   = 2 * time.Second
	// attemptPerMaster bounds one try of a call, per master of the list:
	// rpc's failover client gives each master but the last this long, and
	// a stopped master as the last would otherwise hold the try forever.
	attemptPerMaster = 5 * time.Second
)

// retryFlag registers --retry-timeout on fl.
func retryFlag(fl *pflag.FlagSet, d *time.Duration) {
	fl.DurationVar(d, "retry-timeout", defaultRetryTimeout,
		"how long to retry a call to the masters that failed for a passing reason (no master reachable or answering in time, a standby's "+
			"or a recovering master's unavailable), going through the --master list each time, before giving up; the default is as long "+
			"as a master's recovery after a restart can take: at most its --worker-timeout (60s by default); 0: try once")
}

// retrier retries a client's calls to the masters: a call that failed for a
// reason that passes (retryable) is sent again, after a wait that grows,
// until it succeeds, fails for good, or timeout has passed since it was first
// sent; the last try may take up to attempt more.
type retrier struct {
	timeout time.Duration // 0: each call is sent once
	attempt time.Duration // how long one try may take
	// notify, if set, is told when a call is first retried.
	notify io.Writer
}

// newRetrier retries for timeout the calls to n masters, saying so on notify.
func newRetrier(timeout time.Duration, n int, notify io.Writer) retrier {
	return retrier{timeout: timeout, attempt: time.Duration(n) * attemptPerMaster, notify: notify}
}

// interceptor makes every unary call of a client retried by r.
func (r retrier) interceptor() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			proc := req.Spec().Procedure
			return r.do(ctx, proc[strings.LastIndexByte(proc, '/')+1:], func(ctx context.Context) (connect.AnyResponse, error) {
				return next(ctx, req)
			})
		}
	}
}

// do runs try, named what, as r retries calls.
func (r retrier) do(ctx context.Context, what string, try func(context.Context) (connect.AnyResponse, error)) (connect.AnyResponse, error) {
	began := time.Now()
	deadline := began.Add(r.timeout)
	wait := retryFirst
	for n := 0; ; n++ {
		attemptCtx, cancel := context.WithTimeout(ctx, r.attempt)
		resp, err := try(attemptCtx)
		cancel()
		if err == nil || r.timeout <= 0 || ctx.Value(tryOnceKey{}) != nil || !retryable(ctx, err) {
			return resp, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, fmt.Errorf("tried for %s (--retry-timeout %s), the last time: %w", time.Since(began).Round(100*time.Millisecond), r.timeout, err)
		}
		if n == 0 && r.notify != nil {
			fmt.Fprintf(r.notify, "glint: %s: %v; retrying for up to %s (--retry-timeout)\n", what, err, r.timeout)
		}
		t := time.NewTimer(min(wait/2+rand.N(wait/2+1), left))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w; before that: %w", ctx.Err(), err)
		case <-t.C:
		}
		wait = min(2*wait, retryMax)
	}
}

// tryOnceKey marks a context whose calls are sent once (tryOnce).
type tryOnceKey struct{}

// tryOnce returns ctx for calls the retrier sends only once: those whose
// failure costs nothing but a detail shown.
func tryOnce(ctx context.Context) context.Context { return context.WithValue(ctx, tryOnceKey{}, true) }

// retryable says whether a call that failed with err, ctx still running, may
// succeed if sent again: no master could be reached or answered in time, the
// connection broke under it, or the master that answered does not lead (a
// standby, a master recovering its state or deposed: Unavailable). Real
// refusals — InvalidArgument, NotFound, Unauthenticated, PermissionDenied,
// FailedPrecondition, ResourceExhausted and the rest — are final.
func retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeAborted, connect.CodeCanceled:
		return true
	}
	var ne net.Error
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.As(err, &ne)
}
