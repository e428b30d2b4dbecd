package worker

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/lifecycle"
)

// handoverStep takes process.start's place in a claimed launch: it gives the
// claimed executor its log files, which the logs step made in its work
// directory; the executor registers with its driver only once it has them.
// If the process is gone, it starts one as process.start would.
type handoverStep struct{}

// Name is "handover".
func (handoverStep) Name() string { return lifecycle.StepHandover }

// Run hands the log files over, or starts a process if that fails.
func (handoverStep) Run(ctx context.Context, l *launch) error {
	defer l.closeLogs()
	c := l.claimed
	l.claimed = nil
	sb, p := c.standby, c.prestart
	if ctx.Err() != nil {
		c.abandon()
		return fmt.Errorf("not started: %w", context.Cause(ctx))
	}
	if err := child.SendLogs(sb.claim, l.stdout, l.stderr); err != nil {
		c.abandon()
		trace.SpanFromContext(ctx).AddEvent("claimed executor unusable: starting a process", trace.WithAttributes(attribute.String("error", err.Error())))
		return startStep{}.Run(ctx, l)
	}
	// The claimed executor says when it registered with its driver (or its
	// channel closes with it): the runner reports it running, and the
	// replacement starts, only then, so that neither competes with the
	// launch for the CPU.
	registered := make(chan struct{})
	go func() {
		_, _ = sb.claim.Read(make([]byte, 1))
		sb.claim.Close()
		close(registered)
		p.fill()
	}()
	l.cmd, l.path, l.url, l.registered = sb.cmd, sb.cmd.Path, sb.url, registered
	return nil
}
