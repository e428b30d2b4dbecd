package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/glint-cluster/glint/internal/process"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry"
	"github.com/glint-cluster/glint/services/driver"
)

type demoFlags struct {
	keep   bool
	slices int
}

func newDemoCommand(g *globals) *cobra.Command {
	f := &demoFlags{}
	cmd := &cobra.Command{
		Use:         "demo",
		Annotations: map[string]string{process.ServiceCommand: ""},
		Short:       "Run a master and two workers on this machine, run pi on 4 executors, show each launch, stop",
		Args:        cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), g, f)
		},
	}
	cmd.Flags().BoolVar(&f.keep, "keep", false, "keep the demo's directory (logs, work dirs) instead of removing it")
	cmd.Flags().IntVar(&f.slices, "slices", 20, "pi's SLICES argument")
	return cmd
}

// demoWorkers, demoCores and demoMemory size the demo cluster: two workers
// of two cores, so pi gets four one-core executors.
const (
	demoWorkers = 2
	demoCores   = 2
	demoMemory  = "2g"
)

// demoStartLimit bounds how long a demo process may take to start serving or
// to stop, generous for a loaded machine.
const demoStartLimit = time.Minute

func runDemo(ctx context.Context, g *globals, f *demoFlags) (err error) {
	pi, ok := g.Apps.App("pi")
	if !ok {
		return errors.New("demo: this binary has no pi application")
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("demo: find this binary: %w", err)
	}
	dir, err := os.MkdirTemp("", "glint-demo-")
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if f.keep {
		fmt.Fprintf(g.Stdout, "Logs and work dirs in %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	var procs []*demoProcess
	// Stop order: workers first, so each kills and reports its executors to a
	// master that still listens; the master last.
	defer func() {
		for i := len(procs) - 1; i >= 0; i-- {
			if stopErr := procs[i].stop(); stopErr != nil && err == nil {
				err = stopErr
			}
		}
	}()

	// The cluster token, which the demo also submits with.
	tokenFile := filepath.Join(dir, "cluster.token")
	if err := os.WriteFile(tokenFile, []byte(rpc.NewToken()+"\n"), 0o600); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	g.TokenFile = tokenFile
	token, err := g.Token()
	if err != nil {
		return err
	}

	// Master on an ephemeral loopback port.
	m, err := startChild(ctx, dir, "master", exe, "master", "--listen", "127.0.0.1:0", "--worker-timeout", "10s",
		"--token-file", tokenFile)
	if err != nil {
		return err
	}
	procs = append(procs, m)
	masterURL := m.url

	// Two workers, each with its own work dir.
	for i := 1; i <= demoWorkers; i++ {
		name := fmt.Sprintf("worker-%d", i)
		w, err := startChild(ctx, dir, name, exe, "worker", "--master", masterURL, "--listen", "127.0.0.1:0",
			"--cores", fmt.Sprint(demoCores), "--memory", demoMemory, "--work-dir", filepath.Join(dir, name),
			"--register-interval", "1s", "--kill-grace", "2s", "--token-file", tokenFile,
			// One machine's cluster, run by whoever runs the demo (from a
			// build directory only they can read): its executors run as them.
			"--executor-users", "off")
		if err != nil {
			return err
		}
		procs = append(procs, w)
	}
	if err := waitForWorkers(ctx, g, masterURL, demoWorkers); err != nil {
		return err
	}
	fmt.Fprintf(g.Stdout, "Master %s with %d workers of %d cores and %s\n", masterURL, demoWorkers, demoCores, demoMemory)

	// The application, with its driver in this process (client mode); it waits
	// until all four executors registered before running tasks.
	logFile, err := os.Create(filepath.Join(dir, "driver.log"))
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer logFile.Close()
	log, err := telemetry.NewLogger(logFile, g.LogLevel, telemetry.ServiceDriver)
	if err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	tp, shutdown, err := telemetry.Setup(ctx, telemetry.ServiceSubmit, g.Export)
	if err != nil {
		return err
	}
	defer process.Flusher(log, shutdown)()
	ctx, span := telemetry.StartSubmit(ctx, tp, pi.Name)
	defer span.End()
	cfg := driver.Config{
		Masters: []string{masterURL}, App: pi, ExecutorCores: 1,
		MaxCores: demoWorkers * demoCores, ExecutorMemoryMiB: 512, SubmitToken: token,
		Conf: map[string]string{
			"spark.scheduler.minRegisteredResourcesRatio":       "1.0",
			"spark.scheduler.maxRegisteredResourcesWaitingTime": "2m",
		},
	}
	stopDriverTelemetry, err := clientMode(ctx, &cfg, exe, g.Stdout, log)
	if err != nil {
		return err
	}
	defer stopDriverTelemetry()
	cfg.Args = []string{fmt.Sprint(f.slices)}
	submitted := time.Now()
	d, err := serveDriver(ctx, log, cfg, nil)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	fmt.Fprintf(g.Stdout, "Ran pi %d as %s\n", f.slices, d.AppID())
	printTimelines(g.Stdout, submitted, d.Timelines())
	return nil
}

// printTimelines shows when each executor reached each launch step, in
// milliseconds after submission.
func printTimelines(out io.Writer, submitted time.Time, timelines []driver.Timeline) {
	fmt.Fprintln(out, "\nExecutor launches (ms after submit)")
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EXECUTOR\tWORKER\tSCHEDULED\tLAUNCHED\tSTARTED\tREGISTERED\tFIRST TASK")
	ms := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return fmt.Sprintf("%.1f", float64(t.Sub(submitted).Microseconds())/1000)
	}
	for _, t := range timelines {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ExecutorID, t.WorkerID,
			ms(t.Scheduled), ms(t.Launched), ms(t.Started), ms(t.Registered), ms(t.FirstTask))
	}
	tw.Flush()
}

// demoProcess is a glint process the demo started.
type demoProcess struct {
	name string
	cmd  *exec.Cmd
	url  string
	done chan error
}

// startChild starts `exe args... --url-file F` with its output in dir/name.log
// and waits until it serves.
func startChild(ctx context.Context, dir, name, exe string, args ...string) (*demoProcess, error) {
	log, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	defer log.Close()
	urlFile := filepath.Join(dir, name+".url")
	cmd := exec.Command(exe, append(args, "--url-file", urlFile)...)
	cmd.Stdout, cmd.Stderr = log, log
	// The demo's processes end with it, even when it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("demo: start %s: %w", name, err)
	}
	c := &demoProcess{name: name, cmd: cmd, done: make(chan error, 1)}
	go func() { c.done <- cmd.Wait() }()
	deadline := time.After(demoStartLimit)
	for {
		if b, err := os.ReadFile(urlFile); err == nil {
			c.url = strings.TrimSpace(string(b))
			return c, nil
		}
		select {
		case err := <-c.done:
			c.done <- err
			return nil, fmt.Errorf("demo: %s exited before serving (%v); see %s", name, err, log.Name())
		case <-deadline:
			return c, fmt.Errorf("demo: %s did not serve within %s; see %s", name, demoStartLimit, log.Name())
		case <-ctx.Done():
			return c, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stop sends SIGTERM and waits; after demoStartLimit the process group is killed.
func (c *demoProcess) stop() error {
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("demo: stop %s: %w", c.name, err)
	}
	select {
	case err := <-c.done:
		if err != nil {
			return fmt.Errorf("demo: %s: %w", c.name, err)
		}
		return nil
	case <-time.After(demoStartLimit):
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.done
		return fmt.Errorf("demo: %s did not stop within %s after SIGTERM; killed", c.name, demoStartLimit)
	}
}

// waitForWorkers polls the master until n workers are ALIVE; each poll is
// tried once, the loop retries.
func waitForWorkers(ctx context.Context, g *globals, masterURL string, n int) error {
	client, err := g.masterClient(masterURL, 0)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.GetClusterState(ctx, connect.NewRequest(&masterv1.GetClusterStateRequest{}))
		if err == nil {
			alive := 0
			for _, w := range resp.Msg.GetWorkers() {
				if w.GetState() == masterv1.WorkerState_WORKER_STATE_ALIVE {
					alive++
				}
			}
			if alive >= n {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("demo: %d workers did not register with %s within 30s", n, masterURL)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
