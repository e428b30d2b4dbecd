package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// simulatedWorkers are n workers, each a goroutine of the test that
// registers with a real `glint master` over loopback RPC and heartbeats at
// the interval the master tells it. Nothing serves at their addresses: the
// master calls a worker only to launch something there.
type simulatedWorkers struct {
	master masterv1connect.MasterServiceClient
	ids    []string
	// registered is how long it took until all n were registered.
	registered time.Duration
	beats      atomic.Int64
	// rejoins counts heartbeats answered with "register again": the master
	// had timed the worker out.
	rejoins atomic.Int64
	errs    chan error
	stop    context.CancelFunc
	done    sync.WaitGroup
}

// simulateWorkers registers n workers, 32 at a time, then heartbeats them
// until the test ends.
func simulateWorkers(t testing.TB, masterURL string, n int) *simulatedWorkers {
	t.Helper()
	s := &simulatedWorkers{
		master: masterv1connect.NewMasterServiceClient(rpc.NewHTTPClient(), masterURL, rpc.ClientOptions(nil, testToken)...),
		errs:   make(chan error, n),
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	t.Cleanup(func() { cancel(); s.done.Wait() })
	for i := range n {
		port := 10_000 + i
		s.ids = append(s.ids, fmt.Sprintf("worker-20261130120000-127.0.0.2-%d", port))
	}
	began := time.Now()
	intervals := make([]time.Duration, n)
	var next atomic.Int64
	var registering sync.WaitGroup
	for range 32 {
		registering.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				port := 10_000 + i
				resp, err := s.master.RegisterWorker(ctx, connect.NewRequest(&masterv1.RegisterWorkerRequest{
					WorkerId: s.ids[i], Host: "127.0.0.2", Port: int32(port), Cores: 8, MemoryMib: 16384,
					WorkerUrl: fmt.Sprintf("http://127.0.0.2:%d", port),
				}))
				if err != nil {
					s.errs <- fmt.Errorf("register %s: %w", s.ids[i], err)
					return
				}
				intervals[i] = time.Duration(resp.Msg.GetHeartbeatIntervalMs()) * time.Millisecond
			}
		})
	}
	registering.Wait()
	s.registered = time.Since(began)
	s.checkErrors(t)
	for i, id := range s.ids {
		s.done.Go(func() {
			// Spread the first heartbeats over an interval, as workers that
			// registered over a while would be.
			tick := time.NewTimer(intervals[i] * time.Duration(i) / time.Duration(n))
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				resp, err := s.master.Heartbeat(ctx, connect.NewRequest(&masterv1.HeartbeatRequest{WorkerId: id}))
				switch {
				case ctx.Err() != nil:
					return
				case err != nil:
					s.errs <- fmt.Errorf("heartbeat %s: %w", id, err)
					return
				case resp.Msg.GetReregister():
					s.rejoins.Add(1)
				}
				s.beats.Add(1)
				tick.Reset(intervals[i])
			}
		})
	}
	return s
}

func (s *simulatedWorkers) checkErrors(t testing.TB) {
	t.Helper()
	select {
	case err := <-s.errs:
		t.Fatal(err)
	default:
	}
}

// clusterStateLatencies calls GetClusterState until done is closed and
// returns each call's latency, sorted.
func (s *simulatedWorkers) clusterStateLatencies(t testing.TB, done <-chan struct{}) []time.Duration {
	t.Helper()
	var out []time.Duration
	for {
		select {
		case <-done:
			slices.Sort(out)
			return out
		default:
		}
		began := time.Now()
		resp, err := s.master.GetClusterState(context.Background(), connect.NewRequest(&masterv1.GetClusterStateRequest{}))
		if err != nil {
			t.Fatalf("get cluster state: %v", err)
		}
		out = append(out, time.Since(began))
		if got := len(resp.Msg.GetWorkers()); got != len(s.ids) {
			t.Fatalf("cluster state lists %d workers, want %d", got, len(s.ids))
		}
	}
}

// quantile returns the q-quantile of sorted durations.
func quantile(sorted []time.Duration, q float64) time.Duration {
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// rssMiB reads a process's resident set size.
func rssMiB(t testing.TB, pid int) float64 {
	t.Helper()
	return float64(tooltest.ProcStatusKiB(t, pid, "VmRSS")) / 1024
}

// holdScale registers n simulated workers with a real master, heartbeats them
// for three heartbeat intervals while calling GetClusterState, and checks
// that the master timed none of them out. It returns what it measured.
func holdScale(t testing.TB, n int, timeout time.Duration) (registered, p50, p99 time.Duration, rss float64) {
	t.Helper()
	m := start(t, "master", nil, "master", "--listen", "127.0.0.1:0", "--worker-timeout", timeout.String())
	sim := simulateWorkers(t, m.url, n)
	// Three rounds of heartbeats: each worker's third is its proof.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for sim.beats.Load() < int64(3*n) {
			select {
			case err := <-sim.errs:
				sim.errs <- err
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	latencies := sim.clusterStateLatencies(t, done)
	sim.checkErrors(t)
	if r := sim.rejoins.Load(); r != 0 {
		t.Fatalf("%d heartbeats were answered with 'register again': the master timed workers out", r)
	}
	page := scrape(t, m.url)
	if v, _ := sample(t, page, "glint_master_worker_timeouts_total", nil); v != 0 {
		t.Fatalf("glint_master_worker_timeouts_total = %v, want 0", v)
	}
	if v, _ := sample(t, page, "glint_master_workers", map[string]string{"state": "alive"}); v != float64(n) {
		t.Fatalf("glint_master_workers{state=alive} = %v, want %d", v, n)
	}
	return sim.registered, quantile(latencies, 0.5), quantile(latencies, 0.99), rssMiB(t, m.cmd.Process.Pid)
}

// TestMasterHoldsThousandsOfHeartbeatingWorkers: 2,000 workers register and
// heartbeat over real RPC; none is timed out, and the master keeps answering
// GetClusterState.
func TestMasterHoldsThousandsOfHeartbeatingWorkers(t *testing.T) {
	const n = 2_000
	registered, p50, p99, rss := holdScale(t, n, 20*time.Second)
	t.Logf("%d workers: registered in %s; GetClusterState p50 %s, p99 %s while they heartbeat; master RSS %.1f MiB",
		n, registered.Round(time.Millisecond), p50.Round(time.Microsecond), p99.Round(time.Microsecond), rss)
}

// BenchmarkMasterWith10000Workers reports the time to register 10,000
// workers, GetClusterState latency while they heartbeat, and the master's RSS.
func BenchmarkMasterWith10000Workers(b *testing.B) {
	const n = 10_000
	for b.Loop() {
		registered, p50, p99, rss := holdScale(b, n, 60*time.Second)
		b.ReportMetric(registered.Seconds(), "register-s")
		b.ReportMetric(float64(p50.Microseconds())/1000, "state-p50-ms")
		b.ReportMetric(float64(p99.Microseconds())/1000, "state-p99-ms")
		b.ReportMetric(rss, "rss-MiB")
	}
}
