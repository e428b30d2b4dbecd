package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/spf13/cobra"

	"github.com/glint-cluster/glint/internal/process"
	"github.com/glint-cluster/glint/pkg/contain"
	"github.com/glint-cluster/glint/pkg/resources"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry"
	"github.com/glint-cluster/glint/services/worker"
)

type workerFlags struct {
	masters          string
	listen           string
	host             string
	urlFile          string
	cores            int
	memory           string
	workDir          string
	registerInterval time.Duration
	killGrace        time.Duration
	cleanupInterval  time.Duration
	cleanupTTL       time.Duration
	usageInterval    time.Duration
	prestart         int
	contain          bool
	cpuLimit         string
	pidsLimit        int64
	executorUsers    string
	executorTLS      rpc.TLSFiles
	serverAuth
}

func newWorkerCommand(g *globals) *cobra.Command {
	f := &workerFlags{}
	cmd := &cobra.Command{
		Use:         "worker",
		Annotations: map[string]string{process.ServiceCommand: ""},
		Short:       "Run a worker that launches executors and drivers for the master",
		Args:        cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runWorker(cmd.Context(), g, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.masters, "master", "", "master URL(s), comma-separated (required)")
	fl.StringVar(&f.listen, "listen", ":7078", "address to serve Connect, /json and /healthz on")
	fl.StringVar(&f.host, "host", "", "host name the master and executors use to reach this worker (default: the listen host, else the local address routing to the master)")
	fl.StringVar(&f.urlFile, "url-file", "", "write the worker's URL to this file once it serves")
	fl.IntVar(&f.cores, "cores", runtime.NumCPU(), "cores executors may use")
	fl.StringVar(&f.memory, "memory", "", "memory executors may use, e.g. 4g (default: total memory minus 1 GiB)")
	fl.StringVar(&f.workDir, "work-dir", "./work", "directory for executor and driver work dirs and logs")
	fl.DurationVar(&f.registerInterval, "register-interval", 10*time.Second, "base interval between registration attempts (Spark: 6 at 0.5–1.5×, then 6× that)")
	fl.DurationVar(&f.killGrace, "kill-grace", 10*time.Second, "time between SIGTERM and SIGKILL when killing an executor or driver")
	fl.DurationVar(&f.cleanupInterval, "cleanup-interval", 30*time.Minute, "spark.worker.cleanup.interval: how often to remove the work dirs of finished applications and drivers (0: never)")
	fl.DurationVar(&f.cleanupTTL, "cleanup-ttl", 7*24*time.Hour, "spark.worker.cleanup.appDataTtl: remove a finished application's or driver's work dir once none of its files changed for this long")
	fl.DurationVar(&f.usageInterval, "usage-interval", 5*time.Second, "how often to measure the CPU and memory of each executor's and driver's processes (0: never)")
	fl.IntVar(&f.prestart, "prestart-executors", 0, fmt.Sprintf("idle executor processes of this binary to keep ready for launches to claim (at most %d; each serves one executor)", worker.MaxPrestartExecutors))
	fl.BoolVar(&f.contain, "contain", true, "run each executor and driver in a cgroup of its own that enforces its cores and memory (granted memory plus max(64 MiB, 10%)); without a writable cgroup hierarchy the worker says so and runs them unconfined")
	fl.StringVar(&f.cpuLimit, "cpu-limit", string(contain.CPUHard), "how a contained process's cores are enforced: hard (a CFS quota of its cores), shares (a weight by its cores: idle cores may be used) or off")
	fl.Int64Var(&f.pidsLimit, "pids-limit", contain.DefaultPids, "processes and threads a contained executor or driver may have at once")
	fl.StringVar(&f.executorUsers, "executor-users", defaultExecutorUsers(),
		"uids FIRST-LAST a worker started as root runs executors and drivers as: each application's executors one of their own, each driver another, with a work dir only it can read; off: as the worker's user (default "+contain.DefaultUIDRange.String()+" as root, else off; $"+executorUsersEnv+" when set)")
	fl.StringVar(&f.executorTLS.Cert, "executor-tls-cert-file", "", "with --executor-users and TLS: the certificate (PEM) of the executors and drivers, which cannot read the worker's key (default: the worker's own, without --executor-users)")
	fl.StringVar(&f.executorTLS.Key, "executor-tls-key-file", "", "its private key (PEM), which the executor users must be able to read")
	f.serverAuth.register(fl)
	return cmd
}

func runWorker(ctx context.Context, g *globals, f *workerFlags) error {
	masters, err := rpc.ParseURLs(f.masters)
	if err != nil {
		return fmt.Errorf("--master: %w", err)
	}
	if err := resources.CheckCores("--cores", int64(f.cores)); err != nil {
		return err
	}
	switch {
	case f.cleanupInterval < 0:
		return fmt.Errorf("--cleanup-interval %s: must not be negative (0 turns the cleanup off)", f.cleanupInterval)
	case f.cleanupTTL <= 0:
		return fmt.Errorf("--cleanup-ttl %s: must be positive", f.cleanupTTL)
	case f.cleanupInterval == 0:
		f.cleanupInterval = -1 // worker.Config's "never"
	}
	switch {
	case f.usageInterval < 0:
		return fmt.Errorf("--usage-interval %s: must not be negative (0 turns the measurement off)", f.usageInterval)
	case f.usageInterval == 0:
		f.usageInterval = -1 // worker.Config's "never"
	}
	cpuLimit, err := contain.ParseCPULimit(f.cpuLimit)
	if err != nil {
		return fmt.Errorf("--cpu-limit: %w", err)
	}
	if f.pidsLimit <= 0 {
		return fmt.Errorf("--pids-limit %d: must be positive", f.pidsLimit)
	}
	var cgroup string
	if f.contain {
		dir, err := filepath.Abs(f.workDir)
		if err != nil {
			return fmt.Errorf("--work-dir: %w", err)
		}
		cgroup = worker.DefaultCgroup(dir)
	}
	users, err := contain.ParseUIDRange(f.executorUsers)
	if err != nil {
		return fmt.Errorf("--executor-users: %w", err)
	}
	if (f.executorTLS.Cert == "") != (f.executorTLS.Key == "") {
		return errors.New("--executor-tls-cert-file and --executor-tls-key-file go together")
	}
	if f.executorTLS.Cert != "" {
		f.executorTLS.CA = g.TLS.CA
	}
	memory, err := workerMemory(f.memory)
	if err != nil {
		return err
	}
	if err := resources.CheckMemoryMiB("--memory", memory); err != nil {
		return err
	}
	host := f.host
	if host == "" {
		host = listenHost(f.listen)
	}
	if host == "" {
		if host, err = rpc.AdvertiseHost(masters...); err != nil {
			return fmt.Errorf("%w (set --host)", err)
		}
	}

	// Names: what callers' Host may say besides its addresses and localhost.
	hosts, err := f.hosts(host)
	if err != nil {
		return err
	}

	// Listener: opened first, because its address is the worker's URL and id.
	ln, url, err := process.Listen(f.listen, host)
	if err != nil {
		return err
	}
	id, err := worker.NewID(url, time.Now())
	if err != nil {
		ln.Close()
		return err
	}
	log, tp, stopObserving, err := g.Observe(ctx, telemetry.ServiceWorker, map[string]string{"worker_id": id})
	if err != nil {
		ln.Close()
		return err
	}
	defer stopObserving()

	// Tokens: the cluster token, which the worker accepts (from the master)
	// and sends (to the master).
	cluster, tokens, err := g.clusterToken(ctx, log, "the worker", ln, masters...)
	if err != nil {
		ln.Close()
		return err
	}

	redaction, err := g.Redactor()
	if err != nil {
		ln.Close()
		return err
	}

	// Worker: registration, heartbeats and the executor and driver runners.
	w, err := worker.New(worker.Config{
		ID: id, Masters: masters, URL: url, Cores: int32(f.cores), MemoryMiB: memory, WorkDir: f.workDir,
		RegisterInterval: f.registerInterval, KillGrace: f.killGrace, PrestartExecutors: f.prestart,
		CleanupInterval: f.cleanupInterval, CleanupTTL: f.cleanupTTL, UsageInterval: f.usageInterval,
		Cgroup: cgroup, CPULimit: cpuLimit, PidsLimit: f.pidsLimit, ExecutorUsers: users, ExecutorTLS: f.executorTLS,
		Tokens: tokens, ClusterToken: cluster, MetricsAuth: f.metricsAuth, UIPublic: f.uiPublic, Redaction: redaction, TLS: g.TLS,
		Instruments: telemetry.Instruments{Logger: log, TracerProvider: tp}, SpanRelay: g.Relay,
	})
	if err != nil {
		ln.Close()
		return err
	}

	log.Info("worker starting", "id", w.ID(), "cores", f.cores, "memory_mib", memory)
	decommissionOnSIGPWR(ctx, w)
	return process.Serve(ctx, log, ln, url, f.urlFile, w, hosts...)
}

func workerMemory(s string) (int64, error) {
	if s == "" {
		return resources.DefaultWorkerMemoryMiB()
	}
	mib, err := resources.ParseSize(s)
	if err != nil {
		return 0, fmt.Errorf("--memory: %w", err)
	}
	return mib, nil
}

// executorUsersEnv is the default of --executor-users when set: a test
// harness or an image sets it for every worker it starts.
const executorUsersEnv = "GLINT_EXECUTOR_USERS"

// defaultExecutorUsers is $GLINT_EXECUTOR_USERS, else contain's range for
// a worker running as root, else off.
func defaultExecutorUsers() string {
	if v := os.Getenv(executorUsersEnv); v != "" {
		return v
	}
	if os.Geteuid() == 0 {
		return contain.DefaultUIDRange.String()
	}
	return "off"
}
