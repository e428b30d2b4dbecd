package worker

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/child"
)

// standbyForTest is a prestarted executor for a claim step's test: a real
// process (sleep) in its own process group, and the test's end of its claim
// channel, closed when open is false (the process can take no claim). The
// process is reaped at the test's end if no step reaped it.
func standbyForTest(t *testing.T, open bool) (*prestart, *standby, *os.File) {
	t.Helper()
	mine, theirs, err := child.ClaimChannel()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		}
		theirs.Close()
	})
	if !open {
		theirs.Close()
	}
	p := &prestart{s: &Server{cfg: Config{KillGrace: 10 * time.Millisecond}, log: testLogger()}, command: []string{"glint", "executor"}}
	return p, &standby{cmd: cmd, claim: mine, url: "http://127.0.0.1:1"}, theirs
}

// claimedLaunch is a launch of the prestarted processes' command.
func claimedLaunch() *launch {
	argv := []string{"glint", "executor", "--cores", "1"}
	return &launch{argv: argv, template: &masterv1.Command{Args: argv}, now: time.Now}
}

func TestTheClaimStepSendsTheProcessItsLaunch(t *testing.T) {
	p, sb, theirs := standbyForTest(t, true)
	l := claimedLaunch()
	if err := (claimStep{standby: sb, prestart: p}).Run(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	if l.claimed == nil || l.claimed.standby != sb || l.startedAt.IsZero() {
		t.Fatalf("claimed %v, started %v: want the standby claimed, its claim's time stamped", l.claimed, l.startedAt)
	}
	msg := make([]byte, child.MaxClaimBytes)
	n, err := theirs.Read(msg)
	if err != nil || !strings.Contains(string(msg[:n]), `"--cores","1"`) {
		t.Errorf("the process got %q (%v), want its launch's arguments", msg[:n], err)
	}
	if (startStep{}).choose(l) != (handoverStep{}) {
		t.Error("a claimed launch's process.start is not the handover")
	}
}

func TestAClaimTheProcessCannotTakeLeavesTheLaunchToProcessStart(t *testing.T) {
	p, sb, _ := standbyForTest(t, false)
	l := claimedLaunch()
	spans := tracetest.NewSpanRecorder()
	ctx, span := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)).Tracer("test").Start(context.Background(), "claim")
	if err := (claimStep{standby: sb, prestart: p}).Run(ctx, l); err != nil {
		t.Fatal(err)
	}
	span.End()
	if l.claimed != nil || sb.cmd.ProcessState == nil {
		t.Errorf("claimed %v, process reaped %v: want nothing claimed and the process ended", l.claimed, sb.cmd.ProcessState != nil)
	}
	if ev := spans.Ended()[0].Events(); len(ev) != 1 || !strings.Contains(ev[0].Name, "process.start starts one") {
		t.Errorf("span events %v, want why the process was not claimed", ev)
	}
	if (startStep{}).choose(l) != (startStep{}) {
		t.Error("an unclaimed launch's process is not started")
	}
}

func TestAClaimOfALaunchKilledFirstEndsTheProcess(t *testing.T) {
	p, sb, _ := standbyForTest(t, true)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	l := claimedLaunch()
	if err := (claimStep{standby: sb, prestart: p}).Run(ctx, l); err == nil || !strings.Contains(err.Error(), "not started") {
		t.Errorf("claim after the kill: %v, want not started", err)
	}
	if l.claimed != nil || sb.cmd.ProcessState == nil {
		t.Errorf("claimed %v, process reaped %v: want nothing claimed and the process ended", l.claimed, sb.cmd.ProcessState != nil)
	}
}
