package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	workerv1 "github.com/glint-cluster/glint/pkg/api/glint/worker/v1"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// Flood sizes: floodConns idle HTTP/2 connections, from floodSources
// loopback addresses, opened by floodDialers at a time in each helper.
const (
	floodConns   = 20_000
	floodSources = 8
	floodDialers = 32
)

// Bounds of TestMasterAnswersThroughAFloodOfIdleConnections. Once the flood
// is open, every real client's call is answered within floodAnswerBound.
// While it arrives, a new client's connection waits in the listen queue
// behind the flood's that the master has not accepted yet (up to the
// kernel's somaxconn, 4,096 here), so its bound is floodArrivalBound. The
// master's peak RSS stays under floodRSSBound: far above what it holds at
// rest, far below what it reached with nothing bounding connections.
const (
	floodAnswerBound  = time.Second
	floodArrivalBound = 5 * time.Second
	floodRSSBound     = 128 << 10 // KiB
)

// h2cPreface is what each connection of the flood sends: HTTP/2's client
// preface, the magic and an empty SETTINGS frame, and nothing more.
var h2cPreface = append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 0x4, 0, 0, 0, 0, 0)

// TestMasterAnswersThroughAFloodOfIdleConnections opens 20,000 idle h2c
// connections, without a token, to a real master from the test, and while
// they arrive and once they are open registers workers, each over a
// connection of its own as a starting worker calls: every registration is
// answered (within floodAnswerBound once the flood is open), `glint status`
// answers, and the master's RSS stays bounded.
func TestMasterAnswersThroughAFloodOfIdleConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 20,000 connections to a real master")
	}
	m := start(t, "master", nil, "master", "--listen", "127.0.0.1:0", "--worker-timeout", "10m")
	pid := m.cmd.Process.Pid
	rest := tooltest.ProcStatusKiB(t, pid, "VmRSS")

	var registered atomic.Int64
	register := func(bound time.Duration) (time.Duration, error) {
		hc := rpc.NewHTTP1Client()
		defer hc.CloseIdleConnections()
		client := masterv1connect.NewMasterServiceClient(hc, m.url, rpc.ClientOptions(nil, testToken)...)
		port := 20_000 + registered.Add(1)
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		began := time.Now()
		_, err := client.RegisterWorker(ctx, connect.NewRequest(&masterv1.RegisterWorkerRequest{
			WorkerId: fmt.Sprintf("worker-20261130120000-127.0.0.9-%d", port), Host: "127.0.0.9", Port: int32(port),
			Cores: 1, MemoryMib: 1024, WorkerUrl: fmt.Sprintf("http://127.0.0.9:%d", port),
		}))
		return time.Since(began), err
	}

	flood := openFlood(t, strings.TrimPrefix(m.url, "http://"))
	var during []time.Duration
	for !flood.opened() {
		took, err := register(floodArrivalBound)
		if err != nil {
			t.Fatalf("a worker's registration during the flood: %v after %s", err, took)
		}
		during = append(during, took)
	}
	if err := flood.wait(); err != nil {
		t.Fatal(err)
	}
	var after []time.Duration
	for range 20 {
		took, err := register(floodAnswerBound)
		if err != nil {
			t.Fatalf("a worker's registration with the flood open: %v after %s", err, took)
		}
		after = append(after, took)
	}
	if out, errOut, err := runGlint(t, "status", "--master", m.url); err != nil || !strings.Contains(out, "ALIVE") {
		t.Fatalf("glint status with the flood open: %v\n%s%s", err, out, errOut)
	}
	peak := peakRSS(t, pid)
	slices.Sort(during)
	slices.Sort(after)
	t.Logf("%d idle connections opened in %s; master RSS %d MiB at rest, %d MiB peak, %d MiB with them open, %d files open",
		floodConns, flood.took.Round(time.Millisecond), rest>>10, peak>>10, tooltest.ProcStatusKiB(t, pid, "VmRSS")>>10, openFiles(t, pid))
	t.Logf("registrations during the flood: %d, median %s, max %s; with it open: median %s, max %s",
		len(during), quantile(during, 0.5).Round(time.Microsecond), during[len(during)-1].Round(time.Microsecond),
		quantile(after, 0.5).Round(time.Microsecond), after[len(after)-1].Round(time.Microsecond))
	if peak > floodRSSBound {
		t.Errorf("the master's peak RSS was %d MiB, want under %d MiB", peak>>10, floodRSSBound>>10)
	}
}

// The flood's connections are opened by floodHelpers processes of the test
// binary, floodConns/floodHelpers each, so that none needs more open files
// than a common hard limit allows. floodAddrEnv tells such a process the
// address to flood.
const (
	floodHelpers = 4
	floodAddrEnv = "GLINT_TEST_FLOOD_ADDR"
)

// init turns the test binary into a flood helper when floodAddrEnv is set,
// before TestMain builds anything: it opens floodConns/floodHelpers
// connections to that address (from floodSources loopback addresses), each
// sending h2cPreface and then nothing, says "opened" on stdout, and closes
// them and exits once its stdin closes. A connection the master closes
// stays open on the helper's side.
func init() {
	addr := os.Getenv(floodAddrEnv)
	if addr == "" {
		return
	}
	conns, err := openIdle(addr, floodConns/floodHelpers)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println("opened")
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		c.Close()
	}
	os.Exit(0)
}

// openIdle opens n connections to addr with floodDialers dialers, each
// sending h2cPreface.
func openIdle(addr string, n int) ([]net.Conn, error) {
	var mu sync.Mutex
	var conns []net.Conn
	var next atomic.Int64
	errs := make(chan error, floodDialers)
	var wg sync.WaitGroup
	for range floodDialers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+i%floodSources))}}
				c, err := d.Dial("tcp", addr)
				if err == nil {
					mu.Lock()
					conns = append(conns, c)
					mu.Unlock()
					_, err = c.Write(h2cPreface)
				}
				if err != nil {
					errs <- fmt.Errorf("open idle connection %d of %d: %w", i, n, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		for _, c := range conns {
			c.Close()
		}
		return nil, err
	}
	return conns, nil
}

// flood is floodHelpers processes holding floodConns idle connections.
type flood struct {
	left atomic.Int64 // helpers still opening theirs
	done chan struct{}
	errs chan error
	took time.Duration
}

// openFlood starts the helpers that open floodConns idle connections to
// addr; they close them and are reaped when the test ends.
func openFlood(t *testing.T, addr string) *flood {
	t.Helper()
	f := &flood{done: make(chan struct{}), errs: make(chan error, floodHelpers)}
	f.left.Store(floodHelpers)
	began := time.Now()
	for range floodHelpers {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), floodAddrEnv+"="+addr)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			stdin.Close()
			if err := cmd.Wait(); err != nil {
				t.Errorf("flood helper: %v", err)
			}
		})
		go func() {
			line, _ := bufio.NewReader(stdout).ReadString('\n')
			if line != "opened\n" {
				f.errs <- fmt.Errorf("flood helper: %q", line)
			}
			if f.left.Add(-1) == 0 {
				f.took = time.Since(began)
				close(f.done)
			}
		}()
	}
	return f
}

// opened reports whether every helper has opened its connections, or failed.
func (f *flood) opened() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

// wait waits until every helper has opened its connections.
func (f *flood) wait() error {
	<-f.done
	select {
	case err := <-f.errs:
		return err
	default:
		return nil
	}
}

// openFiles counts a process's open file descriptors.
func openFiles(t *testing.T, pid int) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

// TestARebindingHostIsMisdirected sends a real master and worker what a web
// page whose name was rebound to their address would (DNS rebinding): calls
// and pages with Host rebind.attacker.example, even with a valid token. Each
// is answered 421 before anything else, and nothing in the cluster changes;
// the same requests naming the listener, or a name it was given with
// --allowed-host, are answered.
func TestARebindingHostIsMisdirected(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1, "--allowed-host", "glint-master.example")
	registerApp := &masterv1.RegisterApplicationRequest{AppToken: rpc.NewToken(), MasterToken: rpc.NewToken(), DriverUrl: "http://127.0.0.1:9", Description: &masterv1.ApplicationDescription{
		Name: "evil", MemoryPerExecutorMib: 256, Command: &masterv1.Command{Args: []string{"/bin/sh", "-c", "touch /tmp/pwned"}}}}
	launch := &workerv1.LaunchExecutorRequest{MasterUrl: c.master.url, AppId: "app-20261130120000-0000", ExecutorId: 7, Cores: 1, MemoryMib: 64,
		Description: &masterv1.ApplicationDescription{Name: "evil", Command: &masterv1.Command{Args: []string{"/bin/sh", "-c", "touch /tmp/pwned"}}}}
	body := func(m proto.Message) io.Reader { return jsonBody(t, m)() }
	before := c.rawState(t)
	for _, tc := range []struct {
		name, method, url string
		body              func() io.Reader
	}{
		{"register an application", http.MethodPost, c.master.url + "/glint.master.v1.MasterService/RegisterApplication", func() io.Reader { return body(registerApp) }},
		{"launch an executor", http.MethodPost, c.workers[0].url + "/glint.worker.v1.WorkerService/LaunchExecutor", func() io.Reader { return body(launch) }},
		{"the master's /json", http.MethodGet, c.master.url + "/json", nil},
		{"the master's web UI", http.MethodGet, c.master.url + "/", nil},
		{"the worker's /json", http.MethodGet, c.workers[0].url + "/json", nil},
		{"the master's /healthz", http.MethodGet, c.master.url + "/healthz", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			send := func(host string) *http.Response {
				var b io.Reader
				if tc.body != nil {
					b = tc.body()
				}
				req, err := http.NewRequest(tc.method, tc.url, b)
				if err != nil {
					t.Fatal(err)
				}
				req.Host = host
				req.Header.Set("Authorization", "Bearer "+testToken)
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return resp
			}
			if resp := send("rebind.attacker.example"); resp.StatusCode != http.StatusMisdirectedRequest {
				t.Errorf("with Host rebind.attacker.example: %s, want 421", resp.Status)
			}
			if after := c.rawState(t); !reflect.DeepEqual(after, before) {
				t.Errorf("cluster state changed:\n%v\nwas\n%v", after, before)
			}
			if tc.method == http.MethodGet {
				if resp := send(""); resp.StatusCode != http.StatusOK {
					t.Errorf("with the URL's Host: %s, want 200", resp.Status)
				}
				if strings.HasPrefix(tc.url, c.master.url) {
					if resp := send("glint-master.example:7077"); resp.StatusCode != http.StatusOK {
						t.Errorf("with Host glint-master.example, an --allowed-host: %s, want 200", resp.Status)
					}
				}
			}
		})
	}
}
