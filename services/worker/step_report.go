package worker

import (
	"context"
	"errors"

	"github.com/glint-cluster/glint/pkg/lifecycle"
)

// reportStep records that the process runs: the runner marks it RUNNING and,
// for an executor, tells the master (ExecutorStateChanged RUNNING with its
// launch and start times). It runs only after process.start succeeded, so
// RUNNING is never reported for a process that did not start.
type reportStep struct {
	running func(ctx context.Context, l *launch)
}

// Name is "report".
func (reportStep) Name() string { return lifecycle.StepReport }

// Run reports the running process.
func (s reportStep) Run(ctx context.Context, l *launch) error {
	if l.cmd == nil || l.cmd.Process == nil {
		return errors.New("no process was started")
	}
	s.running(ctx, l)
	return nil
}
