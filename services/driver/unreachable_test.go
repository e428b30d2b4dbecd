package driver_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/glint-cluster/glint/internal/servicetest"
	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/driver/v1/driverv1connect"
	"github.com/glint-cluster/glint/pkg/app"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry"
	"github.com/glint-cluster/glint/services/driver"
)

// logBuffer collects a driver's logs.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startLoggingDriver is startDriver with the driver's logs kept in logs.
func startLoggingDriver(t *testing.T, a *app.App, conf map[string]string, logs io.Writer) *driver.Driver {
	t.Helper()
	return servicetest.Driver(t, driver.Config{
		Masters: []string{startMaster(t)}, App: a,
		ExecutorCommand: []string{"/bin/false"}, Conf: conf, ExecutorMemoryMiB: 256,
		Instruments: telemetry.Instruments{Logger: slog.New(slog.NewTextHandler(logs, nil))},
	})
}

// holdOnce is a task that, on its first attempt for an input starting with
// "hold", signals held and runs until its executor stops; an input "fail"
// fails; anything else is its result.
func holdOnce(held chan<- string) app.TaskFunc {
	var mu sync.Mutex
	tried := map[string]bool{}
	return func(ctx context.Context, in []byte) ([]byte, error) {
		mu.Lock()
		first := !tried[string(in)]
		tried[string(in)] = true
		mu.Unlock()
		switch {
		case string(in) == "fail":
			return nil, errors.New("disk on fire")
		case first && strings.HasPrefix(string(in), "hold"):
			held <- string(in)
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return in, nil
	}
}

type jobResult struct {
	out [][]byte
	err error
}

// runJob runs inputs as a job of d in the background.
func runJob(d *driver.Driver, inputs ...string) <-chan jobResult {
	res := make(chan jobResult, 1)
	go func() {
		in := make([][]byte, len(inputs))
		for i, s := range inputs {
			in[i] = []byte(s)
		}
		out, err := d.RunTasks(context.Background(), "task", in)
		res <- jobResult{out, err}
	}()
	return res
}

// await is the job's result, or the test's failure if it does not end.
func await(t *testing.T, what string, res <-chan jobResult) jobResult {
	t.Helper()
	select {
	case r := <-res:
		return r
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not end", what)
		return jobResult{}
	}
}

// An executor that a LaunchTask cannot reach — it was killed, or its
// connection breaks — is removed as Spark removes an executor whose endpoint
// disconnected: its running tasks and the batch it did not take run on
// another executor, and none of them counts as a failure, so a job with
// spark.task.maxFailures=1 still succeeds. The driver logs why.
func TestAnUnreachableExecutorIsRemovedAndItsTasksRunElsewhereUncounted(t *testing.T) {
	t.Run("it was killed while running a task", func(t *testing.T) {
		held := make(chan string, 1)
		a := echoApp(holdOnce(held))
		logs := &logBuffer{}
		d := startLoggingDriver(t, a, map[string]string{"spark.task.maxFailures": "1"}, logs)
		kill := startKillableExecutor(t, d, a, 0, 2)
		running := runJob(d, "hold")
		<-held
		// Killed with a core free and a task running; the master has not
		// reported its end (it never does here).
		kill()
		startExecutor(t, d, a, 1, 1)
		// Executor 0 is the first offered the next job's task.
		next := await(t, "the job offered to the killed executor", runJob(d, "next"))
		if next.err != nil || string(next.out[0]) != "next" {
			t.Errorf("job offered to the killed executor: %q, %v; want it run on executor 1, uncounted", next.out, next.err)
		}
		if r := await(t, "the job whose task the killed executor ran", running); r.err != nil || string(r.out[0]) != "hold" {
			t.Errorf("job whose task the killed executor ran: %q, %v; want it run again on executor 1, uncounted", r.out, r.err)
		}
		if !strings.Contains(logs.String(), "executor unreachable: ") {
			t.Errorf("no removal of executor 0 as unreachable in the driver's log:\n%s", logs)
		}
	})
	t.Run("its connections break", func(t *testing.T) {
		a := echoApp(holdOnce(nil))
		logs := &logBuffer{}
		d := startLoggingDriver(t, a, map[string]string{"spark.task.maxFailures": "1"}, logs)
		// Executor 0 is a listener that reads each call and hangs up.
		ln, url := servicetest.Listen(t)
		t.Cleanup(func() { ln.Close() })
		go hangUpOnEveryCall(ln)
		client := driverv1connect.NewDriverServiceClient(rpc.NewHTTPClient(), d.URL(), rpc.ClientOptions(noop.NewTracerProvider(), d.AppToken())...)
		if _, err := client.RegisterExecutor(context.Background(), connect.NewRequest(&driverv1.RegisterExecutorRequest{
			AppId: d.AppID(), ExecutorId: 0, Hostname: "127.0.0.1", Cores: 1, ExecutorUrl: url,
		})); err != nil {
			t.Fatal(err)
		}
		if _, err := client.LaunchedExecutor(context.Background(), connect.NewRequest(&driverv1.LaunchedExecutorRequest{ExecutorId: 0})); err != nil {
			t.Fatal(err)
		}
		startExecutor(t, d, a, 1, 1)
		for _, job := range []string{"first", "second"} {
			if r := await(t, "the "+job+" job", runJob(d, job)); r.err != nil || string(r.out[0]) != job {
				t.Errorf("%s job: %q, %v; want it run on executor 1, uncounted", job, r.out, r.err)
			}
		}
		if !strings.Contains(logs.String(), "executor unreachable: ") {
			t.Errorf("no removal of executor 0 as unreachable in the driver's log:\n%s", logs)
		}
	})
}

// A KillTask that cannot reach its executor removes it too: the tasks it
// still held of other jobs run elsewhere, uncounted, rather than wait for
// the master to report its end.
func TestAKillTaskThatFindsItsExecutorUnreachableRemovesIt(t *testing.T) {
	held := make(chan string, 2)
	a := echoApp(holdOnce(held))
	d := startDriver(t, a, map[string]string{"spark.task.maxFailures": "1"})
	kill := startKillableExecutor(t, d, a, 0, 2)
	other := runJob(d, "hold-other")
	<-held
	failing := runJob(d, "hold", "fail") // "hold" takes executor 0's other core
	<-held
	kill()
	// Executor 1 fails the job's second task; the job fails, and the driver
	// kills its first task on executor 0.
	startExecutor(t, d, a, 1, 1)
	if r := await(t, "the failing job", failing); r.err == nil || !strings.Contains(r.err.Error(), "disk on fire") {
		t.Errorf("failing job: %q, %v; want its task's failure", r.out, r.err)
	}
	if r := await(t, "the job the killed executor held", other); r.err != nil || string(r.out[0]) != "hold-other" {
		t.Errorf("job the killed executor held: %q, %v; want it run again on executor 1, uncounted", r.out, r.err)
	}
}

// An executor's refusal of a batch is its answer, not its loss: the tasks
// fail, counted, and the executor is still offered tasks.
func TestAnExecutorsRefusalOfTasksCountsAsTheirFailure(t *testing.T) {
	a := echoApp(holdOnce(nil))
	d := startDriver(t, a, map[string]string{"spark.task.maxFailures": "1"})
	// Executor 0's binary has no such task: it refuses the batch (NotFound).
	startExecutor(t, d, &app.App{Name: a.Name, Run: a.Run, Tasks: map[string]app.TaskFunc{"other": holdOnce(nil)}}, 0, 1)
	for _, job := range []string{"first", "second"} {
		r := await(t, "the "+job+" job", runJob(d, job))
		if r.err == nil || !strings.Contains(r.err.Error(), "failed 1 times") || !strings.Contains(r.err.Error(), "launch task on executor 0") {
			t.Errorf("%s job: %q, %v; want it failed by executor 0's refusal", job, r.out, r.err)
		}
	}
}

// startKillableExecutor is startExecutor, with a kill that ends the
// executor at once, as SIGKILL would: it tells the driver nothing, reports
// none of its running tasks, and closes its listener.
func startKillableExecutor(t *testing.T, d *driver.Driver, a *app.App, id, cores int32) (kill func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ln, _ := servicetest.Listen(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = servicetest.RunExecutor(ctx, ln, executorConfig(t, d, a, id, cores))
	}()
	kill = func() { cancel(); <-done }
	t.Cleanup(kill)
	return kill
}

// hangUpOnEveryCall accepts connections on ln until it is closed, reads what
// comes first on each, and closes it unanswered.
func hangUpOnEveryCall(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_, _ = c.Read(make([]byte, 4096))
		}()
	}
}
