package worker

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/child"
)

func TestOnlyThisBinarysExecutorWithoutItsOwnEnvironmentClaimsAPrestartedProcess(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The executor program beside a binary (glint-executor beside glint).
	program := filepath.Join(t.TempDir(), "glint-executor")
	if err := os.WriteFile(program, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		command []string // the prestarted processes'
		argv    []string
		env     map[string]string
		claim   bool
	}{
		{"this binary's executor", []string{self, "executor"}, []string{self, "executor", "--cores", "1"}, nil, true},
		{"with an environment of its own", []string{self, "executor"}, []string{self, "executor"}, map[string]string{"GOMAXPROCS": "1"}, false},
		{"another subcommand", []string{self, "executor"}, []string{self, "driver"}, nil, false},
		{"another binary", []string{self, "executor"}, []string{"/bin/true", "executor"}, nil, false},
		{"this binary's executor program", []string{program}, []string{program, "--cores", "1"}, nil, true},
		{"the binary instead of its executor program", []string{program}, []string{"/bin/true", "--cores", "1"}, nil, false},
		{"the executor subcommand where its program runs", []string{program}, []string{self, "executor", "--cores", "1"}, nil, false},
		{"the executor program where the subcommand runs", []string{self, "executor"}, []string{program, "--cores", "1"}, nil, false},
	} {
		p := &prestart{command: tc.command, idle: []*standby{{url: "http://127.0.0.1:1"}}}
		l := &launch{argv: tc.argv, template: &masterv1.Command{Args: tc.argv, Env: tc.env}}
		if got := p.take(l) != nil; got != tc.claim {
			t.Errorf("%s: claimed %v, want %v", tc.name, got, tc.claim)
		}
		if left := len(p.idle); left != map[bool]int{true: 0, false: 1}[tc.claim] {
			t.Errorf("%s: %d idle processes left", tc.name, left)
		}
	}
}

func TestAPrestartedProcessIsOfferedToLaunchesOnlyOnceItSaysItIsReadyAndItsDirIsRemovedWithIt(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	mine, theirs, err := child.ClaimChannel()
	if err != nil {
		t.Fatal(err)
	}
	defer theirs.Close()
	// The test plays the prestarted process: it holds the other end of the
	// channel; the process is one that does nothing, ended by close.
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sb := prestartedDir(t, t.TempDir())
	sb.cmd, sb.claim, sb.url = cmd, mine, "http://127.0.0.1:1"
	made := sb.dir
	p := &prestart{s: &Server{cfg: Config{KillGrace: 10 * time.Millisecond}, log: testLogger()}, command: []string{self, "executor"}, want: 1,
		starting: 1, warming: map[*standby]bool{}}
	go p.admit(sb, nil)
	waiting := func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.warming[sb] || len(p.idle) > 0
	}
	tooltest.Eventually(t, "the process admitted or waited for", waiting)
	l := &launch{argv: []string{self, "executor"}, template: &masterv1.Command{Args: []string{self, "executor"}}}
	if p.idleCount() != 0 || p.take(l) != nil {
		t.Fatal("a process that did not say it is ready is offered to a launch")
	}
	if _, err := theirs.Write([]byte("R")); err != nil {
		t.Fatal(err)
	}
	tooltest.Eventually(t, "the ready process idle", func() bool { return p.idleCount() == 1 })
	if p.take(l) != sb {
		t.Error("the ready process is not offered to a launch")
	}
	p.idle = append(p.idle, sb) // for close to end it
	p.close()
	if _, err := os.Stat(made); !os.IsNotExist(err) {
		t.Errorf("the directory made with the ended process is still at %s (%v)", made, err)
	}
}

// prestartedDir makes, in workDir, the directory a prestarted process is
// made with.
func prestartedDir(t *testing.T, workDir string) *standby {
	t.Helper()
	d, err := makeLaunchDir(workDir)
	if err != nil {
		t.Fatal(err)
	}
	return &standby{launchDir: d}
}

func TestAClaimedLaunchsWorkDirIsTheOneMadeWithItsProcess(t *testing.T) {
	workDir := t.TempDir()
	sb := prestartedDir(t, workDir)
	made := sb.dir
	l := &launch{dir: filepath.Join(workDir, "app-20260101000000-0000", "3"), claimed: &claimStep{standby: sb},
		argv: []string{"glint", "executor"}}
	if err := (workdirStep{}).Run(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	if err := (logsStep{}).Run(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	l.closeLogs()
	if _, err := os.Stat(made); !os.IsNotExist(err) {
		t.Errorf("the directory made with the process is still at %s (%v)", made, err)
	}
	for _, name := range []string{"stdout", "stderr"} {
		b, err := os.ReadFile(filepath.Join(l.dir, name))
		if err != nil || !strings.HasPrefix(string(b), "Launch command:") {
			t.Errorf("%s in the launch's work dir: %q, %v; want the header", name, b, err)
		}
	}
}

func TestAClaimedLaunchMakesItsOwnWorkDirWhereAnEarlierOneLeftFiles(t *testing.T) {
	workDir := t.TempDir()
	sb := prestartedDir(t, workDir)
	made := sb.dir
	dir := filepath.Join(workDir, "app-20260101000000-0000", "3")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "stderr"), []byte("earlier\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	l := &launch{dir: dir, claimed: &claimStep{standby: sb}, argv: []string{"glint", "executor"}}
	for _, st := range []step{workdirStep{}, logsStep{}} {
		if err := st.Run(context.Background(), l); err != nil {
			t.Fatal(err)
		}
	}
	l.closeLogs()
	if b, _ := os.ReadFile(filepath.Join(dir, "stderr")); !strings.HasPrefix(string(b), "earlier\nLaunch command:") {
		t.Errorf("stderr %q: want the earlier run's output, then the header", b)
	}
	if _, err := os.Stat(made); !os.IsNotExist(err) {
		t.Errorf("the unused directory made with the process is still at %s (%v)", made, err)
	}
}

func TestAWorkerRemovesTheDirsMadeAheadThatAnEarlierRunLeft(t *testing.T) {
	workDir := t.TempDir()
	left := prestartedDir(t, workDir)
	left.stdout.Close()
	left.stderr.Close()
	app := filepath.Join(workDir, "app-20260101000000-0000")
	if err := os.Mkdir(app, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := removeStaleDirs(workDir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(left.dir); !os.IsNotExist(err) {
		t.Errorf("%s left: %v", left.dir, err)
	}
	if _, err := os.Stat(app); err != nil {
		t.Errorf("an application's directory was removed: %v", err)
	}
}
