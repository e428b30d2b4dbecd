package worker

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/contain"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/redact"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// startStep resolves argv[0] on the worker's PATH and forks and execs the
// process, as its user on a worker that runs each application as a user of
// its own (refused when that user cannot execute argv[0]), in its cgroup on
// a contained worker (cgroupStep), in its own process group (so a kill
// reaches its children too), in its work directory, with stdout and stderr
// going to its log files, stdin from /dev/null, its secrets in a pipe (child.SecretsFDEnv; never in its
// environment or arguments), when it was forked (child.ForkedAtEnv: an
// executor's executor.boot span starts then), and the launch's trace
// context (launch.trace) in TRACEPARENT/TRACESTATE so the process's spans
// are children of the span it lives within, not of this step's, which ends
// with the fork; an executor of a traced worker sends its spans through the
// worker (launch.relay).
type startStep struct{}

// Name is "process.start".
func (startStep) Name() string { return lifecycle.StepProcessStart }

// choose hands a claimed process its log files (the handover step), else
// starts the process.
func (startStep) choose(l *launch) step {
	if l.claimed != nil {
		return handoverStep{}
	}
	return startStep{}
}

// Run starts the process unless it was killed before it could start, and
// records when it started.
func (startStep) Run(ctx context.Context, l *launch) error {
	defer l.closeLogs()
	if ctx.Err() != nil {
		return fmt.Errorf("not started: %w", context.Cause(ctx))
	}
	span := trace.SpanFromContext(ctx)
	// The template form, secrets hidden: the substituted arguments could
	// carry values that do not belong in a trace.
	span.SetAttributes(semconv.ProcessCommandArgs(l.redaction.Args(l.template.GetArgs())...))
	path, err := lookPath(l.redaction, l.argv[0])
	if err != nil {
		return err
	}
	l.path = path
	span.SetAttributes(semconv.ProcessExecutablePath(l.redaction.Arg(path)))
	var user *syscall.Credential
	if l.uid != 0 {
		if err := contain.OthersCan(path, contain.Execute); err != nil {
			return fmt.Errorf("uid %d, the user of %s, cannot execute %s: %w", l.uid, l.owner, l.redaction.Arg(path), err)
		}
		user = &syscall.Credential{Uid: l.uid, Gid: l.uid, Groups: []uint32{}}
	}
	cmd := &exec.Cmd{
		Path:   l.path,
		Args:   l.argv,
		Env:    telemetry.InjectEnv(telemetry.ContextWithSpanContextOf(ctx, l.trace), l.environ),
		Dir:    l.dir,
		Stdout: l.stdout,
		Stderr: l.stderr,
		// The kernel signals the process when the worker dies (Linux; strictly,
		// when the thread that forked it ends: no launching goroutine is
		// locked to a thread but contain's v1 launcher, whose thread lives
		// as long as the worker), so it never outlives the worker; the
		// process also watches for itself (child.WatchWorker).
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM, Credential: user},
	}
	cmd.Env = append(cmd.Env, child.WorkerPIDEnv+"="+strconv.Itoa(os.Getpid()))
	var url string
	if l.listenHost != "" {
		socket, u, err := openListener(l.listenHost)
		if err != nil {
			return err
		}
		defer socket.Close() // the process holds its own copy
		cmd.ExtraFiles = []*os.File{socket}
		cmd.Env = append(cmd.Env, child.ListenFDEnv+"=3")
		url = u
	}
	secrets, err := child.SecretsPipe(l.secrets)
	if err != nil {
		return err
	}
	defer secrets.Close() // as the socket
	cmd.ExtraFiles = append(cmd.ExtraFiles, secrets)
	cmd.Env = append(cmd.Env, child.SecretsFDEnv+"="+strconv.Itoa(2+len(cmd.ExtraFiles)))
	// Stamped before the fork: once started, the process may reach its driver
	// (whose stamps follow this one on the launch's timeline) before Start
	// returns here.
	started := l.now()
	cmd.Env = append(cmd.Env, child.ForkedAt(started))
	start := func() error { return l.relay.Start(cmd) }
	if l.group != nil {
		err = l.group.Start(cmd, start)
	} else {
		err = start()
	}
	if err != nil {
		return err
	}
	l.cmd, l.startedAt, l.url = cmd, started, url
	span.SetAttributes(semconv.ProcessPID(cmd.Process.Pid))
	return nil
}

// lookPath resolves name on the worker's PATH to an absolute path. exec's
// errors quote name; one of the form KEY=VALUE is named as shown instead,
// as its value may be a secret.
func lookPath(r *redact.Redactor, name string) (string, error) {
	path, err := exec.LookPath(name)
	if err == nil {
		if path, err = filepath.Abs(path); err != nil {
			err = fmt.Errorf("resolve %q: %w", name, err)
		}
	}
	if shown := r.Arg(name); err != nil && shown != name {
		return "", fmt.Errorf("resolve %q: not found, or not an executable file", shown)
	}
	return path, err
}

// openListener opens a TCP listener on host with an ephemeral port and returns
// it as a file to hand to a child, with the URL it is reached at.
func openListener(host string) (*os.File, string, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, "", fmt.Errorf("open the process's listener: %w", err)
	}
	defer ln.Close()
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		return nil, "", fmt.Errorf("open the process's listener: %w", err)
	}
	return f, rpc.URL(ln.Addr(), host), nil
}
