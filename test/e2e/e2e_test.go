package e2e

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/glint-cluster/glint/internal/tooltest"
	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/contain"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/services/worker"
)

// glintBin is the glint binary built once for every test in this package,
// with glint-executor beside it as the image has it: the executors of the
// applications it submits run glint-executor (child.ExecutorCommand).
var glintBin string

// testToken is the cluster token every glint process the tests start is
// given (GLINT_TOKEN_FILE in their environment), and with which the tests
// read the master's pages.
var testToken = rpc.NewToken()

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

// staticBuild is `go build -o out pkgs...` as the Dockerfile builds glint,
// statically linked (CGO_ENABLED=0): what a cluster runs, with no dynamic
// loader at each process's start. With more than one package, out is a
// directory ending in a separator.
func staticBuild(out string, pkgs ...string) *exec.Cmd {
	cmd := exec.Command("go", append([]string{"build", "-o", out}, pkgs...)...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	return cmd
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "glint-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	// Its binaries are run by other users too (users_test.go).
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	glintBin = filepath.Join(dir, "glint")
	build := staticBuild(dir+string(filepath.Separator), "../../cmd/glint", "../../cmd/glint-executor")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build glint:", err)
		return 1
	}
	tokenFile := filepath.Join(dir, "cluster.token")
	if err := os.WriteFile(tokenFile, []byte(testToken+"\n"), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	os.Setenv("GLINT_TOKEN_FILE", tokenFile)
	// A test that starts a process without a token gives it a config
	// directory of its own: none reads or makes the user's cluster token.
	os.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	// The tests' workers run their processes as the test's user, from
	// temporary directories only it may read; users_test.go runs them as
	// users of their own.
	os.Setenv("GLINT_EXECUTOR_USERS", "off")
	code := m.Run()
	if left := glintProcesses(); len(left) > 0 && code == 0 {
		fmt.Fprintf(os.Stderr, "glint processes left after the tests: %v\n", left)
		return 1
	}
	return code
}

// glintProcesses lists the pids of running processes of the test's glint
// binaries (glint and glint-executor, under any name linked to them).
func glintProcesses() []int {
	var bins []os.FileInfo
	for _, bin := range []string{glintBin, glintBin + child.ExecutorSuffix} {
		if fi, err := os.Stat(bin); err == nil {
			bins = append(bins, fi)
		}
	}
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		if isOneOf(filepath.Join("/proc", e.Name(), "exe"), bins) {
			if tooltest.Alive(pid) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// isOneOf says whether the file at path is one of files.
func isOneOf(path string, files []os.FileInfo) bool {
	fi, err := os.Stat(path)
	if err != nil {
		return false
	}
	for _, f := range files {
		if os.SameFile(fi, f) {
			return true
		}
	}
	return false
}

// proc is a glint process a test started; Cleanup stops and reaps it.
type proc struct {
	cmd     *exec.Cmd
	name    string
	url     string
	log     string
	urlFile string
	done    chan struct{} // closed once the process was reaped
	err     error         // its Wait error, set before done closes
}

// start runs glint args... with --url-file and waits until it serves. env is
// added to the test's environment.
func start(t testing.TB, name string, env []string, args ...string) *proc {
	t.Helper()
	return startBinary(t, glintBin, name, env, args...)
}

// startBinary is start for another binary that runs glint.Main.
func startBinary(t testing.TB, bin, name string, env []string, args ...string) *proc {
	t.Helper()
	p := spawn(t, bin, name, env, args...)
	p.waitServing(t)
	return p
}

// spawn runs bin args... with --url-file, as startBinary does, without
// waiting until it serves.
func spawn(t testing.TB, bin, name string, env []string, args ...string) *proc {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short is the fast loop (make test-short): this test starts processes (glint %s); make test runs it", name)
	}
	dir := t.TempDir()
	logPath := filepath.Join(dir, name+".log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	urlFile := filepath.Join(dir, name+".url")
	cmd := exec.Command(bin, append(args, "--url-file", urlFile)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, name: name, log: logPath, urlFile: urlFile, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.stop(t) })
	return p
}

// waitServing waits until p wrote its URL, and sets p.url.
func (p *proc) waitServing(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if b, err := os.ReadFile(p.urlFile); err == nil {
			p.url = strings.TrimSpace(string(b))
			return
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited before serving: %v\n%s", p.name, p.err, readFile(p.log))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not serve within 20s\n%s", p.name, readFile(p.log))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends SIGTERM, waits, and kills the process group if it lingers.
func (p *proc) stop(t testing.TB) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Errorf("%v did not exit within 20s of SIGTERM\n%s", p.cmd.Args, readFile(p.log))
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// testCluster is a master and workers running as separate processes.
type testCluster struct {
	master   *proc
	workers  []*proc
	workDirs []string
	// client reads the master's pages; nil: http.DefaultClient.
	client *http.Client
	// token is what it reads them with; empty: testToken.
	token string
}

func startCluster(t testing.TB, workers int, masterArgs ...string) *testCluster {
	t.Helper()
	return startClusterWithEnv(t, nil, workers, masterArgs...)
}

// startClusterWithEnv starts a cluster whose processes (and so their
// executors) have env in their environment.
func startClusterWithEnv(t testing.TB, env []string, workers int, masterArgs ...string) *testCluster {
	t.Helper()
	return startSizedCluster(t, env, workers, 2, nil, masterArgs...)
}

// startSizedCluster starts a cluster whose workers have cores cores each and
// 2 GiB of memory, or 128 MiB per core when that is more, and workerArgs.
func startSizedCluster(t testing.TB, env []string, workers, cores int, workerArgs []string, masterArgs ...string) *testCluster {
	t.Helper()
	c := &testCluster{
		master: start(t, "master", env, append([]string{"master", "--listen", "127.0.0.1:0"}, masterArgs...)...),
		client: tlsClient(t, env),
	}
	c.startWorkers(t, env, workers, cores, workerArgs...)
	return c
}

// ownUsers, among a cluster's workerArgs, gives each of its workers
// --executor-users of its own (testUsers): a worker kills what runs as its
// range's uids, so no two that run at once may share one.
const ownUsers = "--executor-users=<each worker its own>"

// testUsers is a range of 16 uids no other worker of this test process, or
// of another test package's, is given.
func testUsers() contain.UIDRange {
	first := contain.DefaultUIDRange.Last + 10_000_000 + uint32(os.Getpid()%20_000)*1024 + uint32(usersGiven.Add(1)%64)*16
	return contain.UIDRange{First: first, Last: first + 15}
}

var usersGiven atomic.Uint32

// reachableDir is a temporary directory that every user may pass through
// (t.TempDir's parent is the test's alone), for the work dirs of workers
// whose processes run as users of their own.
func reachableDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "glint-work-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// startWorkers starts n workers of the cluster's master, with cores cores
// each and workerArgs, and waits until they are alive.
func (c *testCluster) startWorkers(t testing.TB, env []string, workers, cores int, workerArgs ...string) {
	t.Helper()
	for i := range workers {
		dir := reachableDir(t)
		// Registered before the worker's stop, so it runs after it.
		t.Cleanup(func() { removeWorkerCgroup(t, dir) })
		c.workDirs = append(c.workDirs, dir)
		args := []string{"worker", "--master", c.master.url,
			"--listen", "127.0.0.1:0", "--cores", fmt.Sprint(cores), "--memory", fmt.Sprintf("%dm", max(2048, 128*cores)), "--work-dir", dir,
			"--register-interval", "200ms", "--kill-grace", "2s"}
		for _, a := range workerArgs {
			if a == ownUsers {
				a = "--executor-users=" + testUsers().String()
			}
			args = append(args, a)
		}
		c.workers = append(c.workers, start(t, fmt.Sprintf("worker-%d", i), env, args...))
	}
	c.waitFor(t, "workers alive", func(s masterJSON) bool { return s.alive() == workers })
}

// removeWorkerCgroup removes what the worker on dir left of its cgroup (a
// test may have SIGKILLed it), as the next worker on dir would.
func removeWorkerCgroup(t testing.TB, dir string) {
	p, err := contain.Open(worker.DefaultCgroup(dir), contain.Options{})
	if errors.Is(err, contain.ErrUnavailable) {
		return
	}
	if err == nil {
		err = p.Close()
	}
	if err != nil {
		t.Errorf("remove the cgroup of the worker on %s: %v", dir, err)
	}
}

// tlsClient is a client with the TLS files named in env (GLINT_TLS_*), or
// nil when there are none.
func tlsClient(t testing.TB, env []string) *http.Client {
	t.Helper()
	files := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			files[k] = v
		}
	}
	if files["GLINT_TLS_CERT_FILE"] == "" {
		return nil
	}
	pair, err := tls.LoadX509KeyPair(files["GLINT_TLS_CERT_FILE"], files["GLINT_TLS_KEY_FILE"])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(files["GLINT_TLS_CA_FILE"])
	if err != nil || !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("read the test CA: %v", err)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}}}
}

// masterJSON is the part of the master's /json the tests read.
type masterJSON struct {
	Status  string `json:"status"`
	Epoch   int64  `json:"epoch"`
	Workers []struct {
		ID            string `json:"id"`
		State         string `json:"state"`
		CoresUsed     int    `json:"coresused"`
		LastHeartbeat int64  `json:"lastheartbeat"`
	} `json:"workers"`
	ActiveApps    []appJSON `json:"activeapps"`
	CompletedApps []appJSON `json:"completedapps"`
}

type appJSON struct {
	ID            string         `json:"id"`
	Name          string         `json:"name"`
	TraceID       string         `json:"traceid"`
	State         string         `json:"state"`
	StatusMessage string         `json:"statusmessage"`
	DriverURL     string         `json:"driverurl"`
	Executors     []executorJSON `json:"executors"`
}

type executorJSON struct {
	ID      int    `json:"id"`
	State   string `json:"state"`
	Worker  string `json:"worker"`
	Message string `json:"message"`
}

func (s masterJSON) alive() int {
	n := 0
	for _, w := range s.Workers {
		if w.State == "ALIVE" {
			n++
		}
	}
	return n
}

func (c *testCluster) state(t testing.TB) masterJSON {
	t.Helper()
	resp := getPageWith(t, c.client, cmp.Or(c.token, testToken), c.master.url+"/json")
	defer resp.Body.Close()
	var s masterJSON
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// getPage GETs a page of a glint process with the test's token, through
// client (nil: http.DefaultClient).
func getPage(t testing.TB, client *http.Client, url string) *http.Response {
	t.Helper()
	return getPageWith(t, client, testToken, url)
}

// getPageWith is getPage with token.
func getPageWith(t testing.TB, client *http.Client, token, url string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return resp
}

// waitFor polls the master's /json until ok holds.
func (c *testCluster) waitFor(t testing.TB, what string, ok func(masterJSON) bool) masterJSON {
	t.Helper()
	var s masterJSON
	if !tooltest.Poll(30*time.Second, 50*time.Millisecond, func() bool { s = c.state(t); return ok(s) }) {
		t.Fatalf("timed out waiting for %s; master state: %+v\nmaster log:\n%s", what, s, readFile(c.master.log))
	}
	return s
}

// runGlint runs a glint client command to its end.
func runGlint(t testing.TB, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return glintWithEnv(t, nil, args...)
}

// glintWithEnv runs a glint client command with env added to its environment.
func glintWithEnv(t testing.TB, env []string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return runBinary(t, glintBin, env, args...)
}

// runBinary runs bin, a glint binary, as a client command with env added to
// its environment.
func runBinary(t testing.TB, bin string, env []string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

func exitCode(err error) int {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
