package worker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"time"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/contain"
	"github.com/glint-cluster/glint/pkg/fault"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/redact"
	"github.com/glint-cluster/glint/pkg/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// step is one stage of launching a process, one file each (step_*.go), as
// Nomad's task-runner hooks are. Its name is its log field and its span name.
type step interface {
	// Name is the step's stable name, e.g. "process.start".
	Name() string
	// Run performs the step, reading and filling in l.
	Run(ctx context.Context, l *launch) error
}

// launch is one start of one process: what its runner sets up and its steps
// fill in, in order.
type launch struct {
	// Set by the runner.
	dir      string            // the process's work directory
	template *masterv1.Command // the command as the master sent it
	vars     map[string]string // template variables: "APP_ID" replaces {{APP_ID}}
	env      []string          // GLINT_* variables, "KEY=value"
	// secrets are handed over outside the environment and the command
	// line: in a pipe (process.start) or with the claim.
	secrets child.Secrets
	// defaults are variables the command's environment may replace: the
	// process's GOMAXPROCS, its cores (coresEnv).
	defaults []string
	now      func() time.Time
	attrs    []attribute.KeyValue // span attributes naming the process (glint.app.id, …)
	// trace is the span the process's own spans go under (TRACEPARENT): the
	// launch's caller's, which lasts as long as the process.
	trace trace.SpanContext
	// redaction hides secret values where a step shows the command (the
	// log header, span attributes, errors); the process runs it whole.
	redaction *redact.Redactor
	// listenHost, when set, makes process.start open the process's listening
	// socket on it and hand it over as file descriptor 3 (GLINT_LISTEN_FD).
	listenHost string
	// prestart, when set, offers a prestarted process to claim in place of
	// process.start (executors).
	prestart *prestart
	// relay, when set, carries the process's spans (executors).
	relay *telemetry.Relay
	// spare, when set, is a work directory made ahead that the workdir step
	// moves into place instead of making one.
	spare *spare
	// cgroups, when set, is the worker's cgroup, in which the cgroup step
	// makes the process's, cgroupName, with limits.
	cgroups    *contain.Parent
	cgroupName string
	limits     contain.Limits
	// owner is whose user the process runs as on a worker that runs each
	// application as a user of its own (Config.ExecutorUsers): its
	// application's id, or a driver's own.
	owner string
	// uid is that user (the runner's, for all its launches); 0: the
	// worker's.
	uid uint32

	// Filled in by the steps.
	argv           []string // the substituted arguments (command)
	path           string   // argv[0] resolved to an absolute path (process.start)
	environ        []string // the process's whole environment (command)
	stdout, stderr *os.File // its log files (logs; closed by process.start)
	cmd            *exec.Cmd
	startedAt      time.Time // when the process started (process.start), or was claimed (claim)
	url            string    // where the process serves, from its handed-over socket (process.start)
	// claimed is the prestarted process claimed for this launch, until the
	// handover step gives it its log files (claim).
	claimed *claimStep
	// registered, for a claimed process, is closed once it registered with
	// its driver or ended (handover).
	registered <-chan struct{}
	// group is the process's cgroup (cgroup), removed when it ended or its
	// launch failed.
	group *contain.Group
}

// abandon closes the log files, ends a claimed process that was not
// handed them and removes the cgroup: the launch failed.
func (l *launch) abandon(log *slog.Logger) {
	l.closeLogs()
	if l.claimed != nil {
		l.claimed.abandon()
		l.claimed = nil
	}
	l.removeGroup(log)
}

// removeGroup removes the process's cgroup, if it has one, with anything
// left running in it.
func (l *launch) removeGroup(log *slog.Logger) {
	if l.group == nil {
		return
	}
	if err := l.group.Remove(); err != nil {
		log.Warn("remove cgroup", "err", err)
	}
	l.group = nil
}

// closeLogs closes the log files once the process holds its own copies.
func (l *launch) closeLogs() {
	if l.stdout != nil {
		l.stdout.Close()
		l.stdout = nil
	}
	if l.stderr != nil {
		l.stderr.Close()
		l.stderr = nil
	}
}

// stepError is a step's failure, named after the step:
// `command: exec: "/nope": stat /nope: no such file or directory`.
type stepError struct {
	step string
	err  error
}

func (e *stepError) Error() string { return e.step + ": " + e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

// chooser is a step that is decided only once the steps before it ran: it
// names the step to run in its place, or none (nil).
type chooser interface {
	choose(l *launch) step
}

// runSteps runs steps in order, each in a span named after it, timing each,
// and stops at the first failure, which it records on the step's span. It
// returns each step's duration as a log attribute named after the step. A
// failure means no process is running: process.start (or handover, for a
// claimed process) is the only step that starts one, and no step after it
// can fail once it did; a process claimed before a step that failed is ended
// (abandon).
func runSteps(ctx context.Context, tracer trace.Tracer, log *slog.Logger, steps []step, l *launch) ([]any, error) {
	timings := make([]any, 0, len(steps))
	for _, st := range steps {
		if c, ok := st.(chooser); ok {
			if st = c.choose(l); st == nil {
				continue
			}
		}
		begin := time.Now()
		sctx, span := tracer.Start(ctx, st.Name(), trace.WithAttributes(l.attrs...))
		err := st.Run(sctx, l)
		took := time.Since(begin)
		timings = append(timings, slog.Duration(st.Name(), took))
		if err != nil {
			telemetry.Fail(span, err)
			span.End()
			log.DebugContext(sctx, "launch step failed", "step", st.Name(), "duration", took, "err", err)
			l.abandon(log)
			return timings, &stepError{step: st.Name(), err: err}
		}
		span.End()
		log.DebugContext(sctx, "launch step done", "step", st.Name(), "duration", took)
	}
	return timings, nil
}

// kind is what tells an executor's runner from a driver's as data: the noun
// in logs and errors and the states of the runner's phases, which move along
// transitions (state.go). The hooks are what cannot be data.
type kind[S comparable] struct {
	noun        string // "executor" or "driver"
	transitions lifecycle.Transitions[S]
	// initial until the process runs, then running; restarting while a
	// supervised process waits to be restarted.
	initial, running, restarting S
	// The final states: killed on request, launchFailed when no process
	// started, exited for a zero exit code, failed otherwise.
	killed, launchFailed, exited, failed S
}

// outcome is the final state and message of a process that ended as e;
// reason is why it was killed on request, nil if it was not.
func (k *kind[S]) outcome(e exit, reason error) (S, string) {
	switch {
	case reason != nil:
		return k.killed, fmt.Sprintf("%v; %v", reason, e)
	case e.success():
		return k.exited, e.String()
	default:
		return k.failed, e.String()
	}
}

// hooks are the phases in which one runner differs from another, as Nomad's
// task-runner hooks are. The runner calls them in this order.
type hooks[S comparable] interface {
	// addLocked enters the runner in the worker's table when it is admitted;
	// false if one with its key is already there.
	addLocked() bool
	// poststart runs inside the report step, once the process runs and is
	// marked running: an executor tells the master.
	poststart(ctx context.Context, l *launch)
	// removeLocked takes the runner out of the worker's table: into the
	// finished ones when it ended, forgotten when it was not admitted.
	removeLocked(ended bool)
	// endedLocked keeps the final state among the unacknowledged ones (in
	// the same critical section that took the runner out of the table, so
	// a registration lists the process as running or as ended, never as
	// neither) and returns its report to the master, sent once s.mu is
	// released.
	endedLocked(state S, message string, status *int32) func(ctx context.Context)
}

// runner runs one process, an executor (Spark's ExecutorRunner) or a
// cluster-mode driver (DriverRunner), in phases: the prestart steps (workdir,
// command, logs, process.start), the poststart report step, then the exit
// phase, which waits for the process (process.wait) and either restarts a
// supervised process that failed or finishes: records the final state, frees
// the cores and memory and reports. Its mutable fields are guarded by the
// Server's mu.
type runner[S comparable] struct {
	s          *Server
	kind       *kind[S]
	hooks      hooks[S]
	what       string // "executor app-…/0", "driver driver-…"
	log        *slog.Logger
	cores      int32
	memoryMiB  int64
	supervise  bool   // restart the process when it fails
	spec       launch // what every start of the process copies
	launchedAt time.Time
	ctx        context.Context
	// kill ends ctx with the reason the process is killed.
	kill context.CancelCauseFunc
	// current is the process's latest start; only the runner's goroutine
	// uses it.
	current *launch

	state S
	pid   int
	// group is the running process's cgroup, from which usage samples it
	// (nil on a worker that contains nothing, and once the process ended).
	group      *contain.Group
	measured   // what its processes used (usage.go)
	restarts   int
	message    string
	exitStatus *int32
}

// init completes a runner whose kind, hooks, description and spec are set.
// ctx is the launch request's; its steps and the process's own spans outlive
// the request, so they are traced under its caller's span (telemetry.Caller:
// the master's span of the executor, or of the driver's placement), beside
// the request's span rather than under it.
func (r *runner[S]) init(ctx context.Context, s *Server) {
	r.s = s
	r.launchedAt = s.cfg.Now()
	r.state = r.kind.initial
	launch := telemetry.ContextWithSpanContextOf(context.WithoutCancel(ctx), telemetry.Caller(ctx))
	r.ctx, r.kill = context.WithCancelCause(launch)
}

// start admits the runner for the master at masterURL (the active master,
// resources free, not already running), then runs it in the background. It
// is the whole of LaunchExecutor and LaunchDriver but for the request.
func (r *runner[S]) start(ctx context.Context, masterURL string, registration int64) error {
	s := r.s
	s.mu.Lock()
	err := r.admitLocked(ctx, masterURL, registration)
	s.mu.Unlock()
	if err != nil {
		r.kill(nil)
		r.log.Warn("refused "+r.kind.noun, "err", err)
		return err
	}
	attrs := []any{"cores", r.cores, "memory_mib", r.memoryMiB}
	if r.supervise {
		attrs = append(attrs, "supervise", true)
	}
	r.log.InfoContext(ctx, "launching "+r.kind.noun, attrs...)
	trace.SpanFromContext(ctx).SetAttributes(r.spec.attrs...)
	go r.run()
	return nil
}

// admitLocked registers r and reserves its resources, or says why not.
// registration is the worker's registration the launch was sent for (0:
// unsaid): a launch of an earlier one — sent before the master declared the
// worker lost and it registered again — is refused, as the master placed it
// elsewhere meanwhile.
func (r *runner[S]) admitLocked(ctx context.Context, masterURL string, registration int64) error {
	s := r.s
	what := "launch " + r.what
	if err := s.acceptCommandLocked(ctx, masterURL); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if registration != 0 && registration != s.registration {
		return fmt.Errorf("%s: worker %s: %w: it was sent for an earlier registration with the master, which has since declared the worker lost",
			what, s.id, fault.ErrUnavailable)
	}
	if err := s.heardRecentlyLocked(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if s.decommissioned {
		return fmt.Errorf("%s: worker %s %w", what, s.id, errDecommissioned)
	}
	if !r.hooks.addLocked() {
		return fmt.Errorf("%s: %w: it runs here, or ran here already", what, fault.ErrAlreadyExists)
	}
	if err := s.reserveLocked(r.cores, r.memoryMiB); err != nil {
		r.hooks.removeLocked(false)
		return fmt.Errorf("%s: %w", what, err)
	}
	s.runners.Add(1)
	return nil
}

// stop kills the process with reason.
func (r *runner[S]) stop(reason error) {
	r.log.Info("killing "+r.kind.noun, "reason", reason)
	r.kill(reason)
}

// run starts the process, restarting it while it is supervised and it, or
// its launch, fails, and finishes with its final state.
func (r *runner[S]) run() {
	defer r.s.runners.Done()
	defer r.kill(nil)
	if err := r.becomeOwner(); err != nil {
		r.log.WarnContext(r.ctx, r.kind.noun+" failed to launch", "err", err)
		r.finish(r.ctx, r.kind.launchFailed, err.Error(), nil)
		return
	}
	defer r.leaveOwner()
	begin := r.launchedAt
	var wait time.Duration
	for {
		l := r.spec
		l.trace = trace.SpanContextFromContext(r.ctx)
		r.current = &l
		steps := []step{
			// prestart: make and start the process, or claim a prestarted
			// one as soon as its command is known and hand it its log files
			commandStep{}, claimStep{}, cgroupStep{}, workdirStep{}, logsStep{}, startStep{},
			// poststart: it runs; the report step calls the poststart hook
			reportStep{running: r.running},
		}
		timings, err := runSteps(r.ctx, r.s.tracer, r.log, steps, &l)
		// The next launch's work dir is made once this one's process
		// started (or its launch failed): not on its way.
		r.s.spare.fill()
		// failed says why a supervised process is restarted; status is its
		// last exit status, if it ran.
		var failed string
		var status *int32
		var ran time.Duration
		if err != nil {
			if r.ctx.Err() != nil {
				r.finish(r.ctx, r.kind.killed, fmt.Sprintf("%v before its process started", context.Cause(r.ctx)), nil)
				return
			}
			r.log.WarnContext(r.ctx, r.kind.noun+" failed to launch", "err", err)
			if !r.supervise {
				r.finish(r.ctx, r.kind.launchFailed, err.Error(), nil)
				return
			}
			failed = "launch failed: " + err.Error()
		} else {
			r.log.InfoContext(r.ctx, r.kind.noun+" started", "pid", l.cmd.Process.Pid, "path", l.path,
				"launch", l.startedAt.Sub(begin), slog.Group("steps", timings...))
			began := time.Now()
			e, restart := r.exit(&l)
			if !restart {
				return
			}
			failed, status, ran = e.String(), e.status(), time.Since(began)
		}
		wait = restartWait(wait, ran, r.s.cfg.SuperviseBackoffCap)
		r.restarting(failed, status, wait)
		timer := time.NewTimer(wait)
		select {
		case <-r.ctx.Done():
			timer.Stop()
			r.finish(r.ctx, r.kind.killed,
				fmt.Sprintf("%v while waiting to restart; last run %v", context.Cause(r.ctx), failed), status)
			return
		case <-timer.C:
		}
		begin = r.s.cfg.Now()
	}
}

// becomeOwner gives the runner's launches their owner's user, on a worker
// that runs each application as a user of its own.
func (r *runner[S]) becomeOwner() error {
	if r.s.users == nil {
		return nil
	}
	uid, err := r.s.users.Acquire(r.spec.owner)
	if err != nil {
		return fmt.Errorf("%s: %w", lifecycle.StepCommand, err)
	}
	r.spec.uid = uid
	r.spec.env = append(r.spec.env, "HOME="+r.spec.dir)
	return nil
}

// leaveOwner takes back the work directory from the runner's user, whose
// processes all ended — it becomes the worker's, unreadable to the
// application (or driver) that gets the uid next — and frees the uid with
// the owner's last process.
func (r *runner[S]) leaveOwner() {
	if r.spec.uid == 0 {
		return
	}
	if err := reclaimDir(r.spec.dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		r.log.Warn("take back work dir", "err", err)
	}
	if err := r.s.users.Release(r.spec.owner); err != nil {
		r.log.Warn("free uid", "uid", r.spec.uid, "err", err)
	}
}

// exit is the exit phase: it waits for the started process l to end or be
// killed (the process.wait span), then finishes, unless the process is
// supervised and failed: then it reports restart and leaves the rest to run.
// The wait, and the final report sent in it (the span ends once the report
// was sent), are a trace of their own, linked to the launch's span: they end
// after it — the master ends its span of an executor when that report
// reaches it.
func (r *runner[S]) exit(l *launch) (e exit, restart bool) {
	wctx, span := r.s.tracer.Start(r.ctx, "process.wait", trace.WithNewRoot(),
		trace.WithLinks(trace.Link{SpanContext: trace.SpanContextFromContext(r.ctx)}), trace.WithAttributes(l.attrs...))
	e, killed := waitProcess(r.ctx, r.log, l.cmd, r.s.cfg.KillGrace)
	r.s.mu.Lock()
	r.group = nil
	r.s.mu.Unlock()
	grouped, oom := r.endGroup(l)
	r.s.mu.Lock()
	r.s.usedCPU[r.kind.noun] += r.endUsageLocked(l.cmd.Process.Pid, l.cmd.ProcessState, grouped)
	r.s.mu.Unlock()
	var reason error
	if killed {
		reason = context.Cause(r.ctx)
	}
	state, message := r.kind.outcome(e, reason)
	if oom && state == r.kind.failed {
		message = oomMessage(l.limits.MemoryBytes, grouped, e)
	}
	endWait(span, e, state == r.kind.failed, message)
	if state == r.kind.failed && r.supervise {
		span.End()
		return e, true
	}
	r.finish(wctx, state, message, e.status())
	// The report went to the reports' mailbox: the span ends once it was
	// sent, so that its call ends within it.
	r.s.reports.Post(wctx, func(context.Context) { span.End() })
	return e, false
}

// endGroup reads what the ended process's cgroup used, and whether the
// kernel OOM-killed a process of it, and removes it; nothing on a worker
// that contains nothing.
func (r *runner[S]) endGroup(l *launch) (contain.Stat, bool) {
	if l.group == nil {
		return contain.Stat{}, false
	}
	st, err := l.group.Stat()
	if err != nil {
		r.log.Warn("read cgroup", "err", err)
	}
	l.removeGroup(r.log)
	return st, st.OOMKills > 0
}

// endWait records how a process ended on its process.wait span; a failure
// sets the span's status to Error with an exception event.
func endWait(span trace.Span, e exit, failed bool, message string) {
	if status := e.status(); status != nil {
		span.SetAttributes(attribute.Int("process.exit.code", int(*status)))
	}
	if failed {
		telemetry.Fail(span, errors.New(message))
	}
}

// running is the report step: the process is running; poststart follows.
func (r *runner[S]) running(ctx context.Context, l *launch) {
	r.s.mu.Lock()
	r.setStateLocked(r.kind.running)
	r.pid, r.group = l.cmd.Process.Pid, l.group
	r.s.mu.Unlock()
	r.hooks.poststart(ctx, l)
}

// restarting records that a supervised process, or its launch, failed (why,
// and its exit status if it ran) and that it will be restarted after wait.
func (r *runner[S]) restarting(failed string, status *int32, wait time.Duration) {
	r.s.mu.Lock()
	if r.state != r.kind.restarting {
		r.setStateLocked(r.kind.restarting)
	}
	r.restarts++
	r.pid = 0
	r.message, r.exitStatus = failed, status
	restarts := r.restarts
	r.s.mu.Unlock()
	r.log.Warn("supervised "+r.kind.noun+" failed; restarting", "failure", failed, "wait", wait, "restarts", restarts)
}

// finish records the final state, frees the cores and memory and reports the
// state to the master.
func (r *runner[S]) finish(ctx context.Context, state S, message string, status *int32) {
	s := r.s
	s.mu.Lock()
	r.setStateLocked(state)
	r.message, r.exitStatus = message, status
	r.hooks.removeLocked(true)
	report := r.hooks.endedLocked(state, message, status)
	s.coresUsed -= r.cores
	s.memoryUsedMiB -= r.memoryMiB
	s.mu.Unlock()
	r.log.InfoContext(ctx, r.kind.noun+" finished", "state", lifecycle.Name(state), "message", message)
	report(ctx)
}

func (r *runner[S]) setStateLocked(to S) {
	if err := r.kind.transitions.Check(r.what, r.state, to); err != nil {
		r.log.Error(r.kind.noun+" state", "err", err)
		return
	}
	r.state = to
}

// stopper is a runner as KillExecutor and KillDriver find it.
type stopper interface{ stop(reason error) }

// killRunner kills the runner with key in table when the command comes from
// the active master: the whole of KillExecutor and KillDriver but for the
// request. A process that already ended (ended, called under s.mu) is killed
// already (the kill raced its exit: normal life); one the worker never ran,
// or forgot, is NotFound.
func killRunner[K comparable, R stopper](ctx context.Context, s *Server, masterURL, what string, table map[K]R, key K, ended func(K) bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.awaitActiveLocked(ctx, masterURL); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	r, ok := table[key]
	if !ok {
		if ended(key) {
			s.log.Debug("kill of a process that already ended", "what", what)
			return nil
		}
		return fmt.Errorf("%s: %w: not running on this worker", what, fault.ErrNotFound)
	}
	r.stop(errKilledByMaster)
	return nil
}

// retain appends r to finished, keeping the last retainedFinished.
func retain[R any](finished []R, r R) []R {
	if len(finished) >= retainedFinished {
		finished = finished[len(finished)-retainedFinished+1:]
	}
	return append(finished, r)
}
