package rpc

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/glint-cluster/glint/internal/tooltest"
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

// flight records the messages of a test on their way at once.
type flight struct {
	mu       sync.Mutex
	now, max int
	ended    map[string]bool
}

// send is a message named name that waits for release (nil: none), and
// checks that the messages named in after ended before it began.
func (f *flight) send(t *testing.T, name string, release <-chan struct{}, after ...string) func(context.Context) {
	return func(context.Context) {
		f.mu.Lock()
		for _, a := range after {
			if !f.ended[a] {
				t.Errorf("%s began before %s ended", name, a)
			}
		}
		f.now++
		f.max = max(f.max, f.now)
		f.mu.Unlock()
		if release != nil {
			<-release
		}
		f.mu.Lock()
		f.now--
		f.ended[name] = true
		f.mu.Unlock()
	}
}

func (f *flight) maxInFlight() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.max
}

func newFlight() *flight { return &flight{ended: map[string]bool{}} }

func TestMessagesPostedAlongsideGoTogetherUpToMaxAlongside(t *testing.T) {
	m := NewMailbox(context.Background())
	f := newFlight()
	release := make(chan struct{})
	for i := range MaxAlongside + 1 {
		m.PostAlongside(context.Background(), f.send(t, fmt.Sprint("launch ", i), release))
	}
	tooltest.Eventually(t, "MaxAlongside messages on their way at once", func() bool { return f.maxInFlight() >= MaxAlongside })
	close(release)
	m.Wait()
	if got := f.maxInFlight(); got != MaxAlongside {
		t.Fatalf("%d messages on their way at once, want at most MaxAlongside (%d)", got, MaxAlongside)
	}
}

func TestAMessagePostedInOrderWaitsForTheMessagesAlongsideBeforeIt(t *testing.T) {
	m := NewMailbox(context.Background())
	f := newFlight()
	first, second := make(chan struct{}), make(chan struct{})
	m.PostAlongside(context.Background(), f.send(t, "launch 0", first))
	m.PostAlongside(context.Background(), f.send(t, "launch 1", second))
	m.Post(context.Background(), f.send(t, "kill", nil, "launch 0", "launch 1"))
	tooltest.Eventually(t, "both launches on their way", func() bool { return f.maxInFlight() == 2 })
	close(first)
	close(second)
	m.Wait()
}

func TestAMessagePostedAlongsideWaitsForTheMessageInOrderBeforeIt(t *testing.T) {
	m := NewMailbox(context.Background())
	f := newFlight()
	release := make(chan struct{})
	m.Post(context.Background(), f.send(t, "finished", release))
	m.PostAlongside(context.Background(), f.send(t, "launch 0", nil, "finished"))
	m.PostAlongside(context.Background(), f.send(t, "launch 1", nil, "finished"))
	close(release)
	m.Wait()
	if got := f.maxInFlight(); got != 1 {
		t.Fatalf("%d messages on their way at once, want one at a time", got)
	}
}

func TestMessagesPostedInOrderGoOneAtATime(t *testing.T) {
	m := NewMailbox(context.Background())
	f := newFlight()
	release := make(chan struct{})
	m.Post(context.Background(), f.send(t, "0", release))
	m.Post(context.Background(), f.send(t, "1", nil, "0"))
	m.Post(context.Background(), f.send(t, "2", nil, "1"))
	close(release)
	m.Wait()
}
