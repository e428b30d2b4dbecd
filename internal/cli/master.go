package cli

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/glint-cluster/glint/internal/process"
	"github.com/glint-cluster/glint/pkg/resources"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry"
	"github.com/glint-cluster/glint/services/master"
	"github.com/glint-cluster/glint/services/master/store"
)

type masterFlags struct {
	listen             string
	host               string
	urlFile            string
	workerTimeout      time.Duration
	maxHeartbeatRate   float64
	spreadOut          bool
	maxExecutorRetries int
	defaultCores       int
	submitTokenFiles   []string
	adminACLs          []string
	jaegerUIURL        string
	grafanaURL         string
	recoveryMode       string
	recoveryDir        string
	etcdEndpoints      string
	etcdPrefix         string
	etcdLeaseTTL       time.Duration
	serverAuth
}

func newMasterCommand(g *globals) *cobra.Command {
	f := &masterFlags{}
	cmd := &cobra.Command{
		Use:         "master",
		Annotations: map[string]string{process.ServiceCommand: ""},
		Short:       "Run the master",
		Args:        cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runMaster(cmd.Context(), g, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", ":7077", "address to serve Connect, /json and /healthz on")
	fl.StringVar(&f.host, "host", "", "host name workers and drivers use to reach the master (default: the listen host, else this machine's host name)")
	fl.StringVar(&f.urlFile, "url-file", "", "write the master's URL to this file once it serves")
	fl.DurationVar(&f.workerTimeout, "worker-timeout", 60*time.Second, "spark.worker.timeout: a worker without a heartbeat for this long is DEAD")
	fl.Float64Var(&f.maxHeartbeatRate, "max-heartbeat-rate", master.DefaultMaxHeartbeatRate, "heartbeats a second the master asks of all its workers at most, as Nomad's max_heartbeats_per_second: in a larger cluster each worker heartbeats less often than every --worker-timeout/4, and the worker timeout grows to four of its interval (0: no bound)")
	fl.BoolVar(&f.spreadOut, "spread-out", true, "spark.deploy.spreadOut: spread executors over workers rather than fill one first")
	fl.IntVar(&f.defaultCores, "default-cores", 0, "spark.deploy.defaultCores: cores an application that sets no --total-executor-cores may use (0: unlimited)")
	fl.IntVar(&f.maxExecutorRetries, "max-executor-retries", 10, "spark.deploy.maxExecutorRetries: back-to-back executor failures before an app with no running executor FAILS (-1 disables)")
	fl.StringArrayVar(&f.submitTokenFiles, "submit-token-file", nil, "NAME=PATH: a file holding a submit token, named NAME, that clients may register applications, submit drivers and read state with; what it registers is NAME's, and only NAME's tokens or an admin's act on it; repeatable (a bare PATH is named "+master.DefaultTokenName+"; the cluster token is always one, named "+master.AdminName+")")
	fl.StringSliceVar(&f.adminACLs, "admin-acls", nil, "spark.admin.acls: names of submit tokens that, as "+master.AdminName+" (the cluster token), may act on every application and driver; comma-separated")
	fl.StringVar(&f.jaegerUIURL, "jaeger-ui-url", "", "Jaeger's UI, e.g. http://localhost:16686: the web UI links each application's trace there (default: shows the trace id)")
	fl.StringVar(&f.grafanaURL, "grafana-url", "", "Grafana, e.g. http://localhost:3000: the web UI links each application's launch metrics there")
	fl.StringVar(&f.recoveryMode, "recovery-mode", "none", "spark.deploy.recoveryMode: none; file (keep workers, applications and drivers in --recovery-dir, so a restarted master recovers them and their running executors); or etcd (keep them in etcd and lead only while elected: standby masters take over)")
	fl.StringVar(&f.etcdEndpoints, "etcd-endpoints", "", "etcd endpoints for --recovery-mode etcd, comma-separated (e.g. http://etcd-0:2379)")
	fl.StringVar(&f.etcdPrefix, "etcd-prefix", "/glint", "key prefix of the masters' election and state in etcd; masters of one cluster share it")
	fl.DurationVar(&f.etcdLeaseTTL, "etcd-lease-ttl", 10*time.Second, "how long a leader that stopped renewing its etcd lease leads on; a standby takes over after it (whole seconds)")
	fl.StringVar(&f.recoveryDir, "recovery-dir", "", "spark.deploy.recoveryDirectory: where --recovery-mode file keeps the master's state (owner-only: it holds application tokens)")
	f.serverAuth.register(fl)
	return cmd
}

// etcdClient connects to --etcd-endpoints.
func (f *masterFlags) etcdClient() (*clientv3.Client, error) {
	endpoints, err := rpc.ParseURLs(f.etcdEndpoints)
	if err != nil {
		return nil, fmt.Errorf("--etcd-endpoints: %w", err)
	}
	cli, err := store.NewEtcdClient(endpoints)
	if err != nil {
		return nil, fmt.Errorf("--etcd-endpoints: %w", err)
	}
	return cli, nil
}

// openStore opens the recovery store the flags name, or returns nil.
func (f *masterFlags) openStore() (store.Store, error) {
	switch f.recoveryMode {
	case "none":
		if f.recoveryDir != "" {
			return nil, fmt.Errorf("--recovery-dir needs --recovery-mode file")
		}
		return nil, nil
	case "etcd":
		if f.recoveryDir != "" {
			return nil, fmt.Errorf("--recovery-dir is for --recovery-mode file; etcd mode keeps its state in etcd")
		}
		if f.etcdEndpoints == "" {
			return nil, fmt.Errorf("--recovery-mode etcd needs --etcd-endpoints")
		}
		return nil, nil
	case "file":
		if f.recoveryDir == "" {
			return nil, fmt.Errorf("--recovery-mode file needs --recovery-dir")
		}
		store, err := store.OpenFileStore(f.recoveryDir)
		if err != nil {
			return nil, err
		}
		return store, nil
	}
	return nil, fmt.Errorf("--recovery-mode %q: want none, file or etcd", f.recoveryMode)
}

// masterGCPercent is the master's GOGC unless the environment sets one: its
// heap is mostly what it knows of the cluster, and every heartbeat's garbage
// was collected by marking all of it again. With 10,000 workers and 1,000
// waiting applications (make bench's row 6), 200 instead of Go's 100 took
// clearly less of the master's CPU per heartbeat for somewhat more memory;
// 400 took no less CPU than 200, and much more memory.
const masterGCPercent = 200

func runMaster(ctx context.Context, g *globals, f *masterFlags) error {
	if f.workerTimeout <= 0 {
		return fmt.Errorf("--worker-timeout %s: must be positive", f.workerTimeout)
	}
	if !(f.maxHeartbeatRate >= 0) || math.IsInf(f.maxHeartbeatRate, 0) {
		return fmt.Errorf("--max-heartbeat-rate %g: must be a number of heartbeats a second, 0 or more (0: no bound)", f.maxHeartbeatRate)
	}
	heartbeatRate := f.maxHeartbeatRate
	if heartbeatRate == 0 {
		heartbeatRate = -1
	}
	if f.defaultCores != 0 {
		if err := resources.CheckCores("--default-cores", int64(f.defaultCores)); err != nil {
			return err
		}
	}
	if err := checkLinkURL("--jaeger-ui-url", f.jaegerUIURL); err != nil {
		return err
	}
	if err := checkLinkURL("--grafana-url", f.grafanaURL); err != nil {
		return err
	}
	store, err := f.openStore()
	if err != nil {
		return err
	}
	if store != nil {
		defer store.Close()
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(masterGCPercent)
	}
	log, tp, stopObserving, err := g.Observe(ctx, telemetry.ServiceMaster, nil)
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

	// Names: what callers' Host may say besides its addresses and localhost.
	hosts, err := f.hosts(host)
	if err != nil {
		return err
	}

	// Listener: opened first, because its address is the master's URL.
	ln, url, err := process.Listen(f.listen, host)
	if err != nil {
		return err
	}

	// Tokens: the cluster token (--token-file's, or on loopback the
	// machine's), also the submit token named admin; named submit tokens
	// from --submit-token-file.
	cluster, tokens, err := g.clusterToken(ctx, log, "the master", ln)
	if err == nil {
		err = f.addSubmitTokens(tokens, cluster)
	}
	if err != nil {
		ln.Close()
		return err
	}

	redaction, err := g.Redactor()
	if err != nil {
		ln.Close()
		return err
	}

	// Master: worker, application and driver state, and the scheduler.
	cfg := master.Config{
		URL: url, WorkerTimeout: f.workerTimeout, MaxHeartbeatRate: heartbeatRate, SpreadOut: f.spreadOut,
		MaxExecutorRetries: f.maxExecutorRetries, DefaultCores: int32(f.defaultCores),
		Tokens: tokens, Admins: f.adminACLs, ClusterToken: cluster, MetricsAuth: f.metricsAuth, Redaction: redaction,
		UI:          master.UIConfig{Public: f.uiPublic, JaegerURL: f.jaegerUIURL, GrafanaURL: f.grafanaURL},
		Store:       store,
		Instruments: telemetry.Instruments{Logger: log, TracerProvider: tp},
	}
	var m process.Service
	if f.recoveryMode == "etcd" {
		cli, err := f.etcdClient()
		if err != nil {
			ln.Close()
			return err
		}
		defer cli.Close()
		m, err = master.NewHA(master.HAConfig{Master: cfg, Etcd: cli, Prefix: f.etcdPrefix, LeaseTTL: f.etcdLeaseTTL})
	} else {
		m, err = master.New(cfg)
	}
	if err != nil {
		ln.Close()
		return err
	}

	log.Info("master starting", "worker_timeout", f.workerTimeout.String(), "spread_out", f.spreadOut, "recovery_mode", f.recoveryMode)
	return process.Serve(ctx, log, ln, url, f.urlFile, m, hosts...)
}

// addSubmitTokens adds the cluster token as the submit token named
// master.AdminName and each --submit-token-file under its name, after
// checking --admin-acls' names. One token under two names is refused: who
// owns what it registers would depend on which was read first.
func (f *masterFlags) addSubmitTokens(tokens *rpc.Tokens, cluster string) error {
	for _, name := range f.adminACLs {
		if err := master.CheckTokenName(name); err != nil {
			return fmt.Errorf("--admin-acls: %w", err)
		}
	}
	names := map[string]string{cluster: master.AdminName}
	tokens.AddNamed(rpc.Submit, master.AdminName, cluster)
	for _, arg := range f.submitTokenFiles {
		name, path := parseSubmitTokenFile(arg)
		token, err := rpc.ReadToken("--submit-token-file", path)
		if err != nil {
			return err
		}
		if prev, ok := names[token]; ok && prev != name {
			return fmt.Errorf("--submit-token-file %s: that token is %s's already: one token has one name", arg, prev)
		}
		names[token] = name
		tokens.AddNamed(rpc.Submit, name, token)
	}
	return nil
}

// parseSubmitTokenFile splits --submit-token-file NAME=PATH; an argument
// whose part before the first '=' is no token name is a bare PATH, named
// master.DefaultTokenName.
func parseSubmitTokenFile(arg string) (name, path string) {
	if name, path, ok := strings.Cut(arg, "="); ok && master.CheckTokenName(name) == nil {
		return name, path
	}
	return master.DefaultTokenName, arg
}

// checkLinkURL checks a URL the web UI links to: empty, or http(s) with a host.
func checkLinkURL(flag, raw string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s %q: want an http:// or https:// URL with a host", flag, raw)
	}
	return nil
}
