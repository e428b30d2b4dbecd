package soak

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// procState is where a managed process is.
type procState int

const (
	down procState = iota
	up
	stopped
)

// proc is a long-running process of the cluster — a master, a worker or an
// etcd member — that the soak starts, faults, starts again and ends. Its
// output goes to one log file across its restarts.
type proc struct {
	name    string
	role    Role
	argv    []string
	env     []string
	logPath string
	url     string
	// onExit is called (on its own goroutine) when the process exits
	// without the soak having ended it.
	onExit func(p *proc, err error)

	mu     sync.Mutex
	cmd    *exec.Cmd
	state  procState
	done   chan struct{}
	ours   bool // the soak ended it: its exit is expected
	starts int
}

// start starts the process if it is down.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state != down {
		return nil
	}
	log, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	p.starts++
	fmt.Fprintf(log, "=== soak: start %d of %s at %s ===\n", p.starts, p.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Env, cmd.Stdout, cmd.Stderr = p.env, log, log
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.state, p.done, p.ours = cmd, up, done, false
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		ours := p.ours
		p.state = down
		close(done)
		p.mu.Unlock()
		if !ours && p.onExit != nil {
			p.onExit(p, err)
		}
	}()
	return nil
}

// childAttr puts a child in a process group of its own (so a signal to the
// soak's terminal does not reach it, and its group can be killed whole) and
// kills it if the soak dies.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// kill SIGKILLs the process and waits for its end; false if it was down.
func (p *proc) kill() bool {
	p.mu.Lock()
	if p.state == down {
		p.mu.Unlock()
		return false
	}
	p.ours = true
	_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGKILL)
	done := p.done
	p.mu.Unlock()
	<-done
	return true
}

// stop SIGSTOPs the process; false if it was not up.
func (p *proc) stop() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state != up {
		return false
	}
	_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGSTOP)
	p.state = stopped
	return true
}

// cont SIGCONTs a stopped process.
func (p *proc) cont() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == stopped {
		_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGCONT)
		p.state = up
	}
}

// terminate ends the process as its operator would: SIGTERM, and SIGKILL
// to its whole group after grace. It reports whether grace was enough.
func (p *proc) terminate(grace time.Duration) bool {
	p.mu.Lock()
	if p.state == down {
		p.mu.Unlock()
		return true
	}
	p.ours = true
	pid := p.cmd.Process.Pid
	if p.state == stopped {
		_ = syscall.Kill(pid, syscall.SIGCONT)
		p.state = up
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
		return true
	case <-time.After(grace):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-done
		return false
	}
}

// status returns the process's state and pid (0 when down).
func (p *proc) status() (procState, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == down {
		return down, 0
	}
	return p.state, p.cmd.Process.Pid
}

// logTail is the end of the process's log, for a report of its exit.
func (p *proc) logTail(n int64) string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// exitReason is what a log that ends in an exit says of it: a Go panic's
// or fatal error's message and the frame it came from, else the log's last
// line.
func exitReason(log string) string {
	lines := strings.Split(strings.TrimSpace(log), "\n")
	for i, line := range lines {
		if strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") {
			reason := line
			for j := i + 1; j < len(lines); j++ {
				if strings.HasPrefix(lines[j], "goroutine ") && j+1 < len(lines) {
					reason += " in " + strings.TrimSpace(lines[j+1])
					if j+2 < len(lines) {
						reason += " at " + strings.TrimSpace(lines[j+2])
					}
					break
				}
			}
			return reason
		}
	}
	return strings.TrimSpace(lines[len(lines)-1])
}
