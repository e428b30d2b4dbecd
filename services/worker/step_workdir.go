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

// Run creates l.dir and its parents.
func (workdirStep) Run(_ context.Context, l *launch) error {
	return os.MkdirAll(l.dir, 0o750)
}
