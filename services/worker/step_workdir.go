package worker

import (
	"context"
	"os"

	"github.com/glint-cluster/glint/pkg/lifecycle"
)

// workdirStep creates the process's work directory:
// <work-dir>/<app-id>/<executor-id>/ for an executor, <work-dir>/<driver-id>/
// for a driver. The ids in the path were validated when the command arrived.
type workdirStep struct{}

// Name is "workdir".
func (workdirStep) Name() string { return lifecycle.StepWorkdir }

// Run creates l.dir and its parents: it moves the directory made with a
// claimed process there, or else the worker's spare, with its log files
// (launchDir.place); it makes one if neither can be. On a worker that runs
// each application as a user of its own, l.dir is then that user's
// (giveDir).
func (workdirStep) Run(_ context.Context, l *launch) error {
	var ahead *launchDir
	if l.claimed != nil {
		ahead = &l.claimed.standby.launchDir
	} else {
		ahead = l.spare.take(l.dir)
	}
	if ahead != nil {
		var ok bool
		if l.stdout, l.stderr, ok = ahead.place(l.dir); ok {
			return giveDir(l)
		}
	}
	if err := os.MkdirAll(l.dir, 0o750); err != nil {
		return err
	}
	return giveDir(l)
}
