package worker

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/telemetry"
)

// claimStep hands a prestarted executor its launch, as soon as the command
// is known: the arguments after `executor`, the GLINT_* variables with the
// step's trace context, its secrets, and the work directory, which the
// workdir and logs steps make while the executor takes up its launch; the
// handover step then gives it its log files. It is chosen (choose) only when a prestarted
// process fits the launch; if that process is gone, nothing is claimed and
// process.start starts one.
type claimStep struct {
	standby  *standby
	prestart *prestart
}

// Name is "claim".
func (claimStep) Name() string { return lifecycle.StepClaim }

// choose claims a prestarted executor for l when one fits; nil, no step,
// when none does.
func (claimStep) choose(l *launch) step { return l.prestart.claim(l) }

// Run claims the process.
func (c claimStep) Run(ctx context.Context, l *launch) error {
	sb, p := c.standby, c.prestart
	if ctx.Err() != nil {
		sb.discard(p.s.cfg.KillGrace, p.s.log)
		p.fill()
		return fmt.Errorf("not started: %w", context.Cause(ctx))
	}
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(semconv.ProcessCommandArgs(l.redaction.Args(l.template.GetArgs())...),
		semconv.ProcessExecutablePath(l.redaction.Arg(sb.cmd.Path)), semconv.ProcessPID(sb.cmd.Process.Pid))
	// Stamped before the claim is sent, for the same reason as a started
	// process: the claimed one may reach its driver before SendClaim returns.
	claimed := l.now()
	if err := child.SendClaim(sb.claim, child.Claim{Args: l.argv[len(p.command):], Env: telemetry.InjectEnv(telemetry.ContextWithSpanContextOf(ctx, l.trace), l.env), Secrets: l.secrets, Dir: l.dir, UID: l.uid}); err != nil {
		sb.discard(p.s.cfg.KillGrace, p.s.log)
		p.fill()
		span.AddEvent("prestarted executor unusable: process.start starts one", trace.WithAttributes(attribute.String("error", err.Error())))
		return nil
	}
	l.claimed, l.startedAt = &c, claimed
	return nil
}

// abandon ends a claimed process whose launch failed before the handover.
func (c *claimStep) abandon() {
	c.standby.discard(c.prestart.s.cfg.KillGrace, c.prestart.s.log)
	c.prestart.fill()
}
