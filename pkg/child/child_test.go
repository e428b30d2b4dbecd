package child

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/glint-cluster/glint/internal/tooltest"
)

// roleEnv makes the test binary play a part in a test instead of running tests.
const roleEnv = "GLINT_LAUNCH_TEST_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "child":
		os.Exit(child())
	case "worker":
		os.Exit(worker())
	case "secrets":
		os.Exit(secretsChild())
	case "claimed":
		os.Exit(claimedChild())
	}
	os.Exit(m.Run())
}

// child watches its worker and says so on stdout, then prints why the watch
// ended — and, like a task that ignores its context, does not end: the watch
// must end the process.
func child() int {
	ctx, stop, err := WatchWorker(context.Background(), 20*time.Millisecond, 200*time.Millisecond)
	if err != nil {
		fmt.Println("error:", err)
		return 3
	}
	defer stop()
	fmt.Println("watching")
	<-ctx.Done()
	fmt.Println("ended:", context.Cause(ctx))
	select {}
}

// worker starts a child that names it as its worker, prints the child's pid
// and waits to be killed. It does not ask for PR_SET_PDEATHSIG, so only the
// watch can notice its death.
func worker() int {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), roleEnv+"=child", WorkerPIDEnv+"="+strconv.Itoa(os.Getpid()))
	out, err := os.Create(os.Getenv("CHILD_OUT"))
	if err != nil {
		fmt.Println(err)
		return 1
	}
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println(cmd.Process.Pid)
	select {}
}

func TestAChildEndsWhenItsWorkerDies(t *testing.T) {
	if testing.Short() {
		t.Skip("-short is the fast loop (make test-short): this test starts a worker process and its child; make test runs it")
	}
	out := t.TempDir() + "/child.out"
	w := exec.Command(os.Args[0])
	w.Env = append(os.Environ(), roleEnv+"=worker", "CHILD_OUT="+out)
	stdout, err := w.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("worker printed %q", line)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	waitForFile(t, out, "watching")
	if err := w.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = w.Wait()
	if got := waitForFile(t, out, "ended:"); !strings.Contains(got, "worker died") {
		t.Errorf("child's watch ended with %q, want worker died", got)
	}
	// It ignores its context, so the watch ends it.
	tooltest.Eventually(t, fmt.Sprintf("child %d to end after its worker died", pid), func() bool {
		return syscall.Kill(pid, 0) != nil || !tooltest.Alive(pid)
	})
}

func TestAChildWhoseWorkerDiedBeforeItStartedFailsAtOnce(t *testing.T) {
	// The test process is the child's parent, not the process named.
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), roleEnv+"=child", WorkerPIDEnv+"="+strconv.Itoa(os.Getppid()))
	out, err := cmd.Output()
	if code := cmd.ProcessState.ExitCode(); code != 3 || !strings.Contains(string(out), "worker died before this process started") {
		t.Errorf("child exit %d (%v), output %q; want 3 and the worker named dead", code, err, out)
	}
}

func TestAChildEndsWhenNothingListensAtItsWorkersURL(t *testing.T) {
	// A reserved port nothing listens on, and nothing will while the test runs.
	url := fmt.Sprintf("http://127.0.0.1:%d", tooltest.FreePorts(t, 1)[0])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), roleEnv+"=child", WorkerURLEnv+"="+url)
	out, _ := cmd.Output()
	if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(string(out), "nothing listens at worker "+url) {
		t.Errorf("child exit %d, output %q; want its watch ended by the closed worker port, and then the process", code, out)
	}
}

func TestABadWorkerPIDIsAnError(t *testing.T) {
	t.Setenv(WorkerPIDEnv, "soon")
	if _, _, err := WatchWorker(context.Background(), time.Second, time.Second); err == nil || !strings.Contains(err.Error(), WorkerPIDEnv) {
		t.Errorf("WatchWorker with %s=soon: %v", WorkerPIDEnv, err)
	}
}

// waitForFile waits until path holds a line starting with prefix and returns it.
func waitForFile(t *testing.T, path, prefix string) string {
	t.Helper()
	var b []byte
	var found string
	if !tooltest.Poll(30*time.Second, 10*time.Millisecond, func() bool {
		b, _ = os.ReadFile(path)
		for line := range strings.Lines(string(b)) {
			if strings.HasPrefix(line, prefix) {
				found = strings.TrimSpace(line)
				return true
			}
		}
		return false
	}) {
		t.Fatalf("%s has no line %q after 30s: %q", path, prefix, b)
	}
	return found
}

func TestAClaimChannelWhosePeerIsNotTheWorkerIsRefused(t *testing.T) {
	worker, process, err := ClaimChannel()
	if err != nil {
		t.Fatal(err)
	}
	worker.Close() // without the check, the claim would fail for want of one, not hang
	defer process.Close()
	fd, err := syscall.Dup(int(process.Fd())) // ReceiveClaim closes what it was given
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(ClaimFDEnv, strconv.Itoa(fd))
	t.Setenv(WorkerPIDEnv, strconv.Itoa(os.Getpid()+1)) // the peer is this process, not that one
	if _, err := ReceiveClaim(); err == nil || !strings.Contains(err.Error(), "not the worker") {
		t.Errorf("claim over a channel held by another process: %v, want refused", err)
	}
	if _, err := ReceiveClaim(); !errors.Is(err, ErrNotPrestarted) {
		t.Errorf("a second claim: %v, want ErrNotPrestarted (the channel serves once)", err)
	}
}

// claimOverChannel is ReceiveClaim over a new claim channel whose worker end
// is this test's (the peer is so this process, which the environment names
// as the worker): worker serves it once the process said it is ready.
func claimOverChannel(t *testing.T, worker func(end *os.File)) (*Claimed, error) {
	t.Helper()
	end, process, err := ClaimChannel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { end.Close() })
	fd, err := syscall.Dup(int(process.Fd())) // ReceiveClaim closes what it was given
	process.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(ClaimFDEnv, strconv.Itoa(fd))
	t.Setenv(WorkerPIDEnv, strconv.Itoa(os.Getpid()))
	go func() {
		if err := Ready(end); err == nil {
			worker(end)
		}
	}()
	return ReceiveClaim()
}

func TestAClaimChannelClosedBeforeTheClaimSaysSo(t *testing.T) {
	_, err := claimOverChannel(t, func(end *os.File) { end.Close() })
	if err == nil || !strings.Contains(err.Error(), "closed before a claim came") {
		t.Errorf("claim over a channel the worker closed: %v, want it named closed before a claim came", err)
	}
}

func TestAClaimWhoseLogFilesNeverComeDoesNotSettle(t *testing.T) {
	dir := t.TempDir()
	c, err := claimOverChannel(t, func(end *os.File) {
		if err := SendClaim(end, Claim{Args: []string{"--app-id", "app-1"}, Dir: dir}); err == nil {
			end.Close()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Args, []string{"--app-id", "app-1"}) {
		t.Errorf("claimed args %q", c.Args)
	}
	if err := c.Settle(); err == nil || !strings.Contains(err.Error(), "worker ended the launch") {
		t.Errorf("settle over a channel closed after the claim: %v, want the worker ended the launch", err)
	}
}
