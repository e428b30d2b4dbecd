package contain

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseUIDRange(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want UIDRange
		err  bool
	}{
		{in: "off"},
		{in: "1000-1000", want: UIDRange{1000, 1000}},
		{in: DefaultUIDRange.String(), want: DefaultUIDRange},
		{in: "999-2000", err: true},
		{in: "2000-1000", err: true},
		{in: "1000-2147483648", err: true},
		{in: "1000", err: true},
		{in: "a-b", err: true},
		{in: "", err: true},
	} {
		got, err := ParseUIDRange(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseUIDRange(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
	if s := (UIDRange{}).String(); s != "off" {
		t.Errorf("the zero range prints %q, want off", s)
	}
}

// testRange is a range of n uids for one test, apart from other tests'.
func testRange(n uint32) UIDRange {
	first := DefaultUIDRange.Last + 20_000_000 + uint32(os.Getpid()%100_000)*16
	return UIDRange{First: first, Last: first + n - 1}
}

// An owner keeps its uid while it has processes, two owners never share
// one, a full range refuses a third, and a freed uid is given again.
func TestUsersGiveEachOwnerAUidOfItsOwnUntilItsLastRelease(t *testing.T) {
	r := testRange(2)
	u := newUsers(t, r, testLockFile(t))
	a1, _ := u.Acquire("app-a")
	a2, _ := u.Acquire("app-a")
	b, _ := u.Acquire("app-b")
	if a1 != a2 || a1 == b || a1 < r.First || a1 > r.Last || b < r.First || b > r.Last {
		t.Fatalf("app-a got %d and %d, app-b %d; want app-a one uid of %s, app-b another", a1, a2, b, r)
	}
	if uid, err := u.Acquire("app-c"); err == nil || !strings.Contains(err.Error(), "every uid of --executor-users") {
		t.Fatalf("a third owner of a 2-uid range got %d, %v; want refused", uid, err)
	}
	if err := u.Release("app-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := u.Acquire("app-c"); err == nil {
		t.Fatal("app-a's uid was freed while one of its processes runs")
	}
	if err := u.Release("app-a"); err != nil {
		t.Fatal(err)
	}
	if c, err := u.Acquire("app-c"); err != nil || c != a1 {
		t.Errorf("app-c got %d, %v; want app-a's freed %d", c, err, a1)
	}
}

// started is a process startAs started.
type started struct{ done chan struct{} }

// ended says whether the process ended.
func (s started) ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// waitEnd waits up to 10 s for the process to end, and says whether it did.
func (s started) waitEnd() bool {
	select {
	case <-s.done:
		return true
	case <-time.After(10 * time.Second):
		return false
	}
}

// startAs starts a sleeping process as uid.
func startAs(t *testing.T, uid uint32) started {
	t.Helper()
	needRoot(t)
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := started{done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-s.done
	})
	return s
}

// What runs as a uid of the range when the users are made (a worker
// killed by SIGKILL left it), or as an owner's uid after its last release
// (a daemon that left its process group), is killed.
func TestUsersKillWhatRunsAsTheirUids(t *testing.T) {
	r := testRange(1)
	left := startAs(t, r.First)
	u := newUsers(t, r, testLockFile(t))
	if !left.waitEnd() {
		t.Fatalf("a process left running as uid %d was not killed by NewUsers", r.First)
	}
	uid, _ := u.Acquire("app")
	daemon := startAs(t, uid)
	if err := u.Release("app"); err != nil {
		t.Fatal(err)
	}
	if !daemon.waitEnd() {
		t.Fatalf("a process running as the freed uid %d was not killed", uid)
	}
}

func TestParseStatus(t *testing.T) {
	real, effective, zombie, ok := parseStatus("Name:\tx\nState:\tS (sleeping)\nUid:\t1000\t0\t0\t0\nGid:\t1\t1\t1\t1\n")
	if !ok || real != 1000 || effective != 0 || zombie {
		t.Errorf("got %d, %d, zombie %v, %v; want 1000, 0, false, true", real, effective, zombie, ok)
	}
	if _, _, zombie, ok := parseStatus("Name:\tx\nState:\tZ (zombie)\nUid:\t1000\t1000\t1000\t1000\n"); !ok || !zombie {
		t.Errorf("a zombie's status read as zombie %v, %v", zombie, ok)
	}
	if _, _, _, ok := parseStatus("Name:\tx\n"); ok {
		t.Error("a status without a Uid line read")
	}
}

// needRoot skips a test that starts processes as other users unless it
// runs as root, as make test does in CI.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("only root starts processes as other users: make test runs as root in CI")
	}
}

// newUsers is NewUsers(r, lockFile), closed when the test ends.
func newUsers(t *testing.T, r UIDRange, lockFile string) *Users {
	t.Helper()
	u, err := NewUsers(r, lockFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = u.Close() })
	return u
}

// testLockFile is a uids' lock file of the test's own.
func testLockFile(t *testing.T) string { return filepath.Join(t.TempDir(), "uids.lock") }

// Two workers whose ranges overlap, locking in one file, never give one uid
// to two owners, and one starting does not kill what runs as the other's
// uids; once the other is gone (its lock file closed, as when it died), what
// it left is killed.
func TestUsersOfTwoWorkersShareNoUidAndKillOnlyWhatNoWorkerHolds(t *testing.T) {
	r, lock := testRange(2), testLockFile(t)
	first := newUsers(t, r, lock)
	a, err := first.Acquire("app-a")
	if err != nil {
		t.Fatal(err)
	}
	running := startAs(t, a)
	second := newUsers(t, r, lock)
	b, err := second.Acquire("app-b")
	if err != nil || b == a {
		t.Fatalf("the second worker gave app-b %d, %v; the first gave app-a %d", b, err, a)
	}
	if uid, err := second.Acquire("app-c"); err == nil {
		t.Fatalf("the second worker gave app-c %d, the first's app-a's or its own app-b's", uid)
	}
	if running.ended() {
		t.Fatal("the second worker killed what runs as the first's uid")
	}
	first.Close()
	newUsers(t, r, lock)
	if !running.waitEnd() {
		t.Fatalf("a process left running as uid %d by a worker gone was not killed", a)
	}
}

// A process of a uid that ended but is not reaped yet (a zombie) holds
// nothing: it does not keep its uid.
func TestAZombieDoesNotKeepItsUid(t *testing.T) {
	needRoot(t)
	r := testRange(1)
	cmd := exec.Command("true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: r.First, Gid: r.First, Groups: []uint32{}}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	var si unix.Siginfo
	if err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &si, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := NewUsers(r, testLockFile(t)); err != nil {
		t.Fatalf("with a zombie of uid %d: %v", r.First, err)
	}
}

// A worker gives its uids from a start of its own each time it starts: a
// restarted worker does not give its first owner the uid its last first
// owner had.
func TestUsersStartWhereTheyWill(t *testing.T) {
	r, lock := testRange(1000), testLockFile(t)
	firsts := map[uint32]bool{}
	for range 20 {
		u := newUsers(t, r, lock)
		uid, err := u.Acquire("app")
		if err != nil {
			t.Fatal(err)
		}
		firsts[uid] = true
		u.Close()
	}
	if len(firsts) == 1 {
		t.Errorf("20 workers' first owners all got uid %v", firsts)
	}
}

// OthersCan follows the path's way: a directory others cannot search
// hides everything in it, whatever its files' modes; OthersCannotRead says
// how a file is exposed.
func TestOthersCanSeesTheWholeWayToAFile(t *testing.T) {
	// Not t.TempDir, in a directory of the test's that others cannot search.
	dir, err := os.MkdirTemp("", "glint-contain-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	open, closed := filepath.Join(dir, "open"), filepath.Join(dir, "closed")
	for _, d := range []string{open, closed} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(open, "bin"), filepath.Join(closed, "bin")} {
		if err := os.WriteFile(f, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(open, "secret")
	if err := os.WriteFile(secret, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(open, "link")
	if err := os.Symlink(filepath.Join(closed, "bin"), link); err != nil {
		t.Fatal(err)
	}
	if err := OthersCan(filepath.Join(open, "bin"), Execute); err != nil {
		t.Errorf("open/bin: %v, want executable by others", err)
	}
	for _, p := range []string{filepath.Join(closed, "bin"), link} {
		err := OthersCan(p, Execute)
		if err == nil || !strings.Contains(err.Error(), closed+" is drwx------, owned by uid") || !strings.Contains(err.Error(), "others cannot search it") {
			t.Errorf("%s: %v, want %s named as what is in the way", p, err, closed)
		}
	}
	if err := OthersCan(secret, Read); err == nil || !strings.Contains(err.Error(), "others cannot read it") {
		t.Errorf("a 0600 file: %v, want unreadable", err)
	}
	if err := OthersCannotRead(secret); err != nil {
		t.Errorf("OthersCannotRead(a 0600 file): %v", err)
	}
	if err := os.Chmod(secret, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := OthersCannotRead(secret); err == nil || !strings.Contains(err.Error(), "is readable by every user: chmod o-r it") {
		t.Errorf("OthersCannotRead(a 0644 file) = %v, want it said readable", err)
	}
}

// A uid one worker freed is another's to give; one it holds is not.
func TestAUidOneWorkerFreedIsAnothersToGive(t *testing.T) {
	r, lock := testRange(1), testLockFile(t)
	first := newUsers(t, r, lock)
	second := newUsers(t, r, lock)
	if _, err := first.Acquire("app-a"); err != nil {
		t.Fatal(err)
	}
	if uid, err := second.Acquire("app-b"); err == nil {
		t.Fatalf("the second worker gave app-b uid %d, which the first holds", uid)
	}
	if err := first.Release("app-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := second.Acquire("app-b"); err != nil {
		t.Errorf("the uid the first worker freed: %v", err)
	}
}
