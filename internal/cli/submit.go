package cli

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/glint-cluster/glint/internal/process"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/resources"
	"github.com/glint-cluster/glint/pkg/telemetry"
	"github.com/glint-cluster/glint/pkg/telemetry/otlp"
	"github.com/glint-cluster/glint/services/driver"
)

type submitFlags struct {
	appFlags
	deployMode   string
	driverCores  int
	driverMemory string
	supervise    bool
	wait         bool
	every        time.Duration
	retryTimeout time.Duration
}

func newSubmitCommand(g *globals) *cobra.Command {
	f := &submitFlags{}
	cmd := &cobra.Command{
		Use:   "submit [flags] APP [ARGS...]",
		Short: "Submit an application, like spark-submit",
		Long: "Submit an application. In client mode (the default) the driver runs in this process and\n" +
			"the application's output is printed here; in cluster mode a worker runs the driver.",
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.every <= 0 {
				return runSubmit(cmd.Context(), g, f, args)
			}
			// Bad flags fail at once rather than on every run.
			if _, err := f.driverConfig(g, args); err != nil {
				return err
			}
			repeat(cmd.Context(), g, f.every, func(ctx context.Context) error { return runSubmit(ctx, g, f, args) })
			return nil
		},
	}
	fl := cmd.Flags()
	f.register(fl)
	fl.StringVar(&f.deployMode, "deploy-mode", "client", "where the driver runs: client (here) or cluster (on a worker)")
	fl.IntVar(&f.driverCores, "driver-cores", 1, "cores for the driver (cluster mode)")
	fl.StringVar(&f.driverMemory, "driver-memory", "1g", "memory for the driver (cluster mode)")
	fl.BoolVar(&f.supervise, "supervise", false, "restart the driver if it fails (cluster mode)")
	fl.BoolVar(&f.wait, "wait", false, "show the application's progress (executors, tasks, elapsed time) until it ends; in cluster mode follow the driver and exit with its status")
	fl.DurationVar(&f.every, "every", 0, "submit again every interval until stopped (a steady load for dashboards); a failed run is reported, not fatal")
	retryFlag(fl, &f.retryTimeout)
	return cmd
}

func runSubmit(ctx context.Context, g *globals, f *submitFlags, args []string) (err error) {
	cfg, err := f.driverConfig(g, args)
	if err != nil {
		return err
	}
	if f.deployMode != "client" && f.deployMode != "cluster" {
		return fmt.Errorf("--deploy-mode %q: want client or cluster", f.deployMode)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this binary: %w", err)
	}
	if cfg.SubmitToken, err = g.clientToken(cfg.Masters); err != nil {
		return err
	}
	log, tp, stopObserving, err := g.Observe(ctx, telemetry.ServiceSubmit, nil)
	if err != nil {
		return err
	}
	defer stopObserving()

	// The submit span is the root of the application's trace: every span of
	// every process that works for the application descends from it. Its
	// name is what Jaeger titles the trace with; the driver adds the
	// application's id once registered.
	name := cmp.Or(cfg.Name, cfg.App.Name)
	if f.deployMode == "cluster" {
		name = clusterName(f.name, args)
	}
	ctx, span := telemetry.StartSubmit(ctx, tp, name, attribute.String("glint.deploy_mode", f.deployMode))
	defer func() {
		if err != nil {
			telemetry.Fail(span, err)
		}
		span.End()
	}()
	if f.deployMode == "cluster" {
		return submitCluster(ctx, g, f, exe, cfg.Masters, cfg.SubmitToken, args)
	}
	var watch func(context.Context, *driver.Driver)
	stdout := g.Stdout
	if f.wait {
		// The application's progress on stderr, its output above it.
		line := newProgressLine(g.Stderr, time.Now())
		stdout = line.above(stdout)
		watch = func(ctx context.Context, d *driver.Driver) { followProgress(ctx, line, d) }
	}
	// --retry-timeout 0 (try once): one round.
	cfg.UnreachableTimeout = max(f.retryTimeout, time.Nanosecond)
	stopDriverTelemetry, err := clientMode(ctx, &cfg, exe, stdout, log)
	if err != nil {
		return err
	}
	defer stopDriverTelemetry()
	_, err = serveDriver(ctx, log, cfg, watch)
	return masterUnreachable(strings.Join(cfg.Masters, ", "), err)
}

// clientMode completes cfg for a driver that runs in this process: executors
// run this binary, output goes to stdout, and the driver traces as
// glint-driver though it shares the process with glint-submit. stop flushes
// the driver's spans.
func clientMode(ctx context.Context, cfg *driver.Config, exe string, stdout io.Writer, log *slog.Logger) (stop func(), err error) {
	tp, shutdown, err := telemetry.NewTracerProvider(ctx, telemetry.ServiceDriver, otlp.Exporter)
	if err != nil {
		return nil, err
	}
	cfg.ExecutorCommand, cfg.Stdout, cfg.Logger, cfg.TracerProvider = child.ExecutorCommand(exe), stdout, log, tp
	return process.Flusher(log, shutdown), nil
}

// submitCluster is spark-submit's cluster mode: the master queues a driver,
// which a worker runs as `glint driver`.
func submitCluster(ctx context.Context, g *globals, f *submitFlags, exe string, masters []string, token string, args []string) error {
	if f.driverCores <= 0 {
		return fmt.Errorf("--driver-cores %d: must be positive", f.driverCores)
	}
	// The driver's flags are its command line on its worker, which every
	// process there can read (/proc/PID/cmdline): no secret goes there.
	redaction, err := g.Redactor()
	if err != nil {
		return err
	}
	for _, c := range f.conf {
		if k, v, _ := strings.Cut(c, "="); redaction.Secret(k, v) {
			return fmt.Errorf("--conf %s: a secret (it matches --redaction-regex) would be on the cluster-mode driver's command line, which every process on its worker can read; pass it in client mode, or have the application read it from a file", strings.TrimSpace(k))
		}
	}
	memory, err := resources.ParseSize(f.driverMemory)
	if err != nil {
		return fmt.Errorf("--driver-memory: %w", err)
	}
	conf, err := parseConf(f.conf)
	if err != nil {
		return err
	}
	command := append(append([]string{exe, "driver"}, child.DriverTemplate()...), f.appFlags.args()...)
	command = append(command, args...)
	name := clusterName(f.name, args)
	desc := &masterv1.DriverDescription{
		Name: name, Cores: int32(f.driverCores), MemoryMib: memory, Supervise: f.supervise,
		Command: &masterv1.Command{Args: command}, ModifyAcls: driver.ModifyACLs(conf),
	}
	client, err := newMasterClient(masters, token, newRetrier(f.retryTimeout, len(masters), g.Stderr))
	if err != nil {
		return err
	}
	// Every retry of this submission carries its id: a master that made a
	// driver for it, its answer lost, answers with that driver.
	req := &masterv1.SubmitDriverRequest{Description: desc, SubmissionId: rand.Text()}
	resp, err := client.SubmitDriver(ctx, connect.NewRequest(req))
	if err != nil {
		return fmt.Errorf("submit driver to %s: %w", strings.Join(masters, ", "), err)
	}
	id := resp.Msg.GetDriverId()
	trace.SpanFromContext(ctx).SetAttributes(telemetry.DriverID.String(id))
	fmt.Fprintln(g.Stdout, id)
	if !f.wait {
		return nil
	}
	return followDriver(ctx, g, client, id)
}

// clusterName is the name of a cluster-mode driver: --name, else the
// application's.
func clusterName(name string, args []string) string {
	if name == "" {
		return args[0]
	}
	return name
}

// followDriver polls a driver's status until it ends, showing it and its
// application's executors, and returns an exit status error unless it
// FINISHED; a poll that fails is retried as the client retries calls. Once
// the driver runs on a worker it says which, and where its output is read.
// A supervised driver relaunched under a new id (its worker was lost) is
// followed under that id.
func followDriver(ctx context.Context, g *globals, client masterv1connect.MasterServiceClient, id string) error {
	line := newProgressLine(g.Stderr, time.Now())
	defer line.end()
	t := time.NewTicker(line.interval())
	defer t.Stop()
	var shown string // the driver and worker whose output was pointed to
	for {
		resp, err := client.DriverStatus(ctx, connect.NewRequest(&masterv1.DriverStatusRequest{DriverId: id}))
		if connect.CodeOf(err) == connect.CodeNotFound {
			return fmt.Errorf("driver status of %s: %w (the master no longer knows it: a master that restarts forgets the drivers that ended)", id, err)
		}
		if err != nil {
			return fmt.Errorf("driver status of %s: %w", id, err)
		}
		d := resp.Msg.GetDriver()
		text := fmt.Sprintf("driver %s is %s %s", id, lifecycle.Name(d.GetState()), d.GetWorkerId())
		app, workerURL := driverPlace(ctx, client, d)
		if at := id + " " + d.GetWorkerId(); workerURL != "" && d.GetState() == masterv1.DriverState_DRIVER_STATE_RUNNING && at != shown {
			line.end()
			fmt.Fprintf(g.Stderr, "driver %s runs on worker %s; its output: %s/log/%s/stdout (and /stderr)\n", id, d.GetWorkerId(), workerURL, id)
			shown = at
		}
		if app != nil {
			running := 0
			for _, e := range app.GetExecutors() {
				if e.GetState() == masterv1.ExecutorState_EXECUTOR_STATE_RUNNING {
					running++
				}
			}
			text += fmt.Sprintf(", application %s %s: executors running %d/%d", app.GetId(), lifecycle.Name(app.GetState()), running, len(app.GetExecutors()))
		}
		line.show(time.Now(), text)
		if d.GetState() == masterv1.DriverState_DRIVER_STATE_FINISHED {
			return nil
		}
		if next := d.GetRelaunchedAs(); d.GetState() == masterv1.DriverState_DRIVER_STATE_RELAUNCHING && next != "" {
			line.end()
			fmt.Fprintf(g.Stderr, "driver %s was relaunched as %s (%s); following it\n", id, next, d.GetMessage())
			id = next
			continue
		}
		if lifecycle.DriverFinished(d.GetState()) {
			line.end()
			ended := fmt.Sprintf("driver %s ended %s", id, lifecycle.Name(d.GetState()))
			if d.GetMessage() != "" {
				ended += ": " + d.GetMessage()
			}
			fmt.Fprintln(g.Stderr, ended)
			return process.ExitError(1)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// driverPlace is the active application of driver d, if any, and the URL
// of the worker it runs on, if known. It only adds to what a poll shows, so
// it is tried once.
func driverPlace(ctx context.Context, client masterv1connect.MasterServiceClient, d *masterv1.DriverInfo) (app *masterv1.ApplicationInfo, workerURL string) {
	resp, err := client.GetClusterState(tryOnce(ctx), connect.NewRequest(&masterv1.GetClusterStateRequest{}))
	if err != nil {
		return nil, ""
	}
	for _, a := range resp.Msg.GetActiveApps() {
		if a.GetDriverId() == d.GetId() {
			app = a
		}
	}
	for _, w := range resp.Msg.GetWorkers() {
		if w.GetId() == d.GetWorkerId() {
			workerURL = w.GetWorkerUrl()
		}
	}
	return app, workerURL
}

func newDriverCommand(g *globals) *cobra.Command {
	f := &appFlags{}
	var driverID string
	cmd := &cobra.Command{
		Use:         "driver [flags] APP [ARGS...]",
		Annotations: map[string]string{process.ServiceCommand: ""},
		Short:       "Run a cluster-mode driver (started by workers)",
		Hidden:      true,
		RunE: func(cmd *cobra.Command, args []string) error {
			// First of all: a cluster-mode driver never outlives its worker.
			ctx, stopWatching, err := child.WatchWorker(cmd.Context(), process.WorkerWatchInterval, process.WorkerDeathGrace)
			if err != nil {
				return err
			}
			defer stopWatching()
			// The master made a submit token for this driver, which its
			// worker hands over; run by hand, it uses --token-file's, never
			// the machine's cluster token (clientToken): a driver a worker
			// launched without its own would act as an admin.
			secrets, err := child.ReceiveSecrets()
			if err != nil {
				return err
			}
			cfg, err := f.driverConfig(g, args)
			if err != nil {
				return err
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find this binary: %w", err)
			}
			log, tp, stopObserving, err := g.Observe(ctx, telemetry.ServiceDriver,
				map[string]string{"driver_id": driverID}, telemetry.DriverID.String(driverID))
			if err != nil {
				return err
			}
			defer stopObserving()
			cfg.DriverID, cfg.ExecutorCommand, cfg.Stdout, cfg.Logger, cfg.TracerProvider = driverID, child.ExecutorCommand(exe), g.Stdout, log, tp
			if cfg.SubmitToken = secrets.SubmitToken; cfg.SubmitToken == "" {
				if cfg.SubmitToken, err = g.Token(); err != nil {
					return err
				}
			}
			// A cluster-mode driver continues the trace of its submission.
			_, err = serveDriver(telemetry.ContextFromEnv(ctx), log, cfg, nil)
			return err
		},
	}
	f.register(cmd.Flags())
	child.DriverIDFlag(cmd.Flags(), &driverID)
	return cmd
}

// repeat runs submit now and then every interval until ctx ends, reporting
// failures on stderr.
func repeat(ctx context.Context, g *globals, every time.Duration, submit func(context.Context) error) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := submit(ctx); err != nil && ctx.Err() == nil {
			fmt.Fprintf(g.Stderr, "glint: submit: %v\n", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
