package worker

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/redact"
	"github.com/glint-cluster/glint/pkg/telemetry"
	"github.com/glint-cluster/glint/pkg/telemetry/otlp"
)

func TestStartStepRunsProcessInItsOwnGroup(t *testing.T) {
	dir := t.TempDir()
	l := &launch{
		dir: dir, path: testBinary(t), argv: []string{testBinary(t)},
		environ: append(os.Environ(), childModeEnv+"=hold", "GLINT_WORK_DIR="+dir),
		now:     time.Now,
	}
	if err := (logsStep{}).Run(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	if err := (startStep{}).Run(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	pid := l.cmd.Process.Pid
	pgid, err := syscall.Getpgid(pid)
	if err != nil || pgid != pid {
		t.Errorf("process group of %d = %d (%v), want its own", pid, pgid, err)
	}
	if l.stdout != nil || l.stderr != nil || l.startedAt.IsZero() {
		t.Errorf("after start: logs still open or no start time")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e, killed := waitProcess(ctx, testLogger(), l.cmd, time.Minute)
	if !killed || e.signal != syscall.SIGTERM {
		t.Errorf("waitProcess = %v, killed %v; want killed by SIGTERM", e, killed)
	}
	assertGone(t, pid)
}

func TestStartStepResolvesTheBinaryOnPATH(t *testing.T) {
	dir := t.TempDir()
	l := &launch{dir: dir, argv: []string{"true"}, now: time.Now}
	if err := (startStep{}).Run(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	if err := l.cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	want, err := exec.LookPath("true")
	if err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(l.path) || filepath.Base(l.path) != filepath.Base(want) {
		t.Errorf("path = %q, want the absolute path of true (%s)", l.path, want)
	}
}

func TestStartStepFailsOnMissingBinary(t *testing.T) {
	l := &launch{dir: t.TempDir(), argv: []string{"/nonexistent/bin"}, now: time.Now}
	err := (startStep{}).Run(context.Background(), l)
	if want := `exec: "/nonexistent/bin": stat /nonexistent/bin: no such file or directory`; err == nil || err.Error() != want || l.cmd != nil {
		t.Errorf("err = %v, want %s and no process", err, want)
	}
}

func TestStartStepDoesNotStartAKilledProcess(t *testing.T) {
	l := &launch{dir: t.TempDir(), path: testBinary(t), argv: []string{testBinary(t)}, now: time.Now}
	ctx, kill := context.WithCancelCause(context.Background())
	kill(errShutdown)
	err := (startStep{}).Run(ctx, l)
	if !errors.Is(err, errShutdown) || l.cmd != nil {
		t.Errorf("start after kill: err %v, cmd %v; want errShutdown and no process", err, l.cmd)
	}
}

func TestStartStepTellsTheKernelToEndTheProcessWithItsStarter(t *testing.T) {
	dir := t.TempDir()
	l := &launch{
		dir: dir, path: testBinary(t), argv: []string{testBinary(t)},
		environ: append(os.Environ(), childModeEnv+"=hold", "GLINT_WORK_DIR="+dir),
		now:     time.Now,
	}
	// PR_SET_PDEATHSIG fires when the thread that forked the process ends: a
	// goroutine that exits while locked to its thread ends that thread, as
	// the worker's death would. The main thread is never ended (it is parked
	// instead), so the start runs on another one.
	started := make(chan error, 1)
	for l.cmd == nil {
		go func() {
			runtime.LockOSThread()
			if syscall.Gettid() == syscall.Getpid() {
				started <- nil
				return
			}
			started <- (startStep{}).Run(context.Background(), l)
		}()
		if err := <-started; err != nil {
			t.Fatal(err)
		}
	}
	e, killed := waitProcess(context.Background(), testLogger(), l.cmd, time.Minute)
	if killed || e.signal != syscall.SIGTERM {
		t.Errorf("process ended with %v (killed by the worker: %v); want SIGTERM from the kernel", e, killed)
	}
}

func TestStartStepTracesTheCommandWithSecretsHidden(t *testing.T) {
	recorder := tracetest.NewSpanRecorder()
	ctx, span := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder)).Tracer("test").Start(context.Background(), "process.start")
	dir := t.TempDir()
	// An executable whose very path holds a secret of the form KEY=VALUE.
	truePath, err := exec.LookPath("true")
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "MY_TOKEN=s3cr3t-path")
	if err := os.Symlink(truePath, exe); err != nil {
		t.Fatal(err)
	}
	l := &launch{
		dir: dir, argv: []string{exe, "--conf", "spark.authenticate.secret=s3cr3t"}, now: time.Now,
		template: &masterv1.Command{Args: []string{exe, "--conf", "spark.authenticate.secret=s3cr3t", "--conf", "spark.executor.memory=1g"}},
	}
	if err := (startStep{}).Run(ctx, l); err != nil {
		t.Fatal(err)
	}
	span.End()
	if err := l.cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	shownExe := filepath.Join(dir, "MY_TOKEN="+redact.Text)
	for _, want := range []attribute.KeyValue{
		attribute.StringSlice("process.command_args", []string{shownExe, "--conf", "spark.authenticate.secret=" + redact.Text, "--conf", "spark.executor.memory=1g"}),
		attribute.String("process.executable.path", shownExe),
	} {
		if got := recorder.Ended()[0].Attributes(); !slices.Contains(got, want) {
			t.Errorf("process.start attributes %v, want %v", got, want)
		}
	}
	if l.cmd.Path != exe || l.cmd.Args[2] != "spark.authenticate.secret=s3cr3t" {
		t.Errorf("process ran %s with %q, want the whole command", l.cmd.Path, l.cmd.Args)
	}
}

func TestStartStepErrorHidesASecretInArgv0(t *testing.T) {
	l := &launch{dir: t.TempDir(), argv: []string{"MY_TOKEN=s3cr3t"}, now: time.Now}
	err := (startStep{}).Run(context.Background(), l)
	if err == nil || strings.Contains(err.Error(), "s3cr3t") || !strings.Contains(err.Error(), "MY_TOKEN="+redact.Text) {
		t.Errorf("err = %v, want one naming MY_TOKEN=%s", err, redact.Text)
	}
}

func TestStartStepGivesTheProcessTheWorkersSpanRelay(t *testing.T) {
	var mu sync.Mutex
	var got []byte
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, b...)
		mu.Unlock()
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	tp, shutdown, err := telemetry.NewTracerProvider(context.Background(), telemetry.ServiceWorker, otlp.Exporter)
	if err != nil {
		t.Fatal(err)
	}
	// The process writes one frame: an ExportTraceServiceRequest with one
	// empty resource_spans entry (field 1, length 0).
	l := &launch{dir: t.TempDir(), argv: []string{"sh", "-c", `printf '\000\000\000\002\012\000' >&"$` + telemetry.RelayFDEnv + `"`},
		environ: os.Environ(), now: time.Now, relay: telemetry.RelayOf(tp)}
	if err := (startStep{}).Run(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	if err := l.cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if string(got) != "\x0a\x00" {
		t.Errorf("the collector got %q from the worker, want the process's frame", got)
	}
}
