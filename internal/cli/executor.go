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
	var executorID, cores int
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
				telemetry.AppID.String(cfg.AppID), telemetry.ExecutorID.Int(executorID))
			if err != nil {
				return err
			}
			// The executor's spans continue the worker's process.start span,
			// and are flushed before the process exits.
			defer stopTelemetry()
			stopProfiling, err := g.profile(telemetry.ServiceExecutor,
				map[string]string{"app_id": cfg.AppID, "executor_id": fmt.Sprint(executorID)}, log)
			if err != nil {
				return err
			}
			defer stopProfiling()
			if cfg.Listener, err = child.InheritedListener(); err != nil {
				return err
			}
			cfg.ExecutorID, cfg.Cores, cfg.Apps, cfg.Logger, cfg.TracerProvider = int32(executorID), int32(cores), g.apps, log, tp
			if err := executor.Run(telemetry.ContextFromEnv(ctx), cfg); err != nil {
				return fmt.Errorf("executor %d of %s: %w", executorID, cfg.AppID, err)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.DriverURL, "driver-url", "", "the driver's URL")
	fl.IntVar(&executorID, "executor-id", -1, "this executor's id within its application")
	fl.StringVar(&cfg.Hostname, "hostname", "", "host name the driver uses to reach this executor")
	fl.IntVar(&cores, "cores", 0, "cores (task slots)")
	fl.StringVar(&cfg.AppID, "app-id", "", "the application id")
	fl.StringVar(&cfg.WorkerURL, "worker-url", "", "the launching worker's URL")
	return cmd
}
