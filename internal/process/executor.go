package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry"
	"github.com/glint-cluster/glint/services/executor"
)

// NewExecutorCommand is `glint executor`, the executor backend a worker
// starts for an application (and all of glint-executor).
func NewExecutorCommand(g *Globals) *cobra.Command {
	var args child.ExecutorArgs
	cmd := &cobra.Command{
		Use:    child.ExecutorSubcommand,
		Short:  "Run an executor backend (started by workers)",
		Args:   cobra.NoArgs,
		Hidden: true,
		// It watches SIGTERM and SIGINT once its start-up waits on its
		// driver (executor.Config.Waiting).
		Annotations: map[string]string{lateSignals: "", ServiceCommand: ""},
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Its boot, from the worker's fork, ends here.
			booted := time.Now()
			// First of all: an executor never outlives its worker.
			ctx, stopWatching, err := child.WatchWorker(cmd.Context(), WorkerWatchInterval, WorkerDeathGrace)
			if err != nil {
				return err
			}
			defer stopWatching()
			return runExecutor(ctx, g, &args, booted)
		},
	}
	args.Flags(cmd.Flags())
	return cmd
}

// runExecutor runs the executor of args (its flags, or its claim's) until
// it ends: what needs no launch first, then its launch, then its service.
func runExecutor(ctx context.Context, g *Globals, args *child.ExecutorArgs, booted time.Time) error {
	// What needs no launch is made first, so that a prestarted executor
	// (glint worker --prestart-executors) has it made when its claim
	// comes: the launch it becomes, with its arguments.
	var cfg executor.Config
	// The worker opened this executor's socket (child.ListenFDEnv); run by
	// hand, it listens on an ephemeral port once its arguments name its
	// host.
	ln, err := child.InheritedListener()
	if err != nil {
		return err
	}
	var warmErr error
	if os.Getenv(child.ClaimFDEnv) != "" {
		// Its start is on no launch's path.
		WatchSignals(ctx)
		// A warm-up that failed leaves the launch colder, not impossible:
		// it is logged once the claim made the log.
		warmErr = executor.Warm(ctx, otel.GetTracerProvider())
	}
	claim, secrets, err := receiveLaunch(g, args, &cfg)
	if claim != nil {
		// Its log output waits for its log files, and so do its last
		// words: the channel closes with the process at the latest.
		defer func() { _ = claim.Settle() }()
	}
	if err != nil {
		return err
	}
	cfg.Waiting = func() { WatchSignals(ctx) }
	// The executor's spans continue the worker's process.start span, and
	// are flushed before the process exits.
	log, tp, stopObserving, err := g.Observe(ctx, telemetry.ServiceExecutor,
		map[string]string{"app_id": args.AppID, "executor_id": fmt.Sprint(args.ExecutorID)},
		telemetry.AppID.String(args.AppID), telemetry.ExecutorID.Int(int(args.ExecutorID)))
	if err != nil {
		return err
	}
	defer stopObserving()
	if claim == nil {
		recordBoot(ctx, tp, booted)
		cfg.Booted = booted
	}
	if warmErr != nil {
		log.Warn("prestarted executor: warm-up before the claim failed", "err", warmErr)
	}
	url := ""
	if ln == nil {
		ln, url, err = Listen(":0", args.Hostname)
		if err != nil {
			return err
		}
	} else {
		url = rpc.URL(ln.Addr(), args.Hostname)
	}
	cfg.ExecutorArgs, cfg.URL, cfg.Apps, cfg.Logger, cfg.TracerProvider = *args, url, g.Apps, log, tp
	cfg.AppToken = secrets.AppToken
	s, err := executor.New(cfg)
	if err != nil {
		ln.Close()
		return err
	}
	if err := Serve(telemetry.ContextFromEnv(ctx), log, ln, url, "", s, args.Hostname); err != nil {
		return fmt.Errorf("executor %d of %s: %w", args.ExecutorID, args.AppID, err)
	}
	return nil
}

// receiveLaunch waits for what makes this process one executor: the claim
// of a prestarted one (its arguments, its token; nil claim otherwise), or
// the secrets pipe of one started for its launch, whose arguments are its
// flags. A claim also sets how cfg settles and takes its cores.
func receiveLaunch(g *Globals, args *child.ExecutorArgs, cfg *executor.Config) (*child.Claimed, child.Secrets, error) {
	claim, err := child.ReceiveClaim()
	switch {
	case errors.Is(err, child.ErrNotPrestarted):
		secrets, err := child.ReceiveSecrets()
		return nil, secrets, err
	case err != nil:
		return nil, child.Secrets{}, err
	}
	// Its log files and work directory follow the claim: its log output is
	// held until they are in place, which it waits for before it registers
	// (cfg.Settle).
	g.Stderr = claim.Hold(g.Stderr)
	// It was started on one core (GOMAXPROCS=1): it takes its cores once
	// registered, off its launch's path.
	cfg.Settle = claim.Settle
	cfg.Registered = func() {
		claim.Registered()
		if cores := int(args.Cores); cores > 0 && cores != runtime.GOMAXPROCS(0) {
			runtime.GOMAXPROCS(cores)
		}
	}
	fs := pflag.NewFlagSet("executor", pflag.ContinueOnError)
	*args = child.ExecutorArgs{}
	args.Flags(fs)
	if err := fs.Parse(claim.Args); err != nil {
		return claim, claim.Secrets, fmt.Errorf("claimed executor: %w", err)
	}
	return claim, claim.Secrets, nil
}

// recordBoot records the executor.boot span of a process its worker forked
// (child.ForkedAtEnv) and that reached its main at booted: the time between
// the worker's process.start and the executor's first call, which would
// otherwise be in no span. A prestarted executor booted before its launch,
// on no launch's path: it has none.
func recordBoot(ctx context.Context, tp trace.TracerProvider, booted time.Time) {
	forked, ok := child.Forked()
	if !ok {
		return
	}
	_, span := telemetry.Tracer(tp).Start(telemetry.ContextFromEnv(ctx), "executor.boot", trace.WithTimestamp(forked))
	span.End(trace.WithTimestamp(booted))
}
