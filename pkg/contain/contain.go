// Package contain confines process trees to Linux cgroups, v1 or v2, through
// github.com/containerd/cgroups/v3: a worker opens a parent cgroup of its own
// (Open) and makes one group per executor or driver under it (Parent.New),
// with a memory limit, a CPU quota or weight and a pids limit; a process is
// placed in its group before it executes anything of its own (Group.Start),
// and a group is removed with whatever still runs in it (Group.Remove).
package contain

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrUnavailable is why Open found no cgroup hierarchy it can use: none is
// mounted, a controller it needs (cpu, memory, pids) is missing, or the
// hierarchy is not writable (no privileges, a container without
// delegation).
var ErrUnavailable = errors.New("no writable cgroup hierarchy")

// CPULimit is how a group's cores are enforced.
type CPULimit string

// The CPU limits (the worker's --cpu-limit).
const (
	// CPUHard caps the group at its cores: a CFS quota of cores × period
	// (cpu.max on v2, cpu.cfs_quota_us on v1), however idle the machine.
	CPUHard CPULimit = "hard"
	// CPUShares weighs the group by its cores (cpu.weight, cpu.shares 1024
	// a core): it may use idle cores, and gets its share under contention.
	CPUShares CPULimit = "shares"
	// CPUOff sets no CPU limit.
	CPUOff CPULimit = "off"
)

// ParseCPULimit parses "hard", "shares" or "off".
func ParseCPULimit(s string) (CPULimit, error) {
	switch l := CPULimit(s); l {
	case CPUHard, CPUShares, CPUOff:
		return l, nil
	}
	return "", fmt.Errorf("cpu limit %q: want hard, shares or off", s)
}

// cpuPeriod is the CFS period of a hard CPU limit, the kernel's default.
const cpuPeriod = 100_000 // µs

// Memory overhead: a group may use its granted memory plus
// max(minOverhead, overheadFraction of it), as Spark adds
// spark.executor.memoryOverhead (max(384 MiB, 10%), sized for a JVM's
// off-heap) to a container's request. A Go executor's heap is the grant;
// the overhead covers its runtime, stacks and the page cache of its logs.
const (
	minOverhead      = 64 << 20
	overheadFraction = 10 // percent
)

// MemoryLimit is the memory limit of a group granted grantedMiB: the grant
// plus max(64 MiB, 10% of it), in bytes.
func MemoryLimit(grantedMiB int64) int64 {
	granted := grantedMiB << 20
	return granted + max(minOverhead, granted*overheadFraction/100)
}

// DefaultPids is the default pids limit of a group: the processes and
// threads it may hold at once (systemd's default TasksMax is of the same
// order), enough for any executor, few enough that a fork bomb stops there.
const DefaultPids = 4096

// Limits are what one group's processes may use.
type Limits struct {
	// Cores is the group's CPU, enforced as Options.CPU says; 0: none.
	Cores int32
	// MemoryBytes is its memory limit (MemoryLimit), swap excluded: a tree
	// over it has a process OOM-killed; 0: none.
	MemoryBytes int64
	// Pids bounds its processes and threads; 0: none.
	Pids int64
}

// Options say where and how groups are made.
type Options struct {
	// Root is where the hierarchy is mounted, default /sys/fs/cgroup.
	Root string
	// Version is 1 or 2; default: what is mounted at Root (mounted).
	Version int
	// CPU is how cores are enforced, default CPUHard.
	CPU CPULimit
	// Cores is the CPU of the parent as a whole: its weight is that of as
	// many busy processes (cpu.shares 1024 a core; v2 the cpu.weight the
	// kernel matches to it), so that under contention its groups together
	// get what that many processes in the parent's parent would, not the
	// one process's share a cgroup has by default. 0: that default.
	Cores int32
}

// defaultRoot is where cgroup hierarchies are mounted.
const defaultRoot = "/sys/fs/cgroup"

// Parent is a worker's own cgroup, under which its groups are made. It holds
// no process: the worker itself stays where it was started.
type Parent struct {
	h    hierarchy
	path string
	cpu  CPULimit
}

// Open makes the cgroup name (a path relative to the hierarchy's root, such
// as "glint-worker-1a2b") for a worker's groups. What a previous run of the
// same worker left there (it was SIGKILLed, or its machine lost power) is
// removed first: every group in it, and every process still in those.
// Errors wrapping ErrUnavailable say that the worker cannot contain its
// processes here.
func Open(name string, o Options) (*Parent, error) {
	if o.Root == "" {
		o.Root = defaultRoot
	}
	if o.CPU == "" {
		o.CPU = CPUHard
	}
	name = path.Clean("/" + name)
	if name == "/" {
		return nil, fmt.Errorf("open cgroup %q: the root is not a worker's", name)
	}
	h, err := open(o)
	if err != nil {
		return nil, fmt.Errorf("open cgroup %s: %w", name, err)
	}
	p := &Parent{h: h, path: name, cpu: o.CPU}
	if err := p.removeGroups(); err != nil {
		return nil, fmt.Errorf("open cgroup %s: remove what a previous run left: %w", name, err)
	}
	if err := h.makeParent(name, o.Cores); err != nil {
		if errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EROFS) {
			err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return nil, fmt.Errorf("open cgroup %s: %w", name, err)
	}
	return p, nil
}

// open picks the hierarchy o names, or the one mounted.
func open(o Options) (hierarchy, error) {
	version := o.Version
	if version == 0 {
		var err error
		if version, err = mounted(o.Root); err != nil {
			return nil, err
		}
	}
	switch version {
	case 1:
		return openV1(o.Root)
	case 2:
		return openV2(o.Root)
	}
	return nil, fmt.Errorf("cgroup version %d at %s: want 1 or 2", version, o.Root)
}

// mounted is the version of the hierarchy at root: 2 when root is a cgroup2
// mount, 1 when root/memory is a v1 one (a hybrid mount too: its
// controllers are on v1).
func mounted(root string) (int, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if st.Type == unix.CGROUP2_SUPER_MAGIC {
		return 2, nil
	}
	if err := unix.Statfs(filepath.Join(root, "memory"), &st); err == nil && st.Type == unix.CGROUP_SUPER_MAGIC {
		return 1, nil
	}
	return 0, fmt.Errorf("%w: none mounted at %s", ErrUnavailable, root)
}

// Version is the cgroup version in use, 1 or 2.
func (p *Parent) Version() int { return p.h.version() }

// Path is the parent's path from the hierarchy's root.
func (p *Parent) Path() string { return p.path }

// New makes the group name under p with limits l. name is one path element;
// a group of that name left over is removed first.
func (p *Parent) New(name string, l Limits) (*Group, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	g := &Group{h: p.h, path: path.Join(p.path, name), cpu: p.cpu}
	if err := g.Remove(); err != nil {
		return nil, fmt.Errorf("new cgroup %s: %w", g.path, err)
	}
	if c := p.h.ahead(p.path, g.path, l, p.cpu); c != nil {
		g.c = c
		return g, nil
	}
	c, err := p.h.create(g.path, l, p.cpu)
	if err != nil {
		return nil, fmt.Errorf("new cgroup %s: %w", g.path, err)
	}
	g.c = c
	return g, nil
}

// checkName checks that name is one path element.
func checkName(name string) error {
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return fmt.Errorf("cgroup %q: not a name", name)
	}
	return nil
}

// Close removes every group under p, with the processes still in them, and
// p itself. The directories above p, which other workers may share, stay.
func (p *Parent) Close() error {
	if err := p.removeGroups(); err != nil {
		return fmt.Errorf("close cgroup %s: %w", p.path, err)
	}
	if err := p.h.remove(p.path); err != nil {
		return fmt.Errorf("close cgroup %s: %w", p.path, err)
	}
	return nil
}

// removeGroups removes every group under p.
func (p *Parent) removeGroups() error {
	names, err := p.h.children(p.path)
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range names {
		g := &Group{h: p.h, path: path.Join(p.path, n)}
		errs = append(errs, g.Remove())
	}
	return errors.Join(errs...)
}

// Group is the cgroup of one process tree.
type Group struct {
	h    hierarchy
	path string
	cpu  CPULimit
	// mu guards c, which Stat may read while Remove ends it.
	mu sync.Mutex
	c  group // nil once removed, or for a group only being removed
}

// Path is the group's path from the hierarchy's root.
func (g *Group) Path() string { return g.path }

// Start starts cmd inside g by calling start (which calls cmd.Start, or
// wraps it): on v2 the kernel forks the process straight into the group
// (clone3's CLONE_INTO_CGROUP, through SysProcAttr.CgroupFD; Linux 5.7);
// on v1 it forks from a thread that has moved into the group first. Either
// way the process runs nothing before it is in the group.
func (g *Group) Start(cmd *exec.Cmd, start func() error) error {
	if err := g.c.start(cmd, start); err != nil {
		return fmt.Errorf("start in cgroup %s: %w", g.path, err)
	}
	return nil
}

// Become makes g, made ahead for a process that runs in it already (a
// prestarted executor), the group of that process's launch: renamed name
// (on v1; a v2 group keeps its name) and limited to l, with no process
// moved — a move waits on the kernel (Start). A group left of that name is
// removed first.
func (g *Group) Become(name string, l Limits) error {
	if err := checkName(name); err != nil {
		return err
	}
	if to := path.Join(path.Dir(g.path), name); to != g.path {
		old := &Group{h: g.h, path: to}
		if err := old.Remove(); err != nil {
			return fmt.Errorf("cgroup %s becomes %s: %w", g.path, to, err)
		}
		switch c, err := g.h.rename(g.path, to); {
		case errors.Is(err, errNoRename):
		case err != nil:
			return fmt.Errorf("cgroup %s becomes %s: %w", g.path, to, err)
		default:
			g.c, g.path = c, to
		}
	}
	if err := g.c.limit(l, g.cpu); err != nil {
		return fmt.Errorf("limit cgroup %s: %w", g.path, err)
	}
	return nil
}

// Add moves the running process pid, every thread of it, into g; the
// memory it holds stays charged where it was.
func (g *Group) Add(pid int) error {
	if err := g.c.add(pid); err != nil {
		return fmt.Errorf("add process %d to cgroup %s: %w", pid, g.path, err)
	}
	return nil
}

// Stat is what a group's processes used since it was made.
type Stat struct {
	CPUSeconds  float64
	MemoryBytes int64 // now, page cache included
	PeakBytes   int64 // the highest MemoryBytes (v2: Linux 5.19)
	// OOMKills counts the processes the kernel killed for the group's
	// memory limit.
	OOMKills int64
}

// Stat reads what g's processes used.
func (g *Group) Stat() (Stat, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.c == nil {
		return Stat{}, fmt.Errorf("stat cgroup %s: %w", g.path, os.ErrNotExist)
	}
	st, err := g.c.stat()
	if err != nil {
		return Stat{}, fmt.Errorf("stat cgroup %s: %w", g.path, err)
	}
	return st, nil
}

// removeWait bounds how long Remove waits for killed processes to leave.
const removeWait = 10 * time.Second

// Remove kills every process still in g (SIGKILL, again until none is left)
// and removes it; a group that is gone already is not an error. This
// process is never killed: on v1 its launching thread may wait in g (a
// group made ahead, or one whose start never came), and Remove first moves
// it out (evict). That waits on the thread, a tenth of a millisecond and
// more (BenchmarkStart), and is done only for a group that is there: the
// one Parent.New removes is most often not.
func (g *Group) Remove() error {
	if _, err := g.h.procs(g.path); errors.Is(err, os.ErrNotExist) {
		g.removed()
		return nil
	}
	g.h.evict(g.path)
	deadline := time.Now().Add(removeWait)
	self := os.Getpid()
	for {
		pids, err := g.h.procs(g.path)
		if errors.Is(err, os.ErrNotExist) {
			g.removed()
			return nil
		}
		if err != nil {
			return fmt.Errorf("remove cgroup %s: %w", g.path, err)
		}
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: processes %v still in it after SIGKILL", g.path, pids)
		}
		for _, pid := range pids {
			if pid == self {
				continue
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("remove cgroup %s: kill %d: %w", g.path, pid, err)
			}
		}
		time.Sleep(time.Millisecond)
	}
	if err := g.h.remove(g.path); err != nil {
		return fmt.Errorf("remove cgroup %s: %w", g.path, err)
	}
	g.removed()
	return nil
}

func (g *Group) removed() {
	g.mu.Lock()
	g.c = nil
	g.mu.Unlock()
}

// hierarchy is one cgroup version's way of doing what Parent and Group do.
// Paths are from the hierarchy's root.
type hierarchy interface {
	version() int
	// makeParent makes the cgroup path, its controllers available to the
	// groups under it, weighed as cores cores (0: the default weight).
	makeParent(path string, cores int32) error
	// create makes the group path with limits l.
	create(path string, l Limits, cpu CPULimit) (group, error)
	// children names the cgroups directly under path; none if it is gone.
	children(path string) ([]string, error)
	// procs lists the processes in path; os.ErrNotExist if it is gone.
	procs(path string) ([]int, error)
	// remove removes the empty cgroup path; gone already is not an error.
	remove(path string) error
	// rename renames the group from to to (v1), or says it cannot
	// (errNoRename).
	rename(from, to string) (group, error)
	// ahead is the group path made from one made ahead under parent with
	// limits l, whose start moves nothing (v1); nil when there is none.
	ahead(parent, path string, l Limits, cpu CPULimit) group
	// evict takes this process's launching thread out of path, if it
	// waits there (v1), so that path can be removed.
	evict(path string)
}

// group is one made group.
type group interface {
	start(cmd *exec.Cmd, start func() error) error
	add(pid int) error
	// limit sets the group's limits to l.
	limit(l Limits, cpu CPULimit) error
	stat() (Stat, error)
}
