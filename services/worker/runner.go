package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"time"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// step is one stage of launching a process, one file each (step_*.go), as
// Nomad's task-runner hooks are. Its name is its log field and its span name.
type step interface {
	// Name is the step's stable name, e.g. "process.start".
	Name() string
	// Run performs the step, reading and filling in l.
	Run(ctx context.Context, l *launch) error
}

// launch is one start of one process: what its runner sets up and its steps
// fill in, in order.
type launch struct {
	// Set by the runner.
	dir      string            // the process's work directory
	template *masterv1.Command // the command as the master sent it
	vars     map[string]string // template variables: "APP_ID" replaces {{APP_ID}}
	env      []string          // GLINT_* variables, "KEY=value"
	now      func() time.Time
	attrs    []attribute.KeyValue // span attributes naming the process (glint.app.id, …)
	// listenHost, when set, makes process.start open the process's listening
	// socket on it and hand it over as file descriptor 3 (GLINT_LISTEN_FD).
	listenHost string

	// Filled in by the steps.
	argv           []string // the substituted arguments (command)
	path           string   // argv[0] resolved to an absolute path (process.start)
	environ        []string // the process's whole environment (command)
	stdout, stderr *os.File // its log files (logs; closed by process.start)
	cmd            *exec.Cmd
	startedAt      time.Time // when the process started (process.start)
	url            string    // where the process serves, from its handed-over socket (process.start)
}

// closeLogs closes the log files once the process holds its own copies.
func (l *launch) closeLogs() {
	if l.stdout != nil {
		l.stdout.Close()
		l.stdout = nil
	}
	if l.stderr != nil {
		l.stderr.Close()
		l.stderr = nil
	}
}

// stepError is a step's failure, named after the step:
// `command: exec: "/nope": stat /nope: no such file or directory`.
type stepError struct {
	step string
	err  error
}

func (e *stepError) Error() string { return e.step + ": " + e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

// runSteps runs steps in order, each in a span named after it, timing each,
// and stops at the first failure, which it records on the step's span. It
// returns each step's duration as a log attribute named after the step. A
// failure means no process is running: process.start is the only step that
// starts one, and no step after it can fail once it did.
func runSteps(ctx context.Context, tracer trace.Tracer, log *slog.Logger, steps []step, l *launch) ([]any, error) {
	timings := make([]any, 0, len(steps))
	for _, st := range steps {
		begin := time.Now()
		sctx, span := tracer.Start(ctx, st.Name(), trace.WithAttributes(l.attrs...))
		err := st.Run(sctx, l)
		took := time.Since(begin)
		timings = append(timings, slog.Duration(st.Name(), took))
		if err != nil {
			telemetry.Fail(span, err)
			span.End()
			log.DebugContext(sctx, "launch step failed", "step", st.Name(), "duration", took, "err", err)
			l.closeLogs()
			return timings, &stepError{step: st.Name(), err: err}
		}
		span.End()
		log.DebugContext(sctx, "launch step done", "step", st.Name(), "duration", took)
	}
	return timings, nil
}

// exit is how a process ended.
type exit struct {
	code   int            // its exit code, when it exited
	signal syscall.Signal // the signal that killed it, 0 when it exited
	err    error          // why its status is unknown, if it is
}

// exitOf reads a process's exit from its state; waitErr explains a missing state.
func exitOf(ps *os.ProcessState, waitErr error) exit {
	if ps == nil {
		if waitErr == nil {
			waitErr = errors.New("no process state")
		}
		return exit{code: -1, err: waitErr}
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exit{signal: ws.Signal()}
	}
	return exit{code: ps.ExitCode()}
}

// success reports a zero exit code.
func (e exit) success() bool { return e.err == nil && e.signal == 0 && e.code == 0 }

// status is the exit status reported to the master: the exit code, or 128+N
// for a process killed by signal N, as a shell (and Spark's JVM) reports it.
func (e exit) status() *int32 {
	switch {
	case e.err != nil:
		return nil
	case e.signal != 0:
		s := int32(128 + e.signal)
		return &s
	default:
		s := int32(e.code)
		return &s
	}
}

func (e exit) String() string {
	switch {
	case e.err != nil:
		return fmt.Sprintf("exit status unknown: %v", e.err)
	case e.signal != 0:
		return fmt.Sprintf("killed by signal %d (%v)", int(e.signal), e.signal)
	default:
		return fmt.Sprintf("exited with code %d", e.code)
	}
}

// waitProcess waits for cmd's process to end. If ctx ends first (the process
// is killed on request) its process group gets SIGTERM and, after grace,
// SIGKILL. Whatever is left of the group once the process has ended is killed
// too, so no grandchild outlives it. It returns how the process ended and
// whether it was killed on request.
func waitProcess(ctx context.Context, log *slog.Logger, cmd *exec.Cmd, grace time.Duration) (exit, bool) {
	pgid := cmd.Process.Pid
	done := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(done)
	}()
	killed := false
	select {
	case <-done:
	case <-ctx.Done():
		killed = true
		signalGroup(log, pgid, syscall.SIGTERM)
		timer := time.NewTimer(grace)
		select {
		case <-done:
		case <-timer.C:
			log.Info("process ignored SIGTERM; sending SIGKILL", "pid", pgid, "grace", grace)
			signalGroup(log, pgid, syscall.SIGKILL)
			<-done
		}
		timer.Stop()
	}
	signalGroup(log, pgid, syscall.SIGKILL)
	var exitErr *exec.ExitError
	if errors.As(waitErr, &exitErr) {
		waitErr = nil
	}
	return exitOf(cmd.ProcessState, waitErr), killed
}

// signalGroup sends sig to every process of the group pgid; a group that is
// already gone is not an error.
func signalGroup(log *slog.Logger, pgid int, sig syscall.Signal) {
	if err := syscall.Kill(-pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		log.Warn("signal process group", "pgid", pgid, "signal", sig, "err", err)
	}
}
