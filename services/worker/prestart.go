package worker

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/contain"
)

// MaxPrestartExecutors bounds --prestart-executors.
const MaxPrestartExecutors = 64

// prestart keeps Config.PrestartExecutors idle executor processes ready
// (the worker's own binary's executor command, child.ExecutorCommand:
// glint-executor beside it, else `glint executor`; waiting for a claim): a
// launch whose command is that executor command claims one instead of
// starting a process (the claim step), and a replacement starts in the
// background once the claimed executor registered with its driver. A
// prestarted process serves one claim, so it is never shared between
// applications. Methods of a nil *prestart do nothing: the worker
// prestarts nothing.
type prestart struct {
	s *Server
	// command is what prestarted processes run: the executor command of
	// the worker's own binary, the program's path first.
	command []string
	want    int

	mu   sync.Mutex
	idle []*standby // ready for a claim
	// starting counts the processes being started; those started are in
	// warming until they say they are ready.
	starting int
	warming  map[*standby]bool
	closed   bool
	wg       sync.WaitGroup // processes being started
	// made counts the processes started, naming their cgroups.
	made atomic.Int64
}

// standby is a prestarted executor process waiting for its claim.
type standby struct {
	cmd   *exec.Cmd
	claim *os.File // the worker's end of the claim channel
	url   string   // where it will serve, from the socket it holds
	// group, on a contained worker, is the process's cgroup, which the
	// cgroup step of its launch makes the launch's (contain.Group.Become).
	group *contain.Group
	// launchDir is a work directory made with the process: the workdir
	// step of its launch moves it into place, so that a claim makes no
	// files.
	launchDir
}

// newPrestart returns the worker's prestart, or nil when it keeps none.
func newPrestart(s *Server) (*prestart, error) {
	if s.cfg.PrestartExecutors == 0 {
		return nil, nil
	}
	path, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("prestart executors: %w", err)
	}
	return &prestart{s: s, command: child.ExecutorCommand(path), want: s.cfg.PrestartExecutors, warming: map[*standby]bool{}}, nil
}

// fill starts processes in the background until want are idle or starting.
// A process is idle, offered to launches, once it said it is ready: a claim
// never waits for a process still starting.
func (p *prestart) fill() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for !p.closed && len(p.idle)+p.starting < p.want {
		p.starting++
		p.wg.Go(func() {
			sb, err := p.start()
			p.admit(sb, err)
		})
	}
}

// admit makes sb, a process being started (or err, why it could not be),
// idle once it says it is ready for its claim; one that ends first, or that
// close finds starting, is ended and reaped.
func (p *prestart) admit(sb *standby, err error) {
	if err == nil {
		err = p.ready(sb)
	}
	p.mu.Lock()
	p.starting--
	closed := p.closed
	if err == nil && !closed {
		p.idle = append(p.idle, sb)
	}
	p.mu.Unlock()
	if err != nil && !closed {
		p.s.log.Warn("prestart an executor", "err", err)
	}
	if sb != nil && (err != nil || closed) {
		sb.discard(p.s.cfg.KillGrace, p.s.log)
	}
}

// ready waits until sb says it is ready, or ended, or close closed its
// channel.
func (p *prestart) ready(sb *standby) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return errPrestartClosed
	}
	p.warming[sb] = true
	p.mu.Unlock()
	err := child.Ready(sb.claim)
	p.mu.Lock()
	delete(p.warming, sb)
	p.mu.Unlock()
	return err
}

// errPrestartClosed ends the wait of a process started as the worker stops.
var errPrestartClosed = errors.New("the worker is stopping")

// start starts one process, as the process.start step would but for a
// claim channel in place of the launch: its listening socket is fd 3, its end
// of the channel fd 4 (its span relay, when the worker is traced, fd 5); its
// output goes nowhere until the claim hands it its log files, which are made
// with it.
func (p *prestart) start() (*standby, error) {
	d, err := makeLaunchDir(p.s.cfg.WorkDir)
	if err != nil {
		return nil, err
	}
	sb := &standby{launchDir: d}
	socket, url, err := openListener(p.s.host)
	if err != nil {
		sb.removeDir()
		return nil, err
	}
	defer socket.Close()
	mine, theirs, err := child.ClaimChannel()
	if err != nil {
		sb.removeDir()
		return nil, err
	}
	defer theirs.Close()
	cmd := &exec.Cmd{
		Path: p.command[0],
		Args: p.command,
		Env: mergeEnv(os.Environ(), child.WorkerEnv(childTLS(p.s.cfg)), []string{
			child.WorkerPIDEnv + "=" + strconv.Itoa(os.Getpid()),
			child.WorkerURLEnv + "=" + p.s.cfg.URL,
			child.ListenFDEnv + "=3",
			child.ClaimFDEnv + "=4",
			// Its cores come with the claim; it starts on one, and takes
			// them once registered.
			"GOMAXPROCS=1",
		}),
		Dir:         p.s.cfg.WorkDir,
		ExtraFiles:  []*os.File{socket, theirs},
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM},
	}
	if p.s.users != nil {
		// It waits as root, but in no group besides root's: its claim has
		// then one call fewer to make as it becomes its user.
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid()), Groups: []uint32{}}
	}
	start := func() error { return p.s.cfg.SpanRelay.Start(cmd) }
	if p.s.cgroups != nil {
		// Born in a group of its own, which becomes its launch's once it
		// is claimed: nothing is moved on the launch's path.
		if sb.group, err = p.s.cgroups.New(fmt.Sprintf("standby-%d", p.made.Add(1)), contain.Limits{Pids: p.s.cfg.PidsLimit}); err != nil {
			mine.Close()
			sb.removeDir()
			return nil, err
		}
		err = sb.group.Start(cmd, start)
	} else {
		err = start()
	}
	if err != nil {
		mine.Close()
		sb.removeGroup(p.s.log)
		sb.removeDir()
		return nil, err
	}
	sb.cmd, sb.claim, sb.url = cmd, mine, url
	return sb, nil
}

// claim is the step that claims an idle process for l, when its command is
// the prestarted processes' executor command with no environment of its own (a prestarted process
// could not honour variables read at start, such as GOMAXPROCS); nil when
// none fits.
func (p *prestart) claim(l *launch) step {
	if p == nil {
		return nil
	}
	if sb := p.take(l); sb != nil {
		return claimStep{standby: sb, prestart: p}
	}
	return nil
}

func (p *prestart) take(l *launch) *standby {
	n := len(p.command)
	if len(l.template.GetEnv()) > 0 || len(l.argv) < n || !slices.Equal(l.argv[1:n], p.command[1:]) {
		return nil
	}
	path, err := lookPath(l.redaction, l.argv[0])
	if err != nil || !sameFile(path, p.command[0]) {
		return nil
	}
	p.mu.Lock()
	if len(p.idle) == 0 {
		p.mu.Unlock()
		return nil
	}
	sb := p.idle[0]
	p.idle = p.idle[1:]
	p.mu.Unlock()
	return sb
}

func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// idleCount is how many processes wait for a claim.
func (p *prestart) idleCount() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// close ends the idle processes and those starting, and reaps them.
func (p *prestart) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	for sb := range p.warming {
		sb.claim.Close() // ends its wait in ready
	}
	p.mu.Unlock()
	p.wg.Wait()
	var wg sync.WaitGroup
	for _, sb := range idle {
		wg.Go(func() { sb.discard(p.s.cfg.KillGrace, p.s.log) })
	}
	wg.Wait()
}

// discard ends an unclaimed process: closing its claim channel makes it exit;
// after grace it is killed. It is reaped, and the directory made with it
// removed.
func (sb *standby) discard(grace time.Duration, log *slog.Logger) {
	defer sb.removeDir()
	defer sb.removeGroup(log)
	sb.claim.Close()
	done := make(chan struct{})
	go func() {
		_ = sb.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-sb.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// removeGroup removes an unclaimed process's cgroup, with what runs in it.
func (sb *standby) removeGroup(log *slog.Logger) {
	if sb.group == nil {
		return
	}
	if err := sb.group.Remove(); err != nil {
		log.Warn("remove cgroup", "err", err)
	}
	sb.group = nil
}
