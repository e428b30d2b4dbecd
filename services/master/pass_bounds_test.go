package master

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
)

// TestTheMastersPassAllocatesAsMuchAtAnyClusterSize: the master's schedule
// pass for an application waiting for a worker big enough — the snapshot of
// the alive workers, schedule, the status message — makes as many
// allocations with 3,000 workers as with 100: the snapshot is one slice
// sized once, not grown worker by worker.
func TestTheMastersPassAllocatesAsMuchAtAnyClusterSize(t *testing.T) {
	c := newCluster(t, Config{})
	app := c.registerApp(t, newPeer(t), appDesc(512, 8))
	pass := func() {
		c.srv.mu.Lock()
		c.srv.needSchedule = true
		c.srv.scheduleAndUnlock(context.Background())
	}
	allocs := map[int]float64{}
	for _, n := range []int{100, 3000} {
		c.srv.mu.Lock()
		for i := c.srv.workers.len(); i < n; i++ {
			c.srv.workers.add(newWorkerInfo(fmt.Sprintf("worker-%d", i), "10.0.0.1", int32(i), "http://10.0.0.1:1", 4, 4096, c.clock.Now()))
		}
		c.srv.mu.Unlock()
		allocs[n] = testing.AllocsPerRun(10, pass)
	}
	if math.Abs(allocs[100]-allocs[3000]) > 2 {
		t.Errorf("allocations by workers %v, want equal", allocs)
	}
	if msg := c.app(t, app).GetStatusMessage(); !strings.Contains(msg, "requires more resources than any worker has") {
		t.Errorf("status message %q, want the app told no worker is big enough", msg)
	}
}
