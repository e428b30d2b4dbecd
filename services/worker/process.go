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
)

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
