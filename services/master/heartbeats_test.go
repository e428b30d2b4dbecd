package master

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
)

func TestTheHeartbeatIntervalKeepsTheClusterWithinItsRate(t *testing.T) {
	for _, tt := range []struct {
		name    string
		timeout time.Duration
		rate    float64
		live    int
		want    time.Duration
	}{
		{"a small cluster heartbeats at Spark's quarter", time.Minute, 50, 10, 15 * time.Second},
		{"750 workers at 50 a second still fit the quarter", time.Minute, 50, 750, 15 * time.Second},
		{"751 take two quarters", time.Minute, 50, 751, 30 * time.Second},
		{"10,000 workers: 14 quarters, 47.6 a second", time.Minute, 50, 10_000, 210 * time.Second},
		{"no bound", time.Minute, -1, 10_000, 15 * time.Second},
		{"no worker yet", time.Minute, 50, 0, 15 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := heartbeatInterval(tt.timeout, tt.rate, tt.live)
			if got != tt.want {
				t.Fatalf("heartbeatInterval(%v, %v, %d) = %v, want %v", tt.timeout, tt.rate, tt.live, got, tt.want)
			}
			if tt.rate > 0 && float64(tt.live)/got.Seconds() > tt.rate {
				t.Fatalf("%d workers every %v are %.1f heartbeats a second, over %v", tt.live, got, float64(tt.live)/got.Seconds(), tt.rate)
			}
		})
	}
}

// TestAWorkerToldALongIntervalTimesOutAtFourOfIt registers three workers at
// a master that allows one heartbeat a second with a 4 s worker timeout: the
// nth is told n seconds, and each answer tells the interval of the cluster's
// size then.
func TestAWorkerToldALongIntervalTimesOutAtFourOfIt(t *testing.T) {
	c := newCluster(t, Config{WorkerTimeout: 4 * time.Second, MaxHeartbeatRate: 1})
	p := newPeer(t)
	ids := map[int32]string{}
	for i, port := range []int32{7001, 7002, 7003} {
		id := fmt.Sprintf("worker-20261129140000-127.0.0.1-%d", port)
		resp, err := c.client.RegisterWorker(context.Background(), connect.NewRequest(&masterv1.RegisterWorkerRequest{
			WorkerId: id, Host: "127.0.0.1", Port: port, Cores: 1, MemoryMib: 1024, WorkerUrl: p.url,
		}))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := resp.Msg.GetHeartbeatIntervalMs(), int64(i+1)*1000; got != want {
			t.Fatalf("worker %d of 3 told to heartbeat every %d ms, want %d", i+1, got, want)
		}
		ids[port] = id
	}
	heartbeat := func(port int32, want int64) {
		t.Helper()
		resp, err := c.client.Heartbeat(context.Background(), connect.NewRequest(&masterv1.HeartbeatRequest{WorkerId: ids[port]}))
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Msg.GetHeartbeatIntervalMs(); got != want {
			t.Fatalf("heartbeat of %d answered with %d ms, want %d", port, got, want)
		}
	}
	if st := statusJSON(c.srv.clusterState(), c.clock.Now()); st.WorkerTimeout != 12_000 || st.HeartbeatInterval != 3000 {
		t.Fatalf("/json: workertimeout %d ms, heartbeatinterval %d ms; want 12000 and 3000", st.WorkerTimeout, st.HeartbeatInterval)
	}

	// Past the configured 4 s, no worker is late: 7003 was told 3 s.
	c.clock.Advance(5 * time.Second)
	c.srv.checkWorkerTimeouts(context.Background())
	if got, want := workerStates(c), []string{"7001:ALIVE", "7002:ALIVE", "7003:ALIVE"}; !slices.Equal(got, want) {
		t.Fatalf("5 s after registering: %v, want %v", got, want)
	}
	heartbeat(7001, 3000)
	heartbeat(7002, 3000)
	// 7003 is DEAD within four of its intervals.
	c.clock.Advance(7*time.Second + time.Millisecond)
	c.srv.checkWorkerTimeouts(context.Background())
	if got, want := workerStates(c), []string{"7001:ALIVE", "7002:ALIVE", "7003:DEAD"}; !slices.Equal(got, want) {
		t.Fatalf("12.001 s after 7003's last heartbeat: %v, want %v", got, want)
	}

	// Two live workers are told 2 s; 7002, told 3 s before, keeps its 12 s.
	heartbeat(7001, 2000)
	c.clock.Advance(4 * time.Second)
	c.srv.checkWorkerTimeouts(context.Background())
	if got, want := workerStates(c), []string{"7001:ALIVE", "7002:ALIVE", "7003:DEAD"}; !slices.Equal(got, want) {
		t.Fatalf("11.001 s after the heartbeat of 7002, told 3 s: %v, want %v", got, want)
	}
	heartbeat(7002, 2000)
	if st := statusJSON(c.srv.clusterState(), c.clock.Now()); st.WorkerTimeout != 8000 {
		t.Fatalf("/json once every live worker was told 2 s: workertimeout %d ms, want 8000", st.WorkerTimeout)
	}
}
