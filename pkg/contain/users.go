package contain

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// UIDRange is the user ids a worker running as root gives the processes it
// launches (its --executor-users): each application's executors, and each
// cluster-mode driver, run as a uid of their own from it, whose group id is
// the same number, with no supplementary groups. The uids need no entry in
// /etc/passwd, and must belong to nobody else on the machine: a worker kills
// whatever runs as a uid of its range when it starts, and when it frees one.
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

// Users hands out the uids of a UIDRange: one to each owner (an application
// id, a driver id) for as long as it has processes on the worker.
type Users struct {
	r    UIDRange
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

// NewUsers hands out r's uids, after killing every process that still runs
// as one of them (what a worker killed by SIGKILL left).
func NewUsers(r UIDRange) (*Users, error) {
	if err := killUIDs(r.contains); err != nil {
		return nil, err
	}
	return &Users{r: r, next: r.First, owners: map[string]*holder{}, taken: map[uint32]bool{}}, nil
}

// Range is the uids u hands out.
func (u *Users) Range() UIDRange { return u.r }

// Acquire is owner's uid: the one its processes running already have, else
// a free one. Each Acquire is matched by a Release.
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
		if !u.taken[uid] {
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
	delete(u.taken, h.uid)
	return nil
}

// killAttempts bounds how many times killUIDs scans for processes: a
// process may fork while it is being killed.
const killAttempts = 10

// killUIDs sends SIGKILL to every process whose real or effective uid is
// one of which, until none is left.
func killUIDs(which func(uint32) bool) error {
	for range killAttempts {
		pids, err := pidsOf(which)
		if err != nil || len(pids) == 0 {
			return err
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return errors.New("processes still running after being killed")
}

// pidsOf lists the running processes whose real or effective uid is one of
// which, from /proc. A process that ends while it is read is not one.
func pidsOf(which func(uint32) bool) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		if real, effective, ok := statusUIDs(string(b)); ok && (which(real) || which(effective)) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// statusUIDs reads the real and effective uid from a /proc/PID/status.
func statusUIDs(status string) (real, effective uint32, ok bool) {
	for line := range strings.Lines(status) {
		rest, found := strings.CutPrefix(line, "Uid:")
		if !found {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 2 {
			return 0, 0, false
		}
		r, rerr := strconv.ParseUint(f[0], 10, 32)
		e, eerr := strconv.ParseUint(f[1], 10, 32)
		return uint32(r), uint32(e), rerr == nil && eerr == nil
	}
	return 0, 0, false
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
