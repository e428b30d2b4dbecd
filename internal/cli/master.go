package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/glint-cluster/glint/pkg/telemetry"
	"github.com/glint-cluster/glint/services/master"
)

type masterFlags struct {
	listen             string
	host               string
	urlFile            string
	workerTimeout      time.Duration
	spreadOut          bool
	maxExecutorRetries int
}

func newMasterCommand(g *globals) *cobra.Command {
	f := &masterFlags{}
	cmd := &cobra.Command{
		Use:   "master",
		Short: "Run the master",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runMaster(cmd.Context(), g, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", ":7077", "address to serve Connect, /json and /healthz on")
	fl.StringVar(&f.host, "host", "", "host name workers and drivers use to reach the master (default: the listen host, else this machine's host name)")
	fl.StringVar(&f.urlFile, "url-file", "", "write the master's URL to this file once it serves")
	fl.DurationVar(&f.workerTimeout, "worker-timeout", 60*time.Second, "spark.worker.timeout: a worker without a heartbeat for this long is DEAD")
	fl.BoolVar(&f.spreadOut, "spread-out", true, "spark.deploy.spreadOut: spread executors over workers rather than fill one first")
	fl.IntVar(&f.maxExecutorRetries, "max-executor-retries", 10, "spark.deploy.maxExecutorRetries: back-to-back executor failures before an app with no running executor FAILS (-1 disables)")
	return cmd
}

func runMaster(ctx context.Context, g *globals, f *masterFlags) error {
	if f.workerTimeout <= 0 {
		return fmt.Errorf("--worker-timeout %s: must be positive", f.workerTimeout)
	}
	log, tp, stopObserving, err := g.observe(ctx, telemetry.ServiceMaster, nil)
	if err != nil {
		return err
	}
	defer stopObserving()
	host := f.host
	if host == "" {
		host = listenHost(f.listen)
	}
	if host == "" {
		if host, err = os.Hostname(); err != nil {
			return fmt.Errorf("find host name: %w (set --host)", err)
		}
	}

	// Listener: opened first, because its address is the master's URL.
	ln, url, err := listen(f.listen, host)
	if err != nil {
		return err
	}

	// Master: worker, application and driver state, and the scheduler.
	m, err := master.New(master.Config{
		URL: url, WorkerTimeout: f.workerTimeout, SpreadOut: f.spreadOut,
		MaxExecutorRetries: f.maxExecutorRetries,
		Instruments:        telemetry.Instruments{Logger: log, TracerProvider: tp},
	})
	if err != nil {
		ln.Close()
		return err
	}

	log.Info("master starting", "worker_timeout", f.workerTimeout.String(), "spread_out", f.spreadOut)
	return serve(ctx, log, ln, url, f.urlFile, m)
}
