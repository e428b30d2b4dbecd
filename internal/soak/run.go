// Package soak is Glint's chaos soak: it runs a real cluster of glint
// processes on loopback (one master on a recovery file, or three on etcd),
// keeps applications with known answers in flight through glint submit,
// kills and pauses masters, workers and etcd members on a schedule made
// from a seed, and checks that every submission either gave its answer or
// failed for its own reason, and that nothing ran twice, nothing was left
// behind, and at most one master led at a time. cmd/glint-soak runs it.
package soak

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Config is one run of the soak in one mode.
type Config struct {
	Mode     Mode
	Seed     uint64
	Duration time.Duration
	// Bins are the binaries the cluster runs; Dir holds the run's files.
	Bins *Binaries
	Dir  string
	// Progress gets a line for each fault, submission and violation.
	Progress io.Writer
}

// The limits the invariants are held to, and how often they are looked at.
const (
	// pollEvery is the pause between two rounds of polls of every master.
	pollEvery = 250 * time.Millisecond
	// scanEvery is the pause between two scans of the processes.
	scanEvery = 500 * time.Millisecond
	// noLeaderLimit is the longest stretch without a leading master that
	// is not a violation: every fault resolves well within it.
	noLeaderLimit = 30 * time.Second
	// failoverWindow is how soon after a fault the leadership must be
	// lost for the fault to count as causing a failover (a leader pauses
	// or dies at once; an etcd member's loss can take a lease's TTL).
	failoverWindow = 7 * time.Second
	// leftoverGrace is how long a process may outlive its worker or its
	// application: the worker's children get SIGTERM at its death and
	// watch it for 10 s.
	leftoverGrace = 20 * time.Second
	// teardownGrace is how long a worker or master may take to exit after
	// SIGTERM; etcdGrace etcd's.
	teardownGrace = 20 * time.Second
	etcdGrace     = 2 * time.Second
	// clientGrace is how long a client stopped at its deadline has after
	// SIGTERM.
	clientGrace = 5 * time.Second
)

type run struct {
	cfg     Config
	timing  Timing
	c       *cluster
	token   string
	view    *View
	etcd    []*clientv3.Client
	tearing atomic.Bool
	start   time.Time

	mu       sync.Mutex
	summary  *Summary
	samples  []Sample
	faults   []FaultEvent
	leader   string
	jobs     []JobRecord
	reported map[string]bool
}

// Run runs the soak of cfg and returns what it found. It returns when the
// run's time is up and every process it started has ended, or, cut short,
// once ctx ends and everything is torn down.
func Run(ctx context.Context, cfg Config) *Summary {
	r := &run{cfg: cfg, timing: NewTiming(cfg.Duration), view: NewView(), reported: map[string]bool{},
		summary: NewSummary(cfg.Mode, cfg.Seed, cfg.Duration)}
	if err := r.run(ctx); err != nil {
		r.summary.Error = err.Error()
	}
	r.summary.Interrupted = ctx.Err() != nil
	return r.summary
}

func (r *run) run(ctx context.Context) error {
	// Processes a worker started and left behind become the soak's
	// children when the worker dies, so the soak can see and reap them.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("become the subreaper of the cluster's processes: %w", err)
	}
	text, top := WordText(r.cfg.Seed)
	in := Inputs{WordFile: filepath.Join(r.cfg.Dir, "words.txt"), WordTop: top, Missing: filepath.Join(r.cfg.Dir, "no-such-words.txt")}
	if err := os.WriteFile(in.WordFile, []byte(text), 0o644); err != nil {
		return err
	}
	c, err := newCluster(r.cfg.Mode, r.cfg.Bins, r.cfg.Dir, r.exited)
	if err != nil {
		return err
	}
	defer c.ports.Release()
	r.c = c
	token, err := os.ReadFile(c.submitFile)
	if err != nil {
		return err
	}
	r.token = strings.TrimSpace(string(token))
	for _, u := range c.etcdURLs {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{u}, DialTimeout: etcdReadTimeout, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		defer cli.Close()
		r.etcd = append(r.etcd, cli)
	}
	defer r.teardown()
	r.logf("starting the cluster in %s: %d etcd, %d masters, %d workers", r.cfg.Dir, len(c.etcd), len(c.masters), len(c.workers))
	if err := c.bringUp(ctx, r.token); err != nil {
		return fmt.Errorf("the cluster did not start: %w", err)
	}
	r.start = time.Now()
	r.logf("cluster up; seed %d; faults until +%s, submissions until +%s, each within %s",
		r.cfg.Seed, r.timing.FaultsEnd, r.timing.SubmitEnd, r.timing.Deadline)

	watching, stopWatching := context.WithCancel(context.Background())
	var watchers, chaos sync.WaitGroup
	watchers.Go(func() { r.pollLoop(watching) })
	watchers.Go(func() { r.scanLoop(watching) })
	chaos.Go(func() { r.chaos(ctx, NewSchedule(r.cfg.Seed, r.cfg.Mode, r.timing)) })
	r.submitLoop(ctx, NewMix(r.cfg.Seed, r.cfg.Mode, in))
	chaos.Wait()
	// The quiet cluster is watched to the run's end: what the last faults
	// left behind shows after a grace.
	sleep(ctx, time.Until(r.start.Add(r.timing.Total)))
	stopWatching()
	watchers.Wait()
	r.teardown()
	r.finish()
	return nil
}

// logf writes a progress line, stamped with the run's time.
func (r *run) logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logLocked(format, args...)
}

func (r *run) logLocked(format string, args ...any) {
	at := "setup"
	if !r.start.IsZero() {
		at = fmt.Sprintf("+%.1fs", time.Since(r.start).Seconds())
	}
	fmt.Fprintf(r.cfg.Progress, "[%s %s] %s\n", r.cfg.Mode, at, fmt.Sprintf(format, args...))
}

// violation counts v and says so.
func (r *run) violation(v Violation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.summary.AddViolation(v)
	r.logLocked("VIOLATION %s: %s", v.Kind, v.Detail)
}

// violationOnce is violation, once per key over the run.
func (r *run) violationOnce(key string, v Violation) {
	r.mu.Lock()
	seen := r.reported[key]
	r.reported[key] = true
	r.mu.Unlock()
	if !seen {
		r.violation(v)
	}
}

// exited is every process's onExit: an HA master that lost the leadership
// exits by design and is started again as a standby, as its supervisor
// would; any other exit the soak did not cause is a violation, and the
// process is started again too.
func (r *run) exited(p *proc, err error) {
	if r.tearing.Load() {
		return
	}
	tail := p.logTail(16 << 10)
	if i := strings.LastIndex(tail, "=== soak: start"); i >= 0 {
		tail = tail[i:]
	}
	delay := time.Second
	if p.role == RoleMaster && r.cfg.Mode == ModeHA &&
		(strings.Contains(tail, "lost the leadership") || strings.Contains(tail, "another master leads now")) {
		r.mu.Lock()
		r.summary.StepDowns++
		r.logLocked("%s stepped down (%v); starting it again as a standby", p.name, err)
		r.mu.Unlock()
		delay = 500 * time.Millisecond
	} else {
		r.violation(Violation{ExitedByItself, fmt.Sprintf("%s: %v: %.500s", p.name, err, exitReason(tail))})
	}
	time.Sleep(delay)
	if !r.tearing.Load() {
		if err := p.start(); err != nil {
			r.logf("start %s again: %v", p.name, err)
		}
	}
}

// pollLoop polls every master (and etcd's election) round after round,
// checking each round, until ctx ends.
func (r *run) pollLoop(ctx context.Context) {
	var episodes Episodes
	for ctx.Err() == nil {
		round, polls := r.round(ctx)
		if ctx.Err() != nil {
			return
		}
		for _, v := range episodes.Next(CheckRound(round)) {
			r.violation(v)
		}
		src := viewSource(round, polls)
		if src != nil {
			for _, v := range r.view.Observe(*src) {
				r.violationOnce(v.Detail, v)
			}
		}
		r.mu.Lock()
		r.samples = append(r.samples, Sample{At: round.At, Present: len(round.Leaders()) > 0})
		switch {
		case src != nil:
			r.leader = src.URL
		case round.HA && round.EtcdKnown:
			r.leader = round.EtcdAfter
		}
		r.mu.Unlock()
		sleep(ctx, pollEvery)
	}
}

// round is one round of polls: in HA mode, etcd's elected master before
// and after every master is asked.
func (r *run) round(ctx context.Context) (Round, []polled) {
	rd := Round{HA: r.cfg.Mode == ModeHA}
	var before string
	var beforeOK bool
	if rd.HA {
		before, beforeOK = elected(ctx, r.etcd)
	}
	rd.At = time.Now()
	polls := pollMasters(ctx, r.c.masterURLs, r.token)
	for _, p := range polls {
		rd.Masters = append(rd.Masters, p.answer)
	}
	if rd.HA {
		after, afterOK := elected(ctx, r.etcd)
		rd.EtcdKnown, rd.EtcdBefore, rd.EtcdAfter = beforeOK && afterOK, before, after
	}
	return rd, polls
}

// viewSource is the /json the view learns from: the ALIVE master's — in HA
// mode the one etcd elected before and after the round, or the only ALIVE
// one when etcd did not answer.
func viewSource(rd Round, polls []polled) *MasterJSON {
	var alive []*MasterJSON
	for _, p := range polls {
		if p.json != nil && p.json.Status == "ALIVE" {
			if rd.HA && rd.EtcdKnown {
				if p.answer.URL == rd.EtcdBefore && p.answer.URL == rd.EtcdAfter {
					return p.json
				}
				continue
			}
			alive = append(alive, p.json)
		}
	}
	if len(alive) == 1 {
		return alive[0]
	}
	return nil
}

// scanLoop scans the processes until ctx ends: no executor twice at once,
// nothing outliving its worker or its application.
func (r *run) scanLoop(ctx context.Context) {
	left := Leftovers{Grace: leftoverGrace}
	ended := func(app string) bool { _, ok := r.view.AppFinal(app); return ok }
	for ctx.Err() == nil {
		procs := r.cfg.Bins.Scan()
		for _, t := range Twins(procs) {
			r.violationOnce("twin "+t.Key, t.Violation())
		}
		live := map[int]bool{}
		for _, w := range r.c.workers {
			if st, pid := w.status(); st != down {
				live[pid] = true
			}
		}
		for _, v := range left.Observe(time.Now(), procs, live, ended) {
			r.violation(v)
		}
		sleep(ctx, scanEvery)
	}
}

// currentLeader is the URL of the master that led at the last round.
func (r *run) currentLeader() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leader
}

// chaos injects the schedule's faults, each healed after its time, until
// the faults' end (or ctx's); then it brings every process back.
func (r *run) chaos(ctx context.Context, schedule []Fault) {
	healing, healNow := context.WithCancel(context.Background())
	var heals sync.WaitGroup
	for _, f := range schedule {
		if !sleep(ctx, time.Until(r.start.Add(f.At))) {
			break
		}
		r.inject(f, healing, &heals)
	}
	sleep(ctx, time.Until(r.start.Add(r.timing.FaultsEnd)))
	healNow()
	heals.Wait()
	for _, p := range r.c.all() {
		p.cont()
		if !r.tearing.Load() {
			if err := p.start(); err != nil {
				r.logf("start %s: %v", p.name, err)
			}
		}
	}
	r.logf("faults over: every process runs")
}

// inject applies f to the process it resolves to now, and schedules its heal.
func (r *run) inject(f Fault, healing context.Context, heals *sync.WaitGroup) {
	procs := r.c.all()
	leader := r.currentLeader()
	members := make([]Member, len(procs))
	for i, p := range procs {
		st, _ := p.status()
		members[i] = Member{Role: p.role, Up: st == up, Leader: p.role == RoleMaster && p.url == leader}
	}
	kind := f.Kind(r.cfg.Mode)
	i := Target(f, members)
	if i < 0 {
		r.mu.Lock()
		r.summary.Skipped++
		r.logLocked("fault %s skipped: no process may be hit now", kind)
		r.mu.Unlock()
		return
	}
	p := procs[i]
	ev := FaultEvent{At: time.Now(), Target: p.name,
		Leadership: p.role == RoleEtcd || (p.role == RoleMaster && (r.cfg.Mode == ModeFile || members[i].Leader))}
	var hit bool
	if f.Action == ActionKill {
		hit = p.kill()
	} else {
		hit = p.stop()
	}
	if !hit {
		r.mu.Lock()
		r.summary.Skipped++
		r.logLocked("fault %s skipped: %s went down meanwhile", kind, p.name)
		r.mu.Unlock()
		return
	}
	r.mu.Lock()
	r.faults = append(r.faults, ev)
	r.summary.Faults[kind]++
	r.logLocked("fault: %s %s (%s in %s)", f.Action, p.name, map[Action]string{ActionKill: "started again", ActionStop: "continued"}[f.Action], f.Heal)
	r.mu.Unlock()
	heals.Go(func() {
		select {
		case <-time.After(f.Heal):
		case <-healing.Done():
		}
		if f.Action == ActionStop {
			p.cont()
			return
		}
		if !r.tearing.Load() {
			if err := p.start(); err != nil {
				r.logf("start %s again: %v", p.name, err)
			}
		}
	})
}

// submitLoop keeps the mix's jobs in flight until submissions end, then
// waits for those in flight.
func (r *run) submitLoop(ctx context.Context, mix *Mix) {
	var wg sync.WaitGroup
	done := make(chan struct{}, 16)
	inflight, target := 0, mix.InFlight()
	for ctx.Err() == nil && time.Since(r.start) < r.timing.SubmitEnd {
		for inflight < target {
			j := mix.Next()
			inflight++
			target = mix.InFlight()
			wg.Go(func() {
				r.runJob(ctx, j)
				done <- struct{}{}
			})
		}
		select {
		case <-done:
			inflight--
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
	}
	wg.Wait()
}

// driverID is the id cluster-mode glint submit prints first.
var driverID = regexp.MustCompile(`(?m)^(driver-[0-9]+-[0-9]+)$`)

// runJob submits j with glint submit and records what it showed. A client
// still running at the deadline gets SIGTERM, then SIGKILL. In cluster
// mode it then waits for the driver's end at the master: a supervised
// driver relaunched under a new id until the last of the chain ends.
func (r *run) runJob(ctx context.Context, j Job) {
	start := time.Now()
	deadline := start.Add(r.timing.Deadline)
	cmd := exec.Command(r.cfg.Bins.Glint, j.SubmitArgs(r.c.masterURLs, r.c.submitFile)...)
	stdout, stderr := &capped{}, &capped{}
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr, cmd.SysProcAttr = r.c.env, r.cfg.Dir, stdout, stderr, childAttr()
	if err := cmd.Start(); err != nil {
		r.logf("job %s: start glint submit: %v", j.Name, err)
		r.addJob(JobRecord{Job: j, Result: Result{ExitCode: -1, Stderr: err.Error()}})
		return
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var err error
	timedOut := false
	select {
	case err = <-waited:
	case <-time.After(time.Until(deadline)):
		timedOut = true
		err = stopClient(cmd, waited)
	case <-ctx.Done():
		stopClient(cmd, waited)
		r.logf("job %s: cut short", j.Name)
		return
	}
	res := Result{TimedOut: timedOut, ExitCode: exitCode(err), Stdout: stdout.String(), Stderr: stderr.String()}
	r.keepOutput(j.Name, res)
	rec := JobRecord{Job: j}
	if j.Deploy == DeployClient {
		res.Succeeded = !timedOut && res.ExitCode == 0
		res.Outputs = SplitOutput(res.Stdout, false)
	} else if m := driverID.FindStringSubmatch(res.Stdout); m != nil {
		rec.Chain, rec.Acknowledged = []string{m[1]}, true
		if !timedOut {
			follow := j.Supervise && strings.Contains(res.Stderr, "relaunched as")
			limit := deadline
			if soon := time.Now().Add(10 * time.Second); !follow && soon.Before(limit) {
				limit = soon
			}
			ended := r.waitChainEnd(ctx, m[1], limit)
			if ctx.Err() != nil {
				r.logf("job %s: cut short", j.Name)
				return
			}
			if !ended && follow {
				res.TimedOut = true
			}
		}
	}
	rec.Result = res
	r.addJob(rec)
	r.logf("job %s: exit %d after %s", j.Name, res.ExitCode, time.Since(start).Round(100*time.Millisecond))
}

// keepOutput writes what glint submit printed for job name to the run's
// jobs directory (name.stdout, name.stderr), kept with the run's other
// files when the soak keeps them.
func (r *run) keepOutput(name string, res Result) {
	dir := filepath.Join(r.cfg.Dir, "jobs")
	err := os.MkdirAll(dir, 0o755)
	for ext, text := range map[string]string{"stdout": res.Stdout, "stderr": res.Stderr} {
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name+"."+ext), []byte(text), 0o644)
		}
	}
	if err != nil {
		r.logf("job %s: keep its output: %v", name, err)
	}
}

// waitChainEnd waits until the last driver of id's chain is in a final
// state other than RELAUNCHING, or until limit; false if it did not end.
func (r *run) waitChainEnd(ctx context.Context, id string, limit time.Time) bool {
	for {
		if _, last := r.view.Chain(id); finalDriver[last.State] && last.State != "RELAUNCHING" {
			return true
		}
		if time.Now().After(limit) || !sleep(ctx, pollEvery) {
			return false
		}
	}
}

func (r *run) addJob(rec JobRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.jobs = append(r.jobs, rec)
}

// stopClient ends a client as a user would, SIGTERM, and its group with
// SIGKILL after clientGrace; it returns the client's Wait error.
func stopClient(cmd *exec.Cmd, waited <-chan error) error {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-waited:
		return err
	case <-time.After(clientGrace):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		return <-waited
	}
}

func exitCode(err error) int {
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.ExitCode()
	}
	return -1
}

// teardown ends every process — workers first (they end their executors
// and drivers), then masters, then etcd — reports whatever of the soak's
// binaries still runs after, kills it and reaps it. It runs once.
func (r *run) teardown() {
	if r.c == nil || r.tearing.Swap(true) {
		return
	}
	began := time.Now()
	defer func() { r.logf("torn down in %s", time.Since(began).Round(100*time.Millisecond)) }()
	for _, group := range [][]*proc{r.c.workers, r.c.masters, r.c.etcd} {
		var wg sync.WaitGroup
		for _, p := range group {
			wg.Go(func() {
				grace := teardownGrace
				if p.role == RoleEtcd {
					grace = etcdGrace
				}
				if !p.terminate(grace) && p.role != RoleEtcd {
					r.violation(Violation{LeftBehind, fmt.Sprintf("%s did not exit within %s of SIGTERM", p.name, grace)})
				}
			})
		}
		wg.Wait()
	}
	_ = waitFor(context.Background(), leftoverGrace, "the cluster's processes gone", func() bool { return len(r.cfg.Bins.Scan()) == 0 })
	for _, p := range r.cfg.Bins.Scan() {
		r.violation(Violation{LeftBehind, fmt.Sprintf("after the teardown: pid %d (%s %s)", p.PID, filepath.Base(p.Bin), p.describe())})
		_ = syscall.Kill(p.PID, syscall.SIGKILL)
	}
	reapOrphans()
}

// reapOrphans waits for the processes that became the soak's children when
// their parent died, once they are dead; the soak's own children have all
// been waited for by then.
func reapOrphans() {
	deadline := time.Now().Add(5 * time.Second)
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.ECHILD):
			return
		case pid > 0 || errors.Is(err, syscall.EINTR):
		case time.Now().After(deadline):
			return
		default:
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// finish checks what can be checked only at the end: each job's outcome
// and its launches, every executor's, and the leadership over the run.
func (r *run) finish() {
	w, err := ScanWorkDirs(r.c.workDirs)
	if err != nil {
		r.logf("read the work dirs: %v", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.summary
	s.Executors, s.Drivers = len(w.Executors), len(w.Drivers)
	for _, v := range w.ExecutorTwice() {
		s.AddViolation(v)
	}
	for _, rec := range r.jobs {
		if rec.Job.Deploy == DeployCluster && len(rec.Chain) == 0 {
			rec.Chain = w.DriversNamed(rec.Job.Name)
		}
		if rec.Job.Deploy == DeployCluster && len(rec.Chain) > 0 {
			chain, last := r.view.Chain(rec.Chain[0])
			rec.Chain = chain
			res := &rec.Result
			res.DriverState, res.DriverMessage = last.State, last.Message
			res.Outputs, res.DriverStderr = w.DriverOutputs(chain)
			res.Succeeded = !res.TimedOut && (res.ExitCode == 0 || (rec.Job.Supervise && last.State == "FINISHED"))
		}
		cause, detail := Classify(rec.Job, rec.Result)
		s.AddOutcome(rec.Job.Name, cause, detail)
		for _, v := range CheckJob(rec, w, r.view.Apps(rec.Job.Name)) {
			s.AddViolation(v)
		}
	}
	for _, v := range NoLeaderSpans(r.samples, noLeaderLimit) {
		s.AddViolation(v)
	}
	s.Failovers = Failovers(r.faults, r.samples, failoverWindow)
}

// sleep waits d or until ctx ends; false if ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// capped is a client's output, kept up to 1 MiB.
type capped struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

const outputCap = 1 << 20

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := outputCap - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}
