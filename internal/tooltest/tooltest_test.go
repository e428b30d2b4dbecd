package tooltest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func TestPollSaysWhetherTheConditionHeldInTime(t *testing.T) {
	calls := 0
	if !Poll(time.Minute, time.Millisecond, func() bool { calls++; return calls == 3 }) || calls != 3 {
		t.Errorf("a condition that holds at the third look: %d looks", calls)
	}
	start := time.Now()
	if Poll(20*time.Millisecond, time.Millisecond, func() bool { return false }) {
		t.Error("a condition that never holds held")
	}
	if took := time.Since(start); took < 20*time.Millisecond {
		t.Errorf("gave up after %v, before its limit", took)
	}
}

// A command name holding ") Z " does not make a sleeping process a zombie:
// the state follows the name's last ')'. A child that exited is a zombie
// until it is reaped, and then it is gone.
func TestProcStateReadsTheStateAfterTheCommandName(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatalf("a sleep to run: %v", err)
	}
	odd := filepath.Join(t.TempDir(), "a) Z (b")
	if err := os.Symlink(sleep, odd); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(odd, "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	Eventually(t, "the child to sleep", func() bool { state, err := ProcState(pid); return err == nil && state == 'S' })
	if !Alive(pid) {
		t.Errorf("the sleeping child %d is not alive", pid)
	}
	if fields, err := ProcStat(pid); err != nil || len(fields) < 15 || fields[1] != strconv.Itoa(os.Getpid()) {
		t.Errorf("ProcStat(%d) = %q, %v; want the parent %d second of at least 15 fields", pid, fields, err, os.Getpid())
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	Eventually(t, "the killed child to be a zombie", func() bool { state, err := ProcState(pid); return err == nil && state == 'Z' })
	if Alive(pid) {
		t.Errorf("the zombie %d is alive", pid)
	}
	_ = cmd.Wait()
	if state, err := ProcState(pid); err == nil {
		t.Errorf("the reaped child %d has state %c", pid, state)
	}
	if Alive(pid) {
		t.Errorf("the reaped child %d is alive", pid)
	}
}

func TestProcStatusKiBReadsASizeField(t *testing.T) {
	if rss := ProcStatusKiB(t, os.Getpid(), "VmRSS"); rss <= 0 {
		t.Errorf("the test's VmRSS is %d KiB", rss)
	}
	if rss, hwm := ProcStatusKiB(t, os.Getpid(), "VmRSS"), ProcStatusKiB(t, os.Getpid(), "VmHWM"); hwm < rss {
		t.Errorf("the test's VmHWM %d KiB is below its VmRSS %d KiB", hwm, rss)
	}
}

func TestReadYAMLDecodesAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.yaml")
	if err := os.WriteFile(path, []byte("groups:\n  - name: a\n    rules: [{record: r, expr: up}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string
			Rules []struct{ Record, Expr string }
		}
	}
	ReadYAML(t, path, &f)
	if len(f.Groups) != 1 || f.Groups[0].Name != "a" || len(f.Groups[0].Rules) != 1 || f.Groups[0].Rules[0].Expr != "up" {
		t.Errorf("read %+v", f)
	}
}
