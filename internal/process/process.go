// Package process is what every glint process shares — the flags every
// glint command has (Globals), its telemetry preamble (Observe), serving a
// service (Serve) — and the executor command, which is all an executor needs:
// internal/cli adds the other commands to make the glint binary, and
// glint-executor (cmd/glint-executor) is the executor command alone, a
// smaller binary whose start, on every cold executor launch, runs fewer
// package initialisers and touches fewer pages.
package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sys/unix"

	"github.com/glint-cluster/glint/pkg/app"
	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/redact"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry"
)

// Execute runs root, whose commands' context ends when SIGTERM or SIGINT
// comes once they are watched (WatchSignals), and returns the process exit
// status; an error is printed after root's name.
func Execute(root *cobra.Command) int {
	s := &signals{}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	defer s.close()
	if err := root.ExecuteContext(context.WithValue(s.ctx, signalsKey{}, s)); err != nil {
		var exit ExitError
		if errors.As(err, &exit) {
			return int(exit)
		}
		fmt.Fprintf(os.Stderr, "%s: %v\n", root.Name(), err)
		return 1
	}
	return 0
}

// signalsKey holds, in the context Execute gives commands, the signals that
// end it.
type signalsKey struct{}

// signals ends ctx on SIGTERM or SIGINT once watched, with the signal as
// its cause; a signal after the first is taken and ignored, until close.
type signals struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	mu     sync.Mutex
	stop   func() // nil until watched
}

func (s *signals) watch() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stop != nil {
		return
	}
	signalled, stop := signal.NotifyContext(s.ctx, syscall.SIGTERM, syscall.SIGINT)
	context.AfterFunc(signalled, func() { s.cancel(context.Cause(signalled)) })
	s.stop = stop
}

func (s *signals) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stop != nil {
		s.stop()
	}
	s.cancel(nil)
}

// WatchSignals makes ctx, a command's (or one made from it), end when
// SIGTERM or SIGINT comes; before, either ends the process at once, as by
// default. Every command watches them before it runs (Root) but the
// executor, which watches them once its registration is sent, or a call to
// its driver is to be tried again: installing the handlers (starting the
// runtime's signal thread) is a part of a cold executor's start worth
// putting off, and until then it has nothing to finish.
func WatchSignals(ctx context.Context) {
	if s, ok := ctx.Value(signalsKey{}).(*signals); ok {
		s.watch()
	}
}

// lateSignals is the annotation of a command that calls WatchSignals itself.
const lateSignals = "glint.signals.late"

// ServiceCommand is the annotation of a command that runs a service (master,
// worker, executor, cluster-mode driver, demo): its logs stay at
// --log-level's default, info, on a terminal too. Every other command — a
// client — logs at warn on a terminal unless --log-level is given, so that
// what it prints for a person is not lost among its JSON log lines.
const ServiceCommand = "glint.service"

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// ExitError ends the process with a status and no further message (the
// command already said what happened).
type ExitError int

func (e ExitError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// Globals are the flags every glint command has, and what each process
// shares with the commands it runs.
type Globals struct {
	Apps     *app.Registry
	Stdout   io.Writer
	Stderr   io.Writer
	LogLevel string
	// Pyroscope is the Pyroscope server every process pushes profiles to; empty: none.
	Pyroscope string
	// TokenFile holds this process's token: the cluster token for a master
	// or worker, a submit token for clients; empty: none given (internal/cli
	// then finds the machine's, on loopback).
	TokenFile string
	// Redaction is the pattern of the keys whose values are hidden where a
	// command is shown (spark.redaction.regex).
	Redaction string
	// TLS is this process's TLS files; zero: unencrypted HTTP/2.
	TLS rpc.TLSFiles
	// Export sends this process's spans to a collector (otlp.Exporter);
	// nil in the executor's binary, whose spans go through its worker.
	Export telemetry.Exporter
	// Relay sends on the spans of the processes this one starts, once
	// Observe set tracing up (nil when untraced).
	Relay *telemetry.Relay
}

// Root makes root the command line's root: it gets the flags every glint
// command has and their check, and prints to g's writers.
func (g *Globals) Root(root *cobra.Command) *cobra.Command {
	root.SilenceUsage, root.SilenceErrors = true, true
	// Every listener and client of the process speaks TLS, or none does.
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if _, late := cmd.Annotations[lateSignals]; !late {
			WatchSignals(cmd.Context())
		}
		if _, service := cmd.Annotations[ServiceCommand]; !service && !cmd.Flags().Changed("log-level") && IsTerminal(g.Stderr) {
			g.LogLevel = "warn"
		}
		// Absolute, as the processes a worker hands them to run elsewhere.
		for _, path := range []*string{&g.TLS.Cert, &g.TLS.Key, &g.TLS.CA} {
			if *path == "" {
				continue
			}
			abs, err := filepath.Abs(*path)
			if err != nil {
				return fmt.Errorf("TLS file %s: %w", *path, err)
			}
			*path = abs
		}
		return rpc.UseTLS(g.TLS)
	}
	root.SetOut(g.Stdout)
	root.SetErr(g.Stderr)
	fl := root.PersistentFlags()
	fl.StringVar(&g.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	fl.StringVar(&g.TokenFile, "token-file", os.Getenv(child.TokenFileEnv),
		"`file` holding this process's token: the cluster token for master and worker, a submit token for clients (default $"+child.TokenFileEnv+"; without either, on a loopback address, the machine's cluster token in the user's config directory, which a master or worker makes; make one with \"glint token\")")
	fl.StringVar(&g.TLS.Cert, "tls-cert-file", os.Getenv(child.TLSCertFileEnv),
		"this process's TLS certificate (PEM): every listener and client speaks TLS (default $"+child.TLSCertFileEnv+")")
	fl.StringVar(&g.TLS.Key, "tls-key-file", os.Getenv(child.TLSKeyFileEnv),
		"its private key (PEM) (default $"+child.TLSKeyFileEnv+")")
	fl.StringVar(&g.TLS.CA, "tls-ca-file", os.Getenv(child.TLSCAFileEnv),
		"the CA that signs every glint process's certificate: TLS is then mutual (default $"+child.TLSCAFileEnv+")")
	fl.StringVar(&g.Redaction, "redaction-regex", redact.DefaultPattern,
		"spark.redaction.regex: values of --conf keys, KEY=VALUE arguments and environment variables matching it are shown as "+redact.Text)
	fl.StringVar(&g.Pyroscope, "pyroscope-url", os.Getenv(telemetry.PyroscopeEnv),
		"Pyroscope server to push profiles to (default $"+telemetry.PyroscopeEnv+"; empty: no profiling)")
	return root
}

// Redactor compiles --redaction-regex.
func (g *Globals) Redactor() (*redact.Redactor, error) {
	r, err := redact.New(g.Redaction)
	if err != nil {
		return nil, fmt.Errorf("--redaction-regex: %w", err)
	}
	return r, nil
}

// Token reads --token-file; "" when none is given.
func (g *Globals) Token() (string, error) {
	if g.TokenFile == "" {
		return "", nil
	}
	return rpc.ReadToken("--token-file", g.TokenFile)
}

// Observe is every glint process's preamble: its telemetry as service (the
// global tracer provider, exporting only when OTEL_EXPORTER_OTLP_* says
// where, with attrs on its resource; the JSON logger on stderr at
// --log-level) and, with --pyroscope-url, its profiles tagged with tags
// (worker_id, app_id, executor_id, driver_id where known). stop uploads the
// last profiles and flushes pending spans; call it last.
func (g *Globals) Observe(ctx context.Context, service string, tags map[string]string, attrs ...attribute.KeyValue) (log *slog.Logger, tp trace.TracerProvider, stop func(), err error) {
	log, err = telemetry.NewLogger(g.Stderr, g.LogLevel, service)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--log-level: %w", err)
	}
	tp, shutdown, err := telemetry.Setup(ctx, service, g.Export, attrs...)
	if err != nil {
		return nil, nil, nil, err
	}
	g.Relay = telemetry.RelayOf(tp)
	flush := Flusher(log, shutdown)
	if g.Pyroscope == "" {
		return log, tp, flush, nil
	}
	tp = telemetry.ProfiledTracerProvider(tp)
	otel.SetTracerProvider(tp)
	stopProfiling, err := telemetry.StartProfiling(g.Pyroscope, service, tags, log)
	if err != nil {
		flush()
		return nil, nil, nil, err
	}
	return log, tp, func() { stopProfiling(); flush() }, nil
}

// Flusher returns a function that flushes and stops a tracer provider,
// waiting at most flushTimeout.
func Flusher(log *slog.Logger, shutdown func(context.Context) error) func() {
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			log.Warn("flush spans", "err", err)
		}
	}
}

// WorkerWatchInterval is how often an executor or cluster-mode driver checks
// that the worker that launched it is alive; WorkerDeathGrace is how long it
// may take to end after its worker died before it exits regardless.
const (
	WorkerWatchInterval = time.Second
	WorkerDeathGrace    = 10 * time.Second
)

// flushTimeout bounds the final export of spans when a process exits.
const flushTimeout = 5 * time.Second
