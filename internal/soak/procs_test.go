package soak

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/glint-cluster/glint/internal/tooltest"
)

func TestAProcIsStoppedContinuedKilledAndStartedAgain(t *testing.T) {
	exits := make(chan error, 4)
	p := &proc{name: "sleeper", argv: []string{"sleep", "60"}, logPath: filepath.Join(t.TempDir(), "sleeper.log"),
		onExit: func(_ *proc, err error) { exits <- err }}
	t.Cleanup(func() { p.terminate(time.Second) })
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	_, pid := p.status()
	if !p.stop() {
		t.Fatal("stop: not up")
	}
	// The signal is delivered soon after kill returns.
	tooltest.EventuallyWithin(t, 10*time.Second, "the process stopped", func() bool {
		state, err := tooltest.ProcState(pid)
		if err != nil {
			t.Fatal(err)
		}
		return state == 'T'
	})
	p.cont()
	if st, _ := p.status(); st != up {
		t.Fatalf("continued, the proc is %v", st)
	}
	if !p.kill() {
		t.Fatal("kill: was down")
	}
	if st, _ := p.status(); st != down || p.kill() {
		t.Fatalf("killed, the proc is %v", st)
	}
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	if _, again := p.status(); again == pid || again == 0 {
		t.Fatalf("started again as pid %d (was %d)", again, pid)
	}
	if !p.terminate(5 * time.Second) {
		t.Fatal("sleep did not end on SIGTERM")
	}
	select {
	case err := <-exits:
		t.Fatalf("an exit the soak caused was reported: %v", err)
	default:
	}
	log, _ := os.ReadFile(p.logPath)
	if n := strings.Count(string(log), "=== soak: start"); n != 2 {
		t.Fatalf("the log marks %d starts, want 2:\n%s", n, log)
	}
}

func TestAProcThatExitsByItselfIsReported(t *testing.T) {
	exits := make(chan error, 1)
	p := &proc{name: "false", argv: []string{"false"}, logPath: filepath.Join(t.TempDir(), "false.log"),
		onExit: func(_ *proc, err error) { exits <- err }}
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exits:
		if err == nil || exitCode(err) != 1 {
			t.Fatalf("exit reported as %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the exit was not reported")
	}
}

func TestExitReasonNamesAPanicAndWhereItCameFrom(t *testing.T) {
	panicked := `{"level":"INFO","msg":"elected leader"}
panic: runtime error: invalid memory address or nil pointer dereference
[signal SIGSEGV: segmentation violation code=0x1 addr=0x0 pc=0x5c1a2e]

goroutine 71 [running]:
github.com/glint-cluster/glint/services/master.(*Server).recover(0xc0001e2000)
	/src/services/master/recovery.go:120 +0x2e
created by time.goFunc
	/usr/local/go/src/time/sleep.go:215 +0x2d
`
	want := "panic: runtime error: invalid memory address or nil pointer dereference in " +
		"github.com/glint-cluster/glint/services/master.(*Server).recover(0xc0001e2000) at /src/services/master/recovery.go:120 +0x2e"
	if got := exitReason(panicked); got != want {
		t.Errorf("exitReason = %q\nwant %q", got, want)
	}
	if got := exitReason("{\"msg\":\"starting\"}\nglint: register worker: giving up\n"); got != "glint: register worker: giving up" {
		t.Errorf("exitReason of an error exit = %q", got)
	}
}
