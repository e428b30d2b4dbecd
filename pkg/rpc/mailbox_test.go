package rpc

import (
	"context"
	"sync/atomic"
	"testing"
)

func TestAMailboxForAPeerThatDoesNotAnswerHoldsAtMostMaxQueued(t *testing.T) {
	m := NewMailbox(context.Background())
	stuck := make(chan struct{})
	var delivered atomic.Int64
	for range MaxQueued + 100 {
		m.Post(context.Background(), func(context.Context) {
			<-stuck
			delivered.Add(1)
		})
	}
	m.mu.Lock()
	queued := len(m.queue)
	m.mu.Unlock()
	// One message may be on its way already, out of the queue.
	if queued > MaxQueued {
		t.Fatalf("%d messages queued for a peer that does not answer, want at most %d", queued, MaxQueued)
	}
	close(stuck)
	m.Wait()
	if got := delivered.Load(); got < MaxQueued || got > MaxQueued+1 {
		t.Fatalf("%d messages delivered once the peer answered, want the %d it kept", got, MaxQueued)
	}
}
