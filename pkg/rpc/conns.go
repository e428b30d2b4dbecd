package rpc

import (
	"container/list"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Bounds on the connections one listener holds. A connection is
// authenticated once one of its requests carried a token the middleware
// accepted (authenticate); until then anyone may have opened it, so it is
// closed after a short idle time, and a new one takes the place of the
// oldest when too many are open.
const (
	// maxConns is the most connections a listener holds open, above the
	// master's 10,000 workers (services/master.MaxWorkers) with their drivers
	// and clients, and maxUnauthConns besides. It is lowered to fit the
	// process's limit of open files (defaultConnLimits). When it is reached,
	// the oldest unauthenticated connection is closed for a new one; with
	// none, the new one is.
	maxConns = 16_384
	// maxUnauthConns is the most unauthenticated connections a listener
	// holds: a new one beyond them closes the oldest.
	maxUnauthConns = 1_024
	// maxUnauthPerAddr is the share of maxUnauthConns one client address
	// (an IPv6 /64) may hold: a new one beyond it closes that address's
	// oldest, so a flood from one address churns only its own.
	maxUnauthPerAddr = maxUnauthConns / 4
	// unauthIdleTimeout is how long an unauthenticated connection may stay
	// idle (no request in flight) before it is closed. Authenticated ones
	// stay for the server's idleTimeout.
	unauthIdleTimeout = 10 * time.Second
	// maxConcurrentStreams bounds the HTTP/2 streams one connection may have
	// open at once; Go's client opens another connection beyond them.
	maxConcurrentStreams = 100
	// reservedFiles are the open files a process keeps for what is not an
	// incoming connection (stores, logs, children's pipes, its own calls),
	// when its file limit is what bounds maxConns.
	reservedFiles = 1_024
)

// connLimits are the bounds of one listener's connections.
type connLimits struct {
	conns, unauth, perAddr int
	unauthIdle             time.Duration
}

// defaultConnLimits are the bounds above, with the total lowered to fit the
// process's limit of open files (Go raised it to the hard limit at start):
// past it the listener could not accept, and every new client would wait.
func defaultConnLimits() connLimits {
	total := maxConns
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Cur < uint64(maxConns)+reservedFiles {
		files := int(lim.Cur)
		total = max(files/2, files-reservedFiles)
	}
	unauth := min(maxUnauthConns, total/2)
	return connLimits{conns: total, unauth: unauth, perAddr: max(1, unauth*maxUnauthPerAddr/maxUnauthConns), unauthIdle: unauthIdleTimeout}
}

// conns tracks a listener's connections and closes those the limits say
// must go. Its admit is the server's ConnContext, its state the server's
// ConnState, and the middleware calls authenticated for a request it let
// through.
type conns struct {
	limits connLimits
	mu     sync.Mutex
	open   map[net.Conn]*conn
	unauth list.List // the unauthenticated connections, oldest first
	byAddr map[netip.Addr]*list.List
}

// conn is one open connection.
type conn struct {
	of   *conns   // the listener's tracker
	c    net.Conn // as the server has it (under TLS, the *tls.Conn)
	raw  net.Conn // what is closed to end it, without a TLS alert that could block
	addr netip.Addr
	// inUnauth and inAddr are its places in the lists of unauthenticated
	// connections; nil once authenticated.
	inUnauth, inAddr *list.Element
	// authed is set once it is authenticated, so that its later calls
	// need not take the lock.
	authed    atomic.Bool
	active    bool
	idleSince time.Time
	idle      *time.Timer
}

func newConns(limits connLimits) *conns {
	return &conns{limits: limits, open: map[net.Conn]*conn{}, byAddr: map[netip.Addr]*list.List{}}
}

type connKey struct{}

// admit is the server's ConnContext: it makes room for c as the limits
// say, closing the connections that must go, and returns ctx carrying c for
// authenticated. With no room, c itself is closed.
func (l *conns) admit(ctx context.Context, c net.Conn) context.Context {
	k := &conn{of: l, c: c, raw: c, addr: clientAddr(c.RemoteAddr()), idleSince: time.Now()}
	if tc, ok := c.(*tls.Conn); ok {
		k.raw = tc.NetConn()
	}
	var closing []*conn
	l.mu.Lock()
	switch same := l.byAddr[k.addr]; {
	case same != nil && same.Len() >= l.limits.perAddr:
		closing = append(closing, l.dropLocked(same.Front().Value.(*conn)))
	case l.unauth.Len() >= l.limits.unauth:
		closing = append(closing, l.dropLocked(l.unauth.Front().Value.(*conn)))
	}
	if len(l.open) >= l.limits.conns {
		if l.unauth.Len() == 0 {
			l.mu.Unlock()
			k.raw.Close()
			return ctx
		}
		closing = append(closing, l.dropLocked(l.unauth.Front().Value.(*conn)))
	}
	l.open[c] = k
	k.inUnauth = l.unauth.PushBack(k)
	same := l.byAddr[k.addr]
	if same == nil {
		same = list.New()
		l.byAddr[k.addr] = same
	}
	k.inAddr = same.PushBack(k)
	k.idle = time.AfterFunc(l.limits.unauthIdle, func() { l.expire(k) })
	l.mu.Unlock()
	for _, v := range closing {
		v.raw.Close()
	}
	return context.WithValue(ctx, connKey{}, k)
}

// state is the server's ConnState: an unauthenticated connection's idle
// time starts when it has no request in flight, and a closed connection is
// forgotten.
func (l *conns) state(c net.Conn, s http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.open[c]
	if k == nil {
		return
	}
	switch s {
	case http.StateActive:
		k.active = true
		k.idle.Stop()
	case http.StateIdle:
		k.active = false
		if k.inUnauth != nil {
			k.idleSince = time.Now()
			k.idle.Reset(l.limits.unauthIdle)
		}
	case http.StateClosed, http.StateHijacked:
		l.dropLocked(k)
	}
}

// expire closes k if it is still unauthenticated and was idle for the
// limit.
func (l *conns) expire(k *conn) {
	l.mu.Lock()
	if l.open[k.c] != k || k.inUnauth == nil || k.active || time.Since(k.idleSince) < l.limits.unauthIdle {
		l.mu.Unlock()
		return
	}
	l.dropLocked(k)
	l.mu.Unlock()
	k.raw.Close()
}

// authenticated marks the connection of a request's ctx authenticated: it
// is no longer closed when idle for a short while, nor to make room.
func authenticated(ctx context.Context) {
	k, ok := ctx.Value(connKey{}).(*conn)
	if !ok || k.authed.Load() {
		return
	}
	k.authed.Store(true)
	l := k.of
	l.mu.Lock()
	defer l.mu.Unlock()
	if k.inUnauth != nil {
		l.leaveUnauthLocked(k)
		k.idle.Stop()
	}
}

// dropLocked forgets k and returns it, for the caller to close if it must.
func (l *conns) dropLocked(k *conn) *conn {
	if l.open[k.c] == k {
		delete(l.open, k.c)
	}
	if k.inUnauth != nil {
		l.leaveUnauthLocked(k)
	}
	k.idle.Stop()
	return k
}

// leaveUnauthLocked takes k out of the lists of unauthenticated connections.
func (l *conns) leaveUnauthLocked(k *conn) {
	l.unauth.Remove(k.inUnauth)
	same := l.byAddr[k.addr]
	same.Remove(k.inAddr)
	if same.Len() == 0 {
		delete(l.byAddr, k.addr)
	}
	k.inUnauth, k.inAddr = nil, nil
}

// clientAddr is the address a connection counts against: its peer's IP
// address, or for IPv6 its /64, which one client usually holds whole.
func clientAddr(a net.Addr) netip.Addr {
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.Addr{}
	}
	ip := tcp.AddrPort().Addr().Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.Addr()
	}
	return ip
}
