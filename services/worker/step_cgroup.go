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
// in it. A claimed prestarted process was born in a group of its own, which
// the step makes its launch's instead (contain.Group.Become), while the
// process takes its claim: the process waits for the log files the
// handover step sends before it registers with its driver, so no task runs
// outside the launch's group. The exit phase reads the group (an OOM kill)
// and removes it. The step runs only on a contained worker.
type cgroupStep struct{}

// Name is "cgroup".
func (cgroupStep) Name() string { return lifecycle.StepCgroup }

// choose skips the step on a worker that contains nothing.
func (cgroupStep) choose(l *launch) step {
	if l.cgroups == nil {
		return nil
	}
	return cgroupStep{}
}

// Run makes the cgroup, or the claimed process's its launch's; if that
// fails, the claimed process is ended and process.start starts one in a
// group made for it.
func (cgroupStep) Run(ctx context.Context, l *launch) error {
	span := trace.SpanFromContext(ctx)
	if c := l.claimed; c != nil {
		g := c.standby.group
		err := g.Become(l.cgroupName, l.limits)
		if err == nil {
			l.group, c.standby.group = g, nil
			span.SetAttributes(attribute.String("glint.cgroup", g.Path()))
			return nil
		}
		c.abandon()
		l.claimed = nil
		span.AddEvent("claimed executor's cgroup not made its launch's: process.start starts one", trace.WithAttributes(attribute.String("error", err.Error())))
	}
	g, err := l.cgroups.New(l.cgroupName, l.limits)
	if err != nil {
		return err
	}
	l.group = g
	span.SetAttributes(attribute.String("glint.cgroup", g.Path()))
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
