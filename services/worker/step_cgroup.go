package worker

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/glint-cluster/glint/pkg/contain"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/resources"
)

// cgroupStep makes the process's cgroup under the worker's (Config.Cgroup):
// its memory limit is its granted memory plus the overhead of
// contain.MemoryLimit, its CPU its granted cores (Config.CPULimit), with
// Config.PidsLimit processes and threads. process.start starts the process
// in it. A claimed prestarted process has one already, which the claim step
// made its launch's before it handed the process its launch, so no code of
// the launch runs outside it: the step is then skipped. The exit phase
// reads it (an OOM kill) and removes it. It runs only on a contained worker.
type cgroupStep struct{}

// Name is "cgroup".
func (cgroupStep) Name() string { return lifecycle.StepCgroup }

// choose skips the step on a worker that contains nothing, and for a
// claimed process, which has its group.
func (cgroupStep) choose(l *launch) step {
	if l.cgroups == nil || l.group != nil {
		return nil
	}
	return cgroupStep{}
}

// Run makes the cgroup.
func (cgroupStep) Run(ctx context.Context, l *launch) error {
	g, err := l.cgroups.New(l.cgroupName, l.limits)
	if err != nil {
		return err
	}
	l.group = g
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("glint.cgroup", g.Path()))
	return nil
}

// limits are the cgroup limits of a process granted cores and memoryMiB.
func (s *Server) limits(cores int32, memoryMiB int64) contain.Limits {
	return contain.Limits{Cores: cores, MemoryBytes: contain.MemoryLimit(memoryMiB), Pids: s.cfg.PidsLimit}
}

// oomMessage is the end of a process the kernel killed at its group's
// memory limit, in words that name it: "killed: memory limit 1.0 GiB
// exceeded (peak 1.0 GiB)", then how it exited.
func oomMessage(limit int64, st contain.Stat, e exit) string {
	return fmt.Sprintf("killed: memory limit %s exceeded (peak %s); %v", resources.FormatBytes(limit), resources.FormatBytes(st.PeakBytes), e)
}
