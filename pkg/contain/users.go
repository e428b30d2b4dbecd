package contain

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// UIDRange is the user ids a worker running as root gives the processes it
// launches (its --executor-users): each application's executors, and each
// cluster-mode driver, run as a uid of their own from it, whose group id is
// the same number, with no supplementary groups. The uids need no entry in
// /etc/passwd, and must belong to nobody else on the machine: a worker kills
// whatever runs as a uid of its range, and no other worker's, when it
// starts, and as a uid it frees.
// The zero range is none: processes run as the worker's user.
type UIDRange struct {
	First, Last uint32
}

// DefaultUIDRange is 65,536 uids from 1879048192, in the range systemd
// assigns to nothing (its 1879048192–2147483647).
var DefaultUIDRange = UIDRange{First: 1879048192, Last: 1879048192 + 65535}

// ParseUIDRange parses "FIRST-LAST" (inclusive, FIRST at least 1000, LAST
// below 2^31, so no system user and no id that tools read as negative) or
// "off", the zero range.
func ParseUIDRange(s string) (UIDRange, error) {
	if s == "off" {
		return UIDRange{}, nil
	}
	first, last, ok := strings.Cut(s, "-")
	f, ferr := strconv.ParseUint(first, 10, 31)
	l, lerr := strconv.ParseUint(last, 10, 31)
	if !ok || ferr != nil || lerr != nil || f < 1000 || l < f {
		return UIDRange{}, fmt.Errorf("uid range %q: want FIRST-LAST, 1000 <= FIRST <= LAST < 2147483648, or off", s)
	}
	return UIDRange{First: uint32(f), Last: uint32(l)}, nil
}

// String is "FIRST-LAST", or "off".
func (r UIDRange) String() string {
	if r == (UIDRange{}) {
		return "off"
	}
	return fmt.Sprintf("%d-%d", r.First, r.Last)
}

func (r UIDRange) contains(uid uint32) bool {
	return r != (UIDRange{}) && uid >= r.First && uid <= r.Last
}

// UIDLockFile is where the workers of a machine lock the uids they give
// out (one byte of it per uid, an open file description's lock, which the
// kernel drops when the worker dies), so that two workers whose ranges
// overlap never give one uid to two owners, nor kill each other's processes.
const UIDLockFile = "/run/glint/executor-uids.lock"

// Users hands out the uids of a UIDRange: one to each owner (an application
// id, a driver id) for as long as it has processes on the worker. It gives
// them in turn from a random start, so a uid comes back only after every
// other of the range served: what an owner left where every user may write
// (/tmp, /dev/shm) is not its next owner's soon.
type Users struct {
	r    UIDRange
	lock *os.File // UIDLockFile, or the file NewUsers was given
	mu   sync.Mutex
	next uint32
	// owners are the owners holding a uid, with how many processes of
	// theirs run; taken are the uids held.
	owners map[string]*holder
	taken  map[uint32]bool
}

type holder struct {
	uid  uint32
	runs int
}

// NewUsers hands out r's uids, locked in lockFile (UIDLockFile), after
// killing every process that still runs as one of them and is no other
// worker's (what a worker killed by SIGKILL left).
func NewUsers(r UIDRange, lockFile string) (*Users, error) {
	if err := os.MkdirAll(filepath.Dir(lockFile), 0o755); err != nil {
		return nil, fmt.Errorf("the uids' lock file: %w", err)
	}
	lock, err := os.OpenFile(lockFile, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("the uids' lock file: %w", err)
	}
	u := &Users{r: r, lock: lock, next: r.First + rand.Uint32N(r.Last-r.First+1), owners: map[string]*holder{}, taken: map[uint32]bool{}}
	if err := u.killLeft(); err != nil {
		lock.Close()
		return nil, err
	}
	return u, nil
}

// killLeft kills what runs as a uid of the range that no worker holds.
func (u *Users) killLeft() error {
	procs, err := procsOf(u.r.contains)
	if err != nil {
		return err
	}
	seen := map[uint32]bool{}
	for _, p := range procs {
		if seen[p.uid] {
			continue
		}
		seen[p.uid] = true
		switch held, err := u.tryLock(p.uid); {
		case err != nil:
			return err
		case !held:
			continue // another worker's
		}
		err := killUIDs(func(uid uint32) bool { return uid == p.uid })
		if uerr := u.unlock(p.uid); err == nil {
			err = uerr
		}
		if err != nil {
			return fmt.Errorf("uid %d: %w", p.uid, err)
		}
	}
	return nil
}

// tryLock locks uid's byte of the lock file, if no other worker holds it.
func (u *Users) tryLock(uid uint32) (bool, error) {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: int64(uid), Len: 1}
	switch err := unix.FcntlFlock(u.lock.Fd(), unix.F_OFD_SETLK, &lk); {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EACCES):
		return false, nil
	default:
		return false, fmt.Errorf("lock uid %d: %w", uid, err)
	}
}

func (u *Users) unlock(uid uint32) error {
	lk := unix.Flock_t{Type: unix.F_UNLCK, Whence: 0, Start: int64(uid), Len: 1}
	if err := unix.FcntlFlock(u.lock.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		return fmt.Errorf("unlock uid %d: %w", uid, err)
	}
	return nil
}

// Close frees every uid u holds, for other workers.
func (u *Users) Close() error { return u.lock.Close() }

// Acquire is owner's uid: the one its processes running already have, else
// the next free one, which no other worker holds. Each Acquire is matched
// by a Release.
func (u *Users) Acquire(owner string) (uint32, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if h := u.owners[owner]; h != nil {
		h.runs++
		return h.uid, nil
	}
	size := uint64(u.r.Last-u.r.First) + 1
	for range size {
		uid := u.next
		u.next++
		if u.next > u.r.Last || u.next < u.r.First {
			u.next = u.r.First
		}
		if u.taken[uid] {
			continue
		}
		switch held, err := u.tryLock(uid); {
		case err != nil:
			return 0, err
		case held:
			u.taken[uid] = true
			u.owners[owner] = &holder{uid: uid, runs: 1}
			return uid, nil
		}
	}
	return 0, fmt.Errorf("every uid of --executor-users %s is in use", u.r)
}

// Release ends one of owner's processes. Its last one frees the uid, once
// nothing runs as it any more: whatever a process of it left running (a
// daemon that left its process group) is killed first.
func (u *Users) Release(owner string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	h := u.owners[owner]
	if h == nil {
		return nil
	}
	if h.runs--; h.runs > 0 {
		return nil
	}
	delete(u.owners, owner)
	if err := killUIDs(func(uid uint32) bool { return uid == h.uid }); err != nil {
		return fmt.Errorf("uid %d kept: %w", h.uid, err)
	}
	if err := u.unlock(h.uid); err != nil {
		return err
	}
	delete(u.taken, h.uid)
	return nil
}

// killWait bounds how long killUIDs waits for what it killed to end (a
// process may fork while it is being killed, and a large one takes a while
// to free its memory).
const killWait = 10 * time.Second

// killUIDs sends SIGKILL to every process whose real or effective uid is
// one of which, until none is left but zombies, which hold nothing.
func killUIDs(which func(uint32) bool) error {
	deadline := time.Now().Add(killWait)
	for pause := 100 * time.Microsecond; ; pause = min(2*pause, 50*time.Millisecond) {
		procs, err := procsOf(which)
		if err != nil || len(procs) == 0 {
			return err
		}
		for _, p := range procs {
			p.kill(which)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d processes still running %v after being killed", len(procs), killWait)
		}
		time.Sleep(pause)
	}
}

// proc is a process running as uid (its real or effective uid).
type proc struct {
	pid int
	uid uint32
}

// kill sends p SIGKILL through a pidfd, once the pidfd is known to be of a
// process that runs as one of which: a pid read from /proc may be another
// process's by the time it is signalled.
func (p proc) kill(which func(uint32) bool) {
	fd, err := unix.PidfdOpen(p.pid, 0)
	if err != nil {
		return // gone
	}
	defer unix.Close(fd)
	if q, ok := readProc(p.pid, which); ok && q.uid == p.uid {
		_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
	}
}

// procsOf lists the processes, zombies aside, whose real or effective uid is
// one of which, from /proc. A process that ends while it is read is not one.
func procsOf(which func(uint32) bool) ([]proc, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var procs []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProc(pid, which); ok {
			procs = append(procs, p)
		}
	}
	return procs, nil
}

// readProc is process pid, if it runs, not a zombie, as one of which.
func readProc(pid int, which func(uint32) bool) (proc, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return proc{}, false
	}
	real, effective, zombie, ok := parseStatus(string(b))
	switch {
	case !ok || zombie:
		return proc{}, false
	case which(real):
		return proc{pid: pid, uid: real}, true
	case which(effective):
		return proc{pid: pid, uid: effective}, true
	}
	return proc{}, false
}

// parseStatus reads the real and effective uid from a /proc/PID/status,
// and whether the process is a zombie.
func parseStatus(status string) (real, effective uint32, zombie, ok bool) {
	for line := range strings.Lines(status) {
		if state, found := strings.CutPrefix(line, "State:"); found {
			zombie = strings.HasPrefix(strings.TrimSpace(state), "Z")
			continue
		}
		rest, found := strings.CutPrefix(line, "Uid:")
		if !found {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 2 {
			return 0, 0, false, false
		}
		r, rerr := strconv.ParseUint(f[0], 10, 32)
		e, eerr := strconv.ParseUint(f[1], 10, 32)
		return uint32(r), uint32(e), zombie, rerr == nil && eerr == nil
	}
	return 0, 0, false, false
}

// Execute (search, for a directory) and Read are what OthersCan checks a
// user may do.
const (
	Execute fs.FileMode = 0o001
	Read    fs.FileMode = 0o004
)

// OthersCan says whether a user who owns none of path's way, and is in none
// of its groups — a uid of a UIDRange — can reach path (every directory on
// its way, symbolic links followed, searchable by others) and do perm to it
// (perm of its "others" bits). The error names the first thing in the way
// and its mode. ACLs are not read.
func OthersCan(path string, perm fs.FileMode) error {
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	resolved, err = filepath.Abs(resolved)
	if err != nil {
		return err
	}
	for dir := filepath.Dir(resolved); ; dir = filepath.Dir(dir) {
		if err := othersHave(dir, Execute, "search"); err != nil {
			return err
		}
		if dir == filepath.Dir(dir) {
			break
		}
	}
	what := "read"
	if perm&Execute != 0 {
		what = "execute"
	}
	return othersHave(resolved, perm, what)
}

// othersHave checks that others have perm on name.
func othersHave(name string, perm fs.FileMode, what string) error {
	fi, err := os.Stat(name)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&perm != perm {
		return fmt.Errorf("%s is %s, owned by uid %d: others cannot %s it", name, fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid, what)
	}
	return nil
}

// OthersCannotRead checks that a user as OthersCan's cannot read path: its
// error says how they can.
func OthersCannotRead(path string) error {
	if err := OthersCan(path, Read); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	return fmt.Errorf("%s is readable by every user: chmod o-r it (or a directory on its way o-x)", path)
}
