package master

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/lifecycle"
)

// workerStates lists the listed workers as "port:STATE" in /json's order.
func workerStates(c *cluster) []string {
	var got []string
	for _, w := range c.srv.clusterState().GetWorkers() {
		got = append(got, fmt.Sprintf("%d:%s", w.GetPort(), lifecycle.Name(w.GetState())))
	}
	return got
}

func TestOnlyWorkersWithoutARecentHeartbeatTimeOutAndTheDeadAreCulledInTime(t *testing.T) {
	c := newCluster(t, Config{WorkerTimeout: 60 * time.Second, DeadWorkerPersistence: 2})
	p := newPeer(t)
	ids := map[int32]string{}
	for port := int32(7001); port <= 7004; port++ {
		ids[port] = c.registerWorker(t, p, port, 1, 1024)
		c.clock.Advance(time.Second)
	}
	heartbeat := func(port int32) {
		t.Helper()
		if _, err := c.client.Heartbeat(context.Background(), connect.NewRequest(&masterv1.HeartbeatRequest{WorkerId: ids[port]})); err != nil {
			t.Fatal(err)
		}
	}
	// 7001 and 7003 heartbeat; 7002 and 7004 (the most recently registered)
	// fall silent.
	c.clock.Advance(30 * time.Second)
	heartbeat(7001)
	heartbeat(7003)
	c.clock.Advance(40 * time.Second)
	c.srv.checkWorkerTimeouts(context.Background())
	want := []string{"7001:ALIVE", "7002:DEAD", "7003:ALIVE", "7004:DEAD"}
	if got := workerStates(c); !slices.Equal(got, want) {
		t.Fatalf("after 70s with heartbeats from 7001 and 7003 only: %v, want %v", got, want)
	}

	// DEAD workers stay listed for persistence × timeout after they died.
	heartbeat(7001)
	heartbeat(7003)
	c.clock.Advance(119 * time.Second)
	heartbeat(7001)
	heartbeat(7003)
	c.srv.checkWorkerTimeouts(context.Background())
	if got := workerStates(c); !slices.Equal(got, want) {
		t.Fatalf("119s after they died: %v, want %v", got, want)
	}
	c.clock.Advance(2 * time.Second)
	c.srv.checkWorkerTimeouts(context.Background())
	want = []string{"7001:ALIVE", "7003:ALIVE"}
	if got := workerStates(c); !slices.Equal(got, want) {
		t.Fatalf("121s after they died: %v, want %v", got, want)
	}
	// A culled worker is no longer known: its heartbeat is not answered
	// with "register again".
	_, err := c.client.Heartbeat(context.Background(), connect.NewRequest(&masterv1.HeartbeatRequest{WorkerId: ids[7002]}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("heartbeat from a culled worker: %v, want not_found", err)
	}
}

func TestAWorkerRegisteringWhereADeadOneWasUnlistsIt(t *testing.T) {
	c := newCluster(t, Config{WorkerTimeout: 60 * time.Second})
	p := newPeer(t)
	c.registerWorker(t, p, 7001, 1, 1024)
	c.registerWorker(t, p, 7002, 1, 1024)
	c.clock.Advance(61 * time.Second)
	c.srv.checkWorkerTimeouts(context.Background())
	c.registerWorker(t, p, 7002, 1, 1024)
	want := []string{"7001:DEAD", "7002:ALIVE"}
	if got := workerStates(c); !slices.Equal(got, want) {
		t.Fatalf("after 7002 registered again: %v, want %v", got, want)
	}
}

func TestRosterKeepsRegistrationOrderAcrossCompaction(t *testing.T) {
	r := newRoster()
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	var all []*workerInfo
	for i := range 10 {
		w := &workerInfo{id: fmt.Sprint("w", i), host: "h", port: int32(i)}
		r.add(w)
		all = append(all, w)
	}
	// Bury the first seven and cull them: more than half of the slots are
	// holes, so the roster compacts.
	for _, w := range all[:7] {
		w.state = masterv1.WorkerState_WORKER_STATE_DEAD
		r.bury(w, now)
	}
	r.cull(now.Add(time.Second))
	var got []string
	for w := range r.all() {
		got = append(got, w.id)
	}
	if want := []string{"w7", "w8", "w9"}; !slices.Equal(got, want) || r.len() != 3 || len(r.order) == len(all) {
		t.Fatalf("after culling seven of ten: %v (len %d, %d slots), want %v", got, r.len(), len(r.order), want)
	}
	r.heartbeat(all[7], now)
	if w, _ := r.oldestHeartbeat(); w != all[8] {
		t.Fatalf("oldest heartbeat %s, want w8", w.id)
	}
	for _, w := range all[:7] {
		if _, ok := r.alive(w.id); ok || r.removed(w.id) {
			t.Fatalf("%s still known after it was culled", w.id)
		}
	}
}
