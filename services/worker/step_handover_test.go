package worker

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// logFiles gives l log files in a temporary directory.
func logFiles(t *testing.T, l *launch) {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []**os.File{&l.stdout, &l.stderr} {
		file, err := os.Create(filepath.Join(dir, "log"))
		if err != nil {
			t.Fatal(err)
		}
		*f = file
	}
}

func TestTheHandoverGivesTheClaimedProcessItsLogsAndWaitsForItsRegistration(t *testing.T) {
	p, sb, theirs := standbyForTest(t, true)
	l := claimedLaunch()
	l.claimed = &claimStep{standby: sb, prestart: p}
	logFiles(t, l)
	if err := (handoverStep{}).Run(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	if l.cmd != sb.cmd || l.url != sb.url || l.claimed != nil || l.stdout != nil || l.stderr != nil {
		t.Errorf("after the handover: process %v (want the claimed one's), url %q, claimed %v, logs open %v", l.cmd, l.url, l.claimed, l.stdout != nil)
	}
	msg, oob := make([]byte, 64), make([]byte, syscall.CmsgSpace(2*4))
	_, oobn, _, _, err := syscall.Recvmsg(int(theirs.Fd()), msg, oob, 0)
	if err != nil {
		t.Fatal(err)
	}
	cmsgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(cmsgs) != 1 {
		t.Fatalf("control messages %v (%v), want the log files", cmsgs, err)
	}
	fds, err := syscall.ParseUnixRights(&cmsgs[0])
	if err != nil || len(fds) != 2 {
		t.Fatalf("file descriptors %v (%v), want stdout and stderr", fds, err)
	}
	for _, fd := range fds {
		syscall.Close(fd)
	}
	select {
	case <-l.registered:
		t.Fatal("registered before the process said so")
	default:
	}
	// The process says it registered.
	if _, err := theirs.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	<-l.registered
}

func TestAHandoverToAProcessThatIsGoneStartsOne(t *testing.T) {
	p, sb, _ := standbyForTest(t, false)
	l := claimedLaunch()
	l.claimed = &claimStep{standby: sb, prestart: p}
	l.dir, l.argv, l.environ = t.TempDir(), []string{"true"}, os.Environ()
	logFiles(t, l)
	if err := (handoverStep{}).Run(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	if l.cmd == nil || l.cmd == sb.cmd || sb.cmd.ProcessState == nil {
		t.Fatalf("process %v, the claimed one reaped %v: want a process of its own started and the claimed one ended", l.cmd, sb.cmd.ProcessState != nil)
	}
	if err := l.cmd.Wait(); err != nil {
		t.Errorf("the started process: %v", err)
	}
}
