package worker

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/child"
)

func TestOnlyThisBinarysExecutorWithoutItsOwnEnvironmentClaimsAPrestartedProcess(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		argv  []string
		env   map[string]string
		claim bool
	}{
		{"this binary's executor", []string{self, "executor", "--cores", "1"}, nil, true},
		{"with an environment of its own", []string{self, "executor"}, map[string]string{"GOMAXPROCS": "1"}, false},
		{"another subcommand", []string{self, "driver"}, nil, false},
		{"another binary", []string{"/bin/true", "executor"}, nil, false},
	} {
		p := &prestart{path: self, idle: []*standby{{url: "http://127.0.0.1:1"}}}
		l := &launch{argv: tc.argv, template: &masterv1.Command{Args: tc.argv, Env: tc.env}}
		if got := p.take(l) != nil; got != tc.claim {
			t.Errorf("%s: claimed %v, want %v", tc.name, got, tc.claim)
		}
		if left := len(p.idle); left != map[bool]int{true: 0, false: 1}[tc.claim] {
			t.Errorf("%s: %d idle processes left", tc.name, left)
		}
	}
}

func TestAPrestartedProcessIsOfferedToLaunchesOnlyOnceItSaysItIsReady(t *testing.T) {
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
	sb := &standby{cmd: cmd, claim: mine, url: "http://127.0.0.1:1"}
	p := &prestart{s: &Server{cfg: Config{KillGrace: 10 * time.Millisecond}, log: testLogger()}, path: self, want: 1,
		starting: 1, warming: map[*standby]bool{}}
	defer p.close()
	go p.admit(sb, nil)
	waiting := func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.warming[sb] || len(p.idle) > 0
	}
	eventually(t, "the process admitted or waited for", waiting)
	l := &launch{argv: []string{self, "executor"}, template: &masterv1.Command{Args: []string{self, "executor"}}}
	if p.idleCount() != 0 || p.take(l) != nil {
		t.Fatal("a process that did not say it is ready is offered to a launch")
	}
	if _, err := theirs.Write([]byte("R")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the ready process idle", func() bool { return p.idleCount() == 1 })
	if p.take(l) != sb {
		t.Error("the ready process is not offered to a launch")
	}
	p.idle = append(p.idle, sb) // for close to end it
}
