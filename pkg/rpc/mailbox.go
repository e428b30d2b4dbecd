package rpc

import (
	"context"
	"sync"
	"time"
)

// sendTimeout bounds each message a Mailbox delivers.
const sendTimeout = 10 * time.Second

// MaxQueued bounds the messages a Mailbox holds for its peer. A peer that
// falls this far behind — each undelivered message waits up to sendTimeout
// — is hopeless; newer messages are dropped, as Spark's sends to a dead
// endpoint are, rather than let one peer grow the sender without limit.
const MaxQueued = 4096

// MaxAlongside bounds the messages posted with PostAlongside that a Mailbox
// has on their way to its peer at once.
const MaxAlongside = 32

// Mailbox delivers messages to one peer in the order they were posted, one at a
// time, off the caller's goroutine: Spark's fire-and-forget send with its per-peer
// ordering. Messages posted with PostAlongside one after another are the
// exception: they go together. Its goroutines run only while messages are
// queued or on their way.
type Mailbox struct {
	ctx   context.Context
	mu    sync.Mutex
	queue []message
	// sending is how many messages are on their way; alongside, whether
	// they were posted with PostAlongside.
	sending   int
	alongside bool
	idle      sync.Cond
}

type message struct {
	send      func(context.Context)
	alongside bool
}

// NewMailbox returns a mailbox whose deliveries stop when ctx is done.
func NewMailbox(ctx context.Context) *Mailbox {
	m := &Mailbox{ctx: ctx}
	m.idle.L = &m.mu
	return m
}

// Post queues send; it runs with a context that carries ctx's values (trace
// context) but the mailbox's cancellation and a per-message timeout. A full
// mailbox (MaxQueued) drops it.
func (m *Mailbox) Post(ctx context.Context, send func(context.Context)) {
	m.post(ctx, send, false)
}

// PostAlongside is Post for a message that does not depend on the others
// posted with PostAlongside around it (launches of different executors):
// it waits for the messages posted before it, but not for those of them on
// their way that were posted with PostAlongside, up to MaxAlongside at
// once. A worker given one launch at a time received an application's
// executors' launches a round trip apart, each waiting for the one before.
func (m *Mailbox) PostAlongside(ctx context.Context, send func(context.Context)) {
	m.post(ctx, send, true)
}

func (m *Mailbox) post(ctx context.Context, send func(context.Context), alongside bool) {
	values := context.WithoutCancel(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.queue) >= MaxQueued {
		return
	}
	m.queue = append(m.queue, message{alongside: alongside, send: func(base context.Context) {
		c, cancel := context.WithTimeout(values, sendTimeout)
		defer cancel()
		stop := context.AfterFunc(base, cancel)
		defer stop()
		send(c)
	}})
	if next, ok := m.startLocked(); ok {
		go m.deliver(next)
	}
}

// startLocked takes the queued messages that may go now off the queue: the
// first for the caller to deliver, the others on goroutines of their own.
func (m *Mailbox) startLocked() (first message, ok bool) {
	if m.ctx.Err() != nil {
		m.queue = nil
	}
	for len(m.queue) > 0 {
		next := m.queue[0]
		if m.sending > 0 && (!next.alongside || !m.alongside || m.sending >= MaxAlongside) {
			break
		}
		m.queue = m.queue[1:]
		m.sending++
		m.alongside = next.alongside
		if !ok {
			first, ok = next, true
		} else {
			go m.deliver(next)
		}
	}
	return first, ok
}

// deliver sends msg, then the next messages it may, until none may go.
func (m *Mailbox) deliver(msg message) {
	for {
		msg.send(m.ctx)
		m.mu.Lock()
		m.sending--
		next, ok := m.startLocked()
		if m.sending == 0 {
			m.idle.Broadcast()
		}
		m.mu.Unlock()
		if !ok {
			return
		}
		msg = next
	}
}

// Wait blocks until every queued message has been delivered or dropped.
func (m *Mailbox) Wait() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for m.sending > 0 {
		m.idle.Wait()
	}
}
