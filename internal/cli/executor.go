package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/telemetry"
	"github.com/glint-cluster/glint/services/executor"
)

func newExecutorCommand(g *globals) *cobra.Command {
	var cfg executor.Config
	var args child.ExecutorArgs
	cmd := &cobra.Command{
		Use:    "executor",
		Short:  "Run an executor backend (started by workers)",
		Args:   cobra.NoArgs,
		Hidden: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// First of all: an executor never outlives its worker.
			ctx, stopWatching, err := child.WatchWorker(cmd.Context(), workerWatchInterval)
			if err != nil {
				return err
			}
			defer stopWatching()
			log, tp, stopTelemetry, err := g.observe(ctx, telemetry.ServiceExecutor,
				telemetry.AppID.String(args.AppID), telemetry.ExecutorID.Int(int(args.ExecutorID)))
			if err != nil {
				return err
			}
			// The executor's spans continue the worker's process.start span,
			// and are flushed before the process exits.
			defer stopTelemetry()
			stopProfiling, err := g.profile(telemetry.ServiceExecutor,
				map[string]string{"app_id": args.AppID, "executor_id": fmt.Sprint(args.ExecutorID)}, log)
			if err != nil {
				return err
			}
			defer stopProfiling()
			if cfg.Listener, err = child.InheritedListener(); err != nil {
				return err
			}
			cfg.DriverURL, cfg.ExecutorID, cfg.Hostname, cfg.Cores, cfg.AppID, cfg.WorkerURL = args.DriverURL, args.ExecutorID, args.Hostname, args.Cores, args.AppID, args.WorkerURL
			cfg.Apps, cfg.Logger, cfg.TracerProvider = g.apps, log, tp
			if err := executor.Run(telemetry.ContextFromEnv(ctx), cfg); err != nil {
				return fmt.Errorf("executor %d of %s: %w", args.ExecutorID, args.AppID, err)
			}
			return nil
		},
	}
	args.Flags(cmd.Flags())
	return cmd
}
