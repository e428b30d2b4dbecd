package worker

import (
	"context"
	"fmt"
	"os/exec"
	"syscall"
)

// startStep forks and execs the process in its own process group (so a kill
// reaches its children too), in its work directory, with stdout and stderr
// going to its log files and stdin from /dev/null.
type startStep struct{}

// Name is "process.start".
func (startStep) Name() string { return "process.start" }

// Run starts the process unless it was killed before it could start, and
// records when it started.
func (startStep) Run(ctx context.Context, l *launch) error {
	defer l.closeLogs()
	if ctx.Err() != nil {
		return fmt.Errorf("not started: %w", context.Cause(ctx))
	}
	cmd := &exec.Cmd{
		Path:        l.path,
		Args:        l.argv,
		Env:         l.environ,
		Dir:         l.dir,
		Stdout:      l.stdout,
		Stderr:      l.stderr,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	l.cmd, l.startedAt = cmd, l.now()
	return nil
}
