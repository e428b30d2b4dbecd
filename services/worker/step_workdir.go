package worker

import (
	"context"
	"os"
)

// workdirStep creates the process's work directory:
// <work-dir>/<app-id>/<executor-id>/ for an executor, <work-dir>/<driver-id>/
// for a driver. The ids in the path were validated when the command arrived.
type workdirStep struct{}

// Name is "workdir".
func (workdirStep) Name() string { return "workdir" }

// Run creates l.dir and its parents; for a claimed process, it moves the
// directory made with it there, with its log files (standby.place).
func (workdirStep) Run(_ context.Context, l *launch) error {
	if l.claimed != nil {
		var ok bool
		if l.stdout, l.stderr, ok = l.claimed.standby.place(l.dir); ok {
			return nil
		}
	}
	return os.MkdirAll(l.dir, 0o750)
}
