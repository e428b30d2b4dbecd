package worker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	"github.com/glint-cluster/glint/pkg/fault"
	"github.com/glint-cluster/glint/services/master"
)

func TestRetryDelayFollowsSparkSchedule(t *testing.T) {
	const base = 10 * time.Second
	tests := []struct {
		name   string
		retry  int
		r      float64
		want   time.Duration
		wantOK bool
	}{
		{"no retry 0: the first attempt is immediate", 0, 0.5, 0, false},
		{"first retry, lowest jitter", 1, 0, 5 * time.Second, true},
		{"first retry, middle jitter", 1, 0.5, 10 * time.Second, true},
		{"first retry, near highest jitter", 1, 0.999, 14990 * time.Millisecond, true},
		{"sixth retry is the last at the base interval", 6, 0.5, 10 * time.Second, true},
		{"seventh retry is prolonged", 7, 0.5, 60 * time.Second, true},
		{"prolonged, lowest jitter", 10, 0, 30 * time.Second, true},
		{"prolonged, near highest jitter", 12, 0.999, 89940 * time.Millisecond, true},
		{"sixteenth retry is the last", 16, 0.5, 60 * time.Second, true},
		{"then the worker gives up", 17, 0.5, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := retryDelay(base, tt.retry, tt.r)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("retryDelay(%v, %d, %v) = %v, %v; want %v, %v", base, tt.retry, tt.r, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestRunGivesUpWhenNoMasterAnswers(t *testing.T) {
	// A reserved port nothing listens on, and nothing will while the test runs.
	nobody := fmt.Sprintf("http://127.0.0.1:%d", tooltest.FreePorts(t, 1)[0])
	w, err := New(Config{
		Masters: []string{nobody}, URL: "http://127.0.0.1:7078", Cores: 1, MemoryMiB: 64, WorkDir: t.TempDir(),
		RegisterInterval: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	err = w.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "all masters are unresponsive after 17 attempts, giving up") ||
		!strings.Contains(err.Error(), nobody) {
		t.Fatalf("Run = %v; want it to give up on %s after 17 attempts", err, nobody)
	}
}

// offsetClock is a clock that can be moved forward.
type offsetClock struct{ offset atomic.Int64 }

func (c *offsetClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

func (c *offsetClock) advance(d time.Duration) { c.offset.Add(int64(d)) }

func TestWorkerRegistersAgainWhenTheMasterForgetsIt(t *testing.T) {
	clock := &offsetClock{}
	c := startCluster(t, clusterConfig{
		master:    master.Config{WorkerTimeout: 2 * time.Second, Now: clock.Now},
		runMaster: true,
	})
	appID := c.registerApp(t, executorCommand(t, "hold", 0), 1)
	c.waitMasterExecutor(t, appID, 0, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)
	running, _ := c.worker.executor(t, appID, 0)

	// An hour without heartbeats as far as the master can tell: it declares
	// the worker DEAD and its executor LOST, then answers the next heartbeat
	// with reregister.
	clock.advance(time.Hour)
	c.waitMasterExecutor(t, appID, 0, masterv1.ExecutorState_EXECUTOR_STATE_LOST)

	// The worker registers again under the same id and reports executor 0,
	// which the master no longer knows: the worker kills it (SPARK-13604).
	e := c.worker.waitFinishedExecutor(t, appID, 0)
	if e.State != "KILLED" || !strings.HasPrefix(e.Message, errUnknownToMaster.Error()) {
		t.Errorf("executor 0 on the worker = %+v; want KILLED as unknown to the master", e)
	}
	assertGone(t, running.PID)
	tooltest.Eventually(t, "the worker ALIVE again under the same id", func() bool {
		w := c.masterWorker(t, c.worker.ID())
		return w != nil && w.GetState() == masterv1.WorkerState_WORKER_STATE_ALIVE
	})
	// And the master schedules onto it again.
	c.waitMasterExecutor(t, appID, 1, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)
}

func TestWaitingApplicationGetsExecutorWhenWorkerRegisters(t *testing.T) {
	// The master schedules the waiting application while it answers the
	// worker's RegisterWorker.
	url := startMaster(t, master.Config{}, false)
	c := &cluster{masterURL: url, master: newMasterClient(t, url), driverURL: startDriverStub(t)}
	appID := c.registerApp(t, executorCommand(t, "hold", 0), 1)
	c.worker = startWorker(t, Config{}, url)
	c.waitMasterExecutor(t, appID, 0, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)
}

func TestCommandsWaitOutARegistrationInFlight(t *testing.T) {
	const masterURL = "http://127.0.0.1:7077"
	tests := []struct {
		name string
		// setup prepares s (its mu held) and returns what ends the
		// registration it may have begun, run while the command waits.
		setup func(s *Server) func()
		// cancelled makes the command give up at once if it waits.
		cancelled bool
		want      error
	}{
		{"from the active master", func(s *Server) func() { s.active = masterURL; return func() {} }, false, nil},
		{"from another master, no registration in flight", func(s *Server) func() { s.active = "http://127.0.0.1:1"; return func() {} },
			false, fault.ErrFailedPrecondition},
		{"before any registration", func(*Server) func() { return func() {} }, false, fault.ErrFailedPrecondition},
		{"registration in flight: the command waits for it", func(s *Server) func() {
			s.registering = make(chan struct{})
			return func() {}
		}, true, context.Canceled},
		{"registration in flight succeeds with that master", func(s *Server) func() {
			s.registering = make(chan struct{})
			return func() { s.endRegistration(masterURL, masterURL, 0, 0) }
		}, false, nil},
		{"registration in flight fails", func(s *Server) func() {
			s.registering = make(chan struct{})
			return func() { s.endRegistration("", "", 0, 0) }
		}, false, fault.ErrFailedPrecondition},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(Config{Masters: []string{masterURL}, URL: "http://127.0.0.1:7078", Cores: 1, MemoryMiB: 64, WorkDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancelled {
				cancel()
			}
			s.mu.Lock()
			end := tt.setup(s)
			done := make(chan error, 1)
			go func() {
				s.mu.Lock()
				defer s.mu.Unlock()
				done <- s.awaitActiveLocked(ctx, masterURL)
			}()
			s.mu.Unlock()
			end()
			if err := <-done; !errors.Is(err, tt.want) && !(err == nil && tt.want == nil) {
				t.Errorf("awaitActiveLocked = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestAWorkerHeartbeatsAtTheIntervalItsMasterTellsItAsTheClusterGrows(t *testing.T) {
	// At 10 heartbeats a second and a 400 ms timeout, one worker heartbeats
	// every 100 ms and three workers every 300 ms.
	var mu sync.Mutex
	var beats []time.Time
	c := startCluster(t, clusterConfig{
		master: master.Config{WorkerTimeout: 400 * time.Millisecond, MaxHeartbeatRate: 10},
		wrapMaster: func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == masterv1connect.MasterServiceHeartbeatProcedure {
					mu.Lock()
					beats = append(beats, time.Now())
					mu.Unlock()
				}
				h.ServeHTTP(w, r)
			})
		},
	})
	heardWithin := func() time.Duration {
		c.worker.mu.Lock()
		defer c.worker.mu.Unlock()
		return c.worker.heardWithin
	}
	if got := heardWithin(); got != 200*time.Millisecond {
		t.Fatalf("alone, the worker counts on its master's answer for %v, want 2 × 100 ms", got)
	}
	for port := int32(9001); port <= 9002; port++ {
		if _, err := c.master.RegisterWorker(context.Background(), connect.NewRequest(&masterv1.RegisterWorkerRequest{
			WorkerId: fmt.Sprintf("worker-20261202000000-127.0.0.1-%d", port), Host: "127.0.0.1", Port: port,
			Cores: 1, MemoryMib: 64, WorkerUrl: "http://127.0.0.1:1",
		})); err != nil {
			t.Fatal(err)
		}
	}
	tooltest.Eventually(t, "the worker heartbeats every 300 ms", func() bool { return heardWithin() == 600*time.Millisecond })
	// Its ticker follows: the next heartbeats come 300 ms apart, not 100.
	mu.Lock()
	told := len(beats)
	mu.Unlock()
	tooltest.Eventually(t, "two more heartbeats", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(beats) >= told+2
	})
	mu.Lock()
	defer mu.Unlock()
	if gap := beats[told+1].Sub(beats[told]); gap < 250*time.Millisecond {
		t.Fatalf("the worker told 300 ms heartbeated %v after its previous heartbeat", gap)
	}
}

func TestTheIntervalAMasterNamesIsBounded(t *testing.T) {
	for ms, want := range map[int64]time.Duration{
		0: defaultHeartbeatInterval, -5: defaultHeartbeatInterval, 1: minHeartbeatInterval, 250: 250 * time.Millisecond,
		210_000: 210 * time.Second, math.MaxInt64: maxHeartbeatInterval,
	} {
		if got := heartbeatInterval(ms); got != want {
			t.Errorf("heartbeatInterval(%d) = %v, want %v", ms, got, want)
		}
	}
}
