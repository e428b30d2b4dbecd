package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/protobuf/proto"

	"github.com/glint-cluster/glint/internal/benchtable"
	"github.com/glint-cluster/glint/internal/floor"
	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	"github.com/glint-cluster/glint/pkg/ids"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// sparkHeartbeatInterval is how often workers heartbeat at the default
// --worker-timeout (60 s) in a cluster too small for the master's
// --max-heartbeat-rate to bind: the deadline of the busy rounds.
const sparkHeartbeatInterval = 15 * time.Second

// benchConnections is how many keep-alive connections the scale rows call
// the master over, as that many callers would.
const benchConnections = 8

// onConnections runs call(client, i) for i in [0, n) spread over
// benchConnections clients of url, each on its own connection, over HTTP/1.1
// as workers call their master.
func onConnections(t testing.TB, url string, n int, call func(masterv1connect.MasterServiceClient, int) error) {
	t.Helper()
	spread(t, n, func() (masterv1connect.MasterServiceClient, func()) {
		hc := rpc.NewHTTP1Client()
		return masterv1connect.NewMasterServiceClient(hc, url, rpc.ClientOptions(noop.NewTracerProvider(), testToken)...), hc.CloseIdleConnections
	}, call)
}

// spread runs call(caller, i) for i in [0, n) spread over benchConnections
// callers made by open, one goroutine each; the function open returns with
// a caller runs once all are done. The first error fails the test.
func spread[C any](t testing.TB, n int, open func() (C, func()), call func(C, int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, benchConnections)
	for c := range benchConnections {
		caller, done := open()
		defer done()
		wg.Go(func() {
			for i := c; i < n; i += benchConnections {
				if err := call(caller, i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestBenchMasterScale is rows 6 (the master's CPU while heartbeats arrive
// over real RPC at the rate of 10,000 workers, beside a bare HTTP/1.1
// server's and a bare TCP server's, and the time to register 10,000 workers)
// and 8a (the master's memory with 10,000 workers and 1,000 waiting
// applications). The workers are the test's calls; nothing listens at their
// addresses, and the applications ask for more memory per executor than any
// worker has, so nothing is launched on them.
func TestBenchMasterScale(t *testing.T) {
	workers, apps := 10_000, 1_000
	if benchtable.Start(t) {
		workers, apps = 500, 50
	}
	// The default 50 heartbeats a second; a 10 min worker timeout, so that
	// the master does not probe the 1,000 waiting applications' driver (an
	// idle driver is probed once silent for the worker timeout) while the
	// row measures its heartbeats.
	m := start(t, "master", nil, "master", "--listen", "127.0.0.1:0", "--worker-timeout", "10m")
	pid := m.cmd.Process.Pid
	stamp := time.Now()
	workerID := func(i int) string { return ids.Worker(stamp, "127.0.0.1", 10_000+i) }

	began := time.Now()
	var told sync.Mutex
	var interval time.Duration
	onConnections(t, m.url, workers, func(c masterv1connect.MasterServiceClient, i int) error {
		resp, err := c.RegisterWorker(context.Background(), connect.NewRequest(&masterv1.RegisterWorkerRequest{
			WorkerId: workerID(i), Host: "127.0.0.1", Port: int32(10_000 + i), Cores: 16, MemoryMib: 64 << 10,
			WorkerUrl: fmt.Sprintf("http://127.0.0.1:%d", 10_000+i),
		}))
		if err == nil {
			told.Lock()
			interval = max(interval, time.Duration(resp.Msg.GetHeartbeatIntervalMs())*time.Millisecond)
			told.Unlock()
		}
		return err
	})
	register := time.Since(began)
	// The workers heartbeat at the interval the last ones were told, which a
	// paced round keeps to: one heartbeat every gap.
	gap := interval / time.Duration(workers)

	driverURL := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	defer driverURL.Close()
	onConnections(t, m.url, apps, func(c masterv1connect.MasterServiceClient, i int) error {
		_, err := c.RegisterApplication(context.Background(), connect.NewRequest(&masterv1.RegisterApplicationRequest{
			Description: &masterv1.ApplicationDescription{
				Name: fmt.Sprintf("waiting-%d", i), MemoryPerExecutorMib: 128 << 10,
				Command: &masterv1.Command{Args: []string{"executor"}},
			},
			DriverUrl: driverURL.URL, AppToken: rpc.NewToken(), MasterToken: rpc.NewToken(),
		}))
		return err
	})

	// Every worker heartbeats once to warm the master up, then again as fast
	// as the master answers (its CPU per 1,000 heartbeats when busy); then a
	// tenth of them heartbeat at the rate of all of them heartbeating at the
	// interval the master told them, what the target is about (each
	// heartbeat then finds the master idle and wakes it). The floors get the same heartbeats in turns with the master,
	// a third of the workers a turn: a bare Go HTTP/1.1 server (busy and
	// paced), and a bare TCP server the paced ones as frames — what a
	// heartbeat over HTTP/1.1, and a message that wakes a Go process, cost on
	// this machine.
	ids := make([]string, workers)
	for i := range ids {
		ids[i] = workerID(i)
	}
	floorURL, rawAddr, floorPID := startHeartbeatFloor(t)
	busyBeat, pacedBeat := beat{interval: sparkHeartbeatInterval}, beat{gap: gap, interval: interval}
	heartbeatRound(t, m.url, pid, ids, busyBeat)
	heartbeatRound(t, floorURL, floorPID, ids, busyBeat)
	const turns = 3
	var busy, floorBusy, paced, floorPaced, raw tally
	order := rand.New(rand.NewPCG(1, 2))
	inTurns(order, turns, []func(){
		busy.turns(ids, turns, func(ids []string) (time.Duration, time.Duration) {
			return heartbeatRound(t, m.url, pid, ids, busyBeat)
		}),
		floorBusy.turns(ids, turns, func(ids []string) (time.Duration, time.Duration) {
			return heartbeatRound(t, floorURL, floorPID, ids, busyBeat)
		}),
	})
	sample := ids[:max(60, workers/10)]
	inTurns(order, turns, []func(){
		paced.turns(sample, turns, func(ids []string) (time.Duration, time.Duration) {
			return heartbeatRound(t, m.url, pid, ids, pacedBeat)
		}),
		floorPaced.turns(sample, turns, func(ids []string) (time.Duration, time.Duration) {
			return heartbeatRound(t, floorURL, floorPID, ids, pacedBeat)
		}),
		raw.turns(sample, turns, func(ids []string) (time.Duration, time.Duration) {
			return rawHeartbeatRound(t, rawAddr, floorPID, ids, pacedBeat)
		}),
	})
	rss := float64(tooltest.ProcStatusKiB(t, pid, "VmRSS")) / 1024

	perThousand := func(cpu time.Duration) float64 { return benchtable.Ms(cpu) * 1000 / float64(workers) }
	pacedShare, floorShare, rawShare := paced.share(), floorPaced.share(), raw.share()
	benchtable.Record(t, benchtable.Row{
		ID:   "6a",
		What: fmt.Sprintf("master CPU while %d workers heartbeat at the interval it tells them at the default --max-heartbeat-rate (50/s), over real RPC (%d waiting apps, %d connections), %d of them in turns with the same heartbeats to a bare Go HTTP/1.1 server and as bare TCP frames (glint-floor -serve)", workers, apps, benchConnections, len(sample)),
		Result: fmt.Sprintf("every %s (%.1f heartbeats/s; a silent worker DEAD after %s, four intervals): %.2f%% of a core (bare HTTP/1.1 server: %.2f%%, %.2f×; bare TCP frames: %.2f%%); busy (%.0f heartbeats/s): %.1f ms CPU per 1,000 (bare server: %.1f ms)",
			interval, float64(workers)/interval.Seconds(), 4*interval, pacedShare, floorShare, pacedShare/floorShare, rawShare,
			float64(workers)/busy.wall.Seconds(), perThousand(busy.cpu), perThousand(floorBusy.cpu)),
		Target: "10,000 workers ≤ 5% of one core", Met: benchtable.Check(pacedShare, 5, true),
		Figures: map[string]float64{
			"interval_s": interval.Seconds(), "core_percent_paced": pacedShare, "floor_core_percent_paced": floorShare, "tcp_floor_core_percent_paced": rawShare,
			"cpu_ms_per_1000_paced": perThousand(paced.cpu), "cpu_ms_per_1000_busy": perThousand(busy.cpu), "floor_cpu_ms_per_1000_busy": perThousand(floorBusy.cpu),
		},
	})
	regRate := float64(workers) / register.Seconds()
	benchtable.Record(t, benchtable.Row{
		ID: "6b", What: fmt.Sprintf("register %d workers over %d connections", workers, benchConnections),
		Result: fmt.Sprintf("%.2f s (%.0f/s; 10,000 at this rate: %.1f s)", register.Seconds(), regRate, 10_000/regRate),
		Target: "10,000 ≤ 10 s", Met: benchtable.Check(10_000/regRate, 10, true),
		Figures: map[string]float64{"seconds": register.Seconds(), "per_s": regRate},
	})
	benchtable.Record(t, benchtable.Row{
		ID: "8a", What: fmt.Sprintf("master RSS with %d workers and %d waiting apps", workers, apps),
		Result: fmt.Sprintf("%.0f MiB", rss), Target: "≤ 200 MiB", Met: benchtable.Check(rss, 200, true),
		Figures: map[string]float64{"rss_mib": rss},
	})
}

// tally adds up the rounds of one kind.
type tally struct{ cpu, wall time.Duration }

// turns returns a kind for inTurns: its k-th call runs round on the k-th of n
// parts of ids and adds what it measured to the tally.
func (t *tally) turns(ids []string, n int, round func(ids []string) (cpu, wall time.Duration)) func() {
	k := 0
	return func() {
		cpu, wall := round(ids[k*len(ids)/n : (k+1)*len(ids)/n])
		k++
		t.cpu += cpu
		t.wall += wall
	}
}

// share is the tallied CPU as a percentage of one core over the rounds.
func (t tally) share() float64 { return 100 * t.cpu.Seconds() / t.wall.Seconds() }

// beat is how the heartbeats of a round leave: one every gap, or each as
// soon as the one before it on its connection was answered (gap 0); each
// carries interval as its deadline, as a worker's does (Connect-Timeout-Ms).
type beat struct{ gap, interval time.Duration }

// pace waits until the i-th heartbeat of a round begun at began is due.
func (b beat) pace(began time.Time, i int) {
	if b.gap > 0 {
		time.Sleep(time.Until(began.Add(time.Duration(i) * b.gap)))
	}
}

// heartbeatRound sends the heartbeat of each worker of ids to url once, as
// b says, and returns the CPU the server behind url (process pid) spent
// meanwhile and the round's length.
func heartbeatRound(t testing.TB, url string, pid int, ids []string, b beat) (cpu, wall time.Duration) {
	t.Helper()
	return serverCPU(t, pid, func(began time.Time) {
		onConnections(t, url, len(ids), func(c masterv1connect.MasterServiceClient, i int) error {
			b.pace(began, i)
			ctx, cancel := context.WithTimeout(context.Background(), b.interval)
			defer cancel()
			resp, err := c.Heartbeat(ctx, connect.NewRequest(&masterv1.HeartbeatRequest{WorkerId: ids[i]}))
			if err == nil && resp.Msg.GetReregister() {
				err = fmt.Errorf("worker %s told to re-register", ids[i])
			}
			return err
		})
	})
}

// serverCPU runs round, given its start, and returns the CPU process pid
// spent meanwhile and the round's length.
func serverCPU(t testing.TB, pid int, round func(began time.Time)) (cpu, wall time.Duration) {
	t.Helper()
	before, err := procCPU(pid, false)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	round(began)
	wall = time.Since(began)
	after, err := procCPU(pid, false)
	if err != nil {
		t.Fatal(err)
	}
	return after - before, wall
}

// startHeartbeatFloor starts `glint-floor -serve` and returns its HTTP URL,
// its TCP address and its pid; it is killed and reaped when the test ends,
// and ends by itself if the test's process dies (its stdin closes).
func startHeartbeatFloor(t testing.TB) (httpURL, tcpAddr string, pid int) {
	t.Helper()
	cmd := exec.Command(buildFloor(t), floor.ServeFlag)
	cmd.Stderr = os.Stderr
	_, httpURL, tcpAddr, err := floor.StartServe(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return httpURL, tcpAddr, cmd.Process.Pid
}

// rawHeartbeatRound is heartbeatRound, paced, with each heartbeat sent as a
// bare frame over TCP to floor.ServeTCP at addr (process pid), its answer an
// empty frame, within the interval.
func rawHeartbeatRound(t testing.TB, addr string, pid int, ids []string, b beat) (cpu, wall time.Duration) {
	t.Helper()
	return serverCPU(t, pid, func(began time.Time) {
		spread(t, len(ids), func() (net.Conn, func()) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			return conn, func() { conn.Close() }
		}, func(conn net.Conn, i int) error {
			b.pace(began, i)
			msg, err := proto.Marshal(&masterv1.HeartbeatRequest{WorkerId: ids[i]})
			if err == nil {
				err = conn.SetDeadline(time.Now().Add(b.interval))
			}
			if err == nil {
				err = floor.Exchange(conn, msg)
			}
			return err
		})
	})
}
