// Package cli is the glint command line: master, worker, executor, driver,
// submit, status, kill, demo, trace and health, wired to the services. It
// sits above services/; binaries reach it through glint.Main.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/glint-cluster/glint/pkg/app"
	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/redact"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry"
)

// Main runs the glint command line for the applications in apps and returns
// the process exit status.
func Main(apps *app.Registry) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	root := newRoot(apps, os.Args[1:], os.Stdout, os.Stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		var exit exitError
		if errors.As(err, &exit) {
			return int(exit)
		}
		fmt.Fprintf(os.Stderr, "glint: %v\n", err)
		return 1
	}
	return 0
}

// exitError ends the process with a status and no further message (the
// command already said what happened).
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// globals are the flags every subcommand has.
type globals struct {
	apps     *app.Registry
	stdout   io.Writer
	stderr   io.Writer
	logLevel string
	// pyroscope is the Pyroscope server every process pushes profiles to; empty: none.
	pyroscope string
	// tokenFile holds this process's token: the cluster token for a master
	// or worker, a submit token for clients; empty: none.
	tokenFile string
	// redaction is the pattern of the keys whose values are hidden where a
	// command is shown (spark.redaction.regex).
	redaction string
	// tls is this process's TLS files; zero: unencrypted HTTP/2.
	tls rpc.TLSFiles
	// relay sends on the spans of the processes this one starts, once
	// observe set tracing up (nil when untraced).
	relay *telemetry.Relay
}

// redactor compiles --redaction-regex.
func (g *globals) redactor() (*redact.Redactor, error) {
	r, err := redact.New(g.redaction)
	if err != nil {
		return nil, fmt.Errorf("--redaction-regex: %w", err)
	}
	return r, nil
}

// token reads --token-file; "" when none is given.
func (g *globals) token() (string, error) {
	if g.tokenFile == "" {
		return "", nil
	}
	return rpc.ReadToken("--token-file", g.tokenFile)
}

// commands make glint's subcommands, by name.
var commands = map[string]func(*globals) *cobra.Command{
	"master": newMasterCommand, "worker": newWorkerCommand, "executor": newExecutorCommand,
	"driver": newDriverCommand, "submit": newSubmitCommand, "status": newStatusCommand,
	"kill": newKillCommand, "decommission": newDecommissionCommand, "demo": newDemoCommand,
	"trace": newTraceCommand, "health": newHealthCommand, "token": newTokenCommand,
}

// newRoot returns the glint command for args. When args begin with a
// subcommand's name only that one is made: making the others' flags is a
// tenth of a millisecond and more of every executor's start, and the page
// faults of their code more still.
func newRoot(apps *app.Registry, args []string, stdout, stderr io.Writer) *cobra.Command {
	g := &globals{apps: apps, stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:           "glint",
		Short:         "Glint: an observable re-creation of Spark's standalone cluster manager",
		SilenceUsage:  true,
		SilenceErrors: true,
		// Every listener and client of the process speaks TLS, or none does.
		PersistentPreRunE: func(*cobra.Command, []string) error {
			// Absolute, as the processes a worker hands them to run elsewhere.
			for _, path := range []*string{&g.tls.Cert, &g.tls.Key, &g.tls.CA} {
				if *path == "" {
					continue
				}
				abs, err := filepath.Abs(*path)
				if err != nil {
					return fmt.Errorf("TLS file %s: %w", *path, err)
				}
				*path = abs
			}
			return rpc.UseTLS(g.tls)
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	root.PersistentFlags().StringVar(&g.tokenFile, "token-file", os.Getenv(child.TokenFileEnv),
		"file holding this process's token: the cluster token for master and worker, a submit token for clients (default $"+child.TokenFileEnv+"; make one with `glint token`)")
	root.PersistentFlags().StringVar(&g.tls.Cert, "tls-cert-file", os.Getenv(child.TLSCertFileEnv),
		"this process's TLS certificate (PEM): every listener and client speaks TLS (default $"+child.TLSCertFileEnv+")")
	root.PersistentFlags().StringVar(&g.tls.Key, "tls-key-file", os.Getenv(child.TLSKeyFileEnv),
		"its private key (PEM) (default $"+child.TLSKeyFileEnv+")")
	root.PersistentFlags().StringVar(&g.tls.CA, "tls-ca-file", os.Getenv(child.TLSCAFileEnv),
		"the CA that signs every glint process's certificate: TLS is then mutual (default $"+child.TLSCAFileEnv+")")
	root.PersistentFlags().StringVar(&g.redaction, "redaction-regex", redact.DefaultPattern,
		"spark.redaction.regex: values of --conf keys, KEY=VALUE arguments and environment variables matching it are shown as "+redact.Text)
	root.PersistentFlags().StringVar(&g.pyroscope, "pyroscope-url", os.Getenv(telemetry.PyroscopeEnv),
		"Pyroscope server to push profiles to (default $"+telemetry.PyroscopeEnv+"; empty: no profiling)")
	if len(args) > 0 {
		if mk, ok := commands[args[0]]; ok {
			root.AddCommand(mk(g))
			return root
		}
	}
	for _, mk := range commands {
		root.AddCommand(mk(g))
	}
	return root
}

// observe is every glint process's preamble: its telemetry as service (the
// global tracer provider, exporting only when OTEL_EXPORTER_OTLP_* says
// where, with attrs on its resource; the JSON logger on stderr at
// --log-level) and, with --pyroscope-url, its profiles tagged with tags
// (worker_id, app_id, executor_id, driver_id where known). stop uploads the
// last profiles and flushes pending spans; call it last.
func (g *globals) observe(ctx context.Context, service string, tags map[string]string, attrs ...attribute.KeyValue) (log *slog.Logger, tp trace.TracerProvider, stop func(), err error) {
	log, err = telemetry.NewLogger(g.stderr, g.logLevel, service)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--log-level: %w", err)
	}
	tp, shutdown, err := telemetry.Setup(ctx, service, attrs...)
	if err != nil {
		return nil, nil, nil, err
	}
	g.relay = telemetry.RelayOf(tp)
	flush := flusher(log, shutdown)
	if g.pyroscope == "" {
		return log, tp, flush, nil
	}
	tp = telemetry.ProfiledTracerProvider(tp)
	otel.SetTracerProvider(tp)
	stopProfiling, err := telemetry.StartProfiling(g.pyroscope, service, tags, log)
	if err != nil {
		flush()
		return nil, nil, nil, err
	}
	return log, tp, func() { stopProfiling(); flush() }, nil
}

// flusher returns a function that flushes and stops a tracer provider,
// waiting at most flushTimeout.
func flusher(log *slog.Logger, shutdown func(context.Context) error) func() {
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			log.Warn("flush spans", "err", err)
		}
	}
}

// workerWatchInterval is how often an executor or cluster-mode driver checks
// that the worker that launched it is alive; workerDeathGrace is how long it
// may take to end after its worker died before it exits regardless.
const (
	workerWatchInterval = time.Second
	workerDeathGrace    = 10 * time.Second
)

// flushTimeout bounds the final export of spans when a process exits.
const flushTimeout = 5 * time.Second

// listen opens a listener on addr and returns it with the URL peers use to
// reach it: an unspecified host (":7077") is replaced by advertise.
func listen(addr, advertise string) (net.Listener, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("listen on %s: %w", addr, err)
	}
	return ln, rpc.URL(ln.Addr(), advertise), nil
}

// writeURLFile writes url to path atomically, for scripts and tests that start
// a process on an ephemeral port.
func writeURLFile(path, url string) error {
	if path == "" {
		return nil
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(url+"\n"), 0o644); err != nil {
		return fmt.Errorf("write url file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write url file: %w", err)
	}
	return nil
}

// listenHost is the host part of a listen address, or "" when unspecified.
func listenHost(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return ""
	}
	return host
}

// parseConf turns repeated --conf k=v into a map.
func parseConf(pairs []string) (map[string]string, error) {
	conf := map[string]string{}
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			return nil, fmt.Errorf("--conf %q: want KEY=VALUE", p)
		}
		if strings.TrimSpace(k) == "" {
			// The value is not quoted: it may be a secret.
			return nil, fmt.Errorf("--conf: want KEY=VALUE, the key is empty")
		}
		conf[strings.TrimSpace(k)] = v
	}
	return conf, nil
}
