// Package child is the contract between a worker and the processes it
// launches (executors and cluster-mode drivers): the environment the worker
// sets for them, the secrets it hands them outside it, and the child's side
// of it — the listening socket and secrets it inherits and the watch that
// ends it when its worker dies.
package child

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/glint-cluster/glint/pkg/rpc"
)

// The environment a worker gives every process it launches.
const (
	// ListenFDEnv tells a process that its worker opened its listening
	// socket for it, and which file descriptor it is; the worker so knows the
	// process's address before the process runs.
	ListenFDEnv = "GLINT_LISTEN_FD"
	// WorkerPIDEnv is the launching worker's process id: the process's parent
	// for as long as the worker lives.
	WorkerPIDEnv = "GLINT_WORKER_PID"
	// WorkerURLEnv is the launching worker's URL.
	WorkerURLEnv = "GLINT_WORKER_URL"
	// WorkDirEnv is the process's work directory (its stdout and stderr are there).
	WorkDirEnv = "GLINT_WORK_DIR"
	// AppIDEnv and ExecutorIDEnv name an executor.
	AppIDEnv      = "GLINT_APP_ID"
	ExecutorIDEnv = "GLINT_EXECUTOR_ID"
	// DriverIDEnv names a cluster-mode driver.
	DriverIDEnv = "GLINT_DRIVER_ID"
	// TokenFileEnv names a glint process's token file (the default of
	// --token-file). A worker sets it empty for the processes it launches:
	// its own is the cluster token, which they must not have.
	TokenFileEnv = "GLINT_TOKEN_FILE"
	// TLSCertFileEnv, TLSKeyFileEnv and TLSCAFileEnv are the TLS files of
	// the processes a worker launches: its own, or on a worker that runs
	// them as users of their own, theirs (--executor-tls-*-file); the
	// defaults of every glint command's --tls-*-file flags.
	TLSCertFileEnv = "GLINT_TLS_CERT_FILE"
	TLSKeyFileEnv  = "GLINT_TLS_KEY_FILE"
	TLSCAFileEnv   = "GLINT_TLS_CA_FILE"
)

// WorkerEnv is what a worker sets in the environment of every process it
// launches, over its own: the paths of their TLS files f, and no token file (a
// process gets only its own token, in its Secrets: an executor its
// application's, a driver a submit token).
func WorkerEnv(f rpc.TLSFiles) []string {
	return []string{TLSCertFileEnv + "=" + f.Cert, TLSKeyFileEnv + "=" + f.Key, TLSCAFileEnv + "=" + f.CA, TokenFileEnv + "="}
}

// InheritedListener returns the listener handed over in ListenFDEnv, or nil
// when there is none.
func InheritedListener() (net.Listener, error) {
	fd, err := inheritedFD(ListenFDEnv)
	if fd < 0 || err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "listener")
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("%s=%d: %w", ListenFDEnv, fd, err)
	}
	return ln, nil
}

// inheritedFD is the file descriptor number in the environment variable
// name, -1 when it is unset.
func inheritedFD(name string) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return -1, nil
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return -1, fmt.Errorf("%s=%q: want a file descriptor number of at least 3", name, v)
	}
	return fd, nil
}

// ErrWorkerDied is the cause of a watched context's end when the worker died.
var ErrWorkerDied = errors.New("worker died")

// refusalsToDie is how many probes in a row must find nothing listening at the
// worker's URL before the worker counts as gone: one refusal can be a worker
// restarting its listener.
const refusalsToDie = 2

// WatchWorker is Spark's WorkerWatcher: it returns a context that ends, with
// a cause wrapping ErrWorkerDied, when the worker that launched this process
// dies, so that an executor or driver never outlives its worker. It checks
// first, before returning, that the worker named in WorkerPIDEnv is still this
// process's parent, so a worker that died while the process started is noticed
// at once (an error); then, every interval, that the parent is unchanged and
// that something still listens at WorkerURLEnv. A process still running grace
// after its worker's death (a task that ignores its context) exits with status
// 1: nobody would kill it. The worker also asks the kernel to signal its
// children when it dies (PR_SET_PDEATHSIG); this watch covers what that
// cannot (a worker in another pid namespace, a signal that arrives before the
// process set up its handlers, a process that ignores it). A process not
// launched by a worker (neither variable set) gets ctx back unwatched. stop
// ends the watch; call it when the process is done.
func WatchWorker(ctx context.Context, interval, grace time.Duration) (_ context.Context, stop func(), _ error) {
	pid := 0
	if v := os.Getenv(WorkerPIDEnv); v != "" {
		var err error
		if pid, err = strconv.Atoi(v); err != nil || pid <= 0 {
			return nil, nil, fmt.Errorf("%s=%q: want a process id", WorkerPIDEnv, v)
		}
		if parent := os.Getppid(); parent != pid {
			return nil, nil, fmt.Errorf("%w before this process started: worker pid %d, parent now %d", ErrWorkerDied, pid, parent)
		}
	}
	url := os.Getenv(WorkerURLEnv)
	ctx, cancel := context.WithCancelCause(ctx)
	if pid == 0 && url == "" {
		return ctx, func() { cancel(nil) }, nil
	}
	stopped := make(chan struct{})
	go watch(stopped, cancel, pid, url, interval, grace)
	var once sync.Once
	return ctx, func() {
		once.Do(func() { close(stopped) })
		cancel(nil)
	}, nil
}

// watch checks the worker every interval until stopped or the worker died;
// then it ends the context and, unless stopped within grace, the process. It
// goes on after the context ended for another reason (a SIGTERM from the
// dying worker), as the process may still not end.
func watch(stopped <-chan struct{}, cancel context.CancelCauseFunc, pid int, url string, interval, grace time.Duration) {
	client := rpc.NewHTTPClient()
	client.Timeout = interval
	refusals := 0
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stopped:
			return
		case <-t.C:
		}
		var died error
		switch {
		case pid != 0 && os.Getppid() != pid:
			died = fmt.Errorf("%w: worker pid %d (%s) is no longer this process's parent", ErrWorkerDied, pid, cmp.Or(url, "no URL given"))
		case url != "" && refused(client, url):
			if refusals++; refusals >= refusalsToDie {
				died = fmt.Errorf("%w: nothing listens at worker %s", ErrWorkerDied, url)
			}
		default:
			refusals = 0
		}
		if died == nil {
			continue
		}
		cancel(died)
		select {
		case <-stopped:
		case <-time.After(grace):
			fmt.Fprintf(os.Stderr, "glint: %v; still running %s later, exiting\n", died, grace)
			os.Exit(1)
		}
		return
	}
}

// refused reports whether a probe of url/healthz found nothing listening. A
// slow or failing answer is not a refusal: the worker is alive, only busy.
func refused(client *http.Client, url string) bool {
	resp, err := client.Get(url + "/healthz")
	if err != nil {
		return errors.Is(err, syscall.ECONNREFUSED)
	}
	resp.Body.Close()
	return false
}
