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

// Mailbox delivers messages to one peer in the order they were posted, one at a
// time, off the caller's goroutine: Spark's fire-and-forget send with its per-peer
// ordering. Its goroutine runs only while messages are queued.
type Mailbox struct {
	ctx     context.Context
	mu      sync.Mutex
	queue   []func(context.Context)
	running bool
	idle    sync.Cond
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
	values := context.WithoutCancel(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.queue) >= MaxQueued {
		return
	}
	m.queue = append(m.queue, func(base context.Context) {
		c, cancel := context.WithTimeout(values, sendTimeout)
		defer cancel()
		stop := context.AfterFunc(base, cancel)
		defer stop()
		send(c)
	})
	if !m.running {
		m.running = true
		go m.drain()
	}
}

func (m *Mailbox) drain() {
	for {
		m.mu.Lock()
		if len(m.queue) == 0 || m.ctx.Err() != nil {
			m.queue = nil
			m.running = false
			m.idle.Broadcast()
			m.mu.Unlock()
			return
		}
		next := m.queue[0]
		m.queue = m.queue[1:]
		m.mu.Unlock()
		next(m.ctx)
	}
}

// Wait blocks until every queued message has been delivered or dropped.
func (m *Mailbox) Wait() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for m.running {
		m.idle.Wait()
	}
}
