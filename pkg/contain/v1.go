package contain

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	pathpkg "path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/containerd/cgroups/v3/cgroup1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// v1Controllers are the v1 hierarchies a group is made in: cpuacct for its
// CPU time, as cpu and cpuacct are mounted apart on some hosts.
var v1Controllers = []cgroup1.Name{cgroup1.Cpu, cgroup1.Cpuacct, cgroup1.Memory, cgroup1.Pids}

// v1 is cgroup v1: one hierarchy per controller, each at root/<controller>
// (a symbolic link where two share one mount, as cpu,cpuacct often do).
type v1 struct {
	root string
	// swap says the kernel accounts swap (memory.memsw.*): a group's
	// memory+swap limit is then its memory limit, so that it cannot swap
	// past it.
	swap bool
}

func openV1(root string) (*v1, error) {
	for _, c := range v1Controllers {
		if _, err := os.Stat(filepath.Join(root, string(c), "cgroup.procs")); err != nil {
			return nil, fmt.Errorf("%w: v1 controller %s: %w", ErrUnavailable, c, err)
		}
	}
	_, err := os.Stat(filepath.Join(root, string(cgroup1.Memory), "memory.memsw.limit_in_bytes"))
	return &v1{root: root, swap: err == nil}, nil
}

func (*v1) version() int { return 1 }

func (h *v1) subsystems() ([]cgroup1.Subsystem, error) {
	return []cgroup1.Subsystem{cgroup1.NewCpu(h.root), cgroup1.NewCpuacct(h.root), cgroup1.NewMemory(h.root), cgroup1.NewPids(h.root)}, nil
}

func (h *v1) makeParent(path string, cores int32) error {
	res := &specs.LinuxResources{}
	if cores > 0 {
		shares := uint64(cores) * 1024
		res.CPU = &specs.LinuxCPU{Shares: &shares}
	}
	_, err := cgroup1.New(cgroup1.StaticPath(path), res, cgroup1.WithHierarchy(h.subsystems))
	return err
}

func (h *v1) create(path string, l Limits, cpu CPULimit) (group, error) {
	cg, err := cgroup1.New(cgroup1.StaticPath(path), h.resources(l, cpu), cgroup1.WithHierarchy(h.subsystems))
	if err != nil {
		// Half made: remove what was.
		return nil, errors.Join(err, h.remove(path))
	}
	return &v1Group{h: h, cg: cg, path: path, limits: l, cpu: cpu}, nil
}

// resources are l as v1's limits.
func (h *v1) resources(l Limits, cpu CPULimit) *specs.LinuxResources {
	res := &specs.LinuxResources{}
	if l.MemoryBytes > 0 {
		res.Memory = &specs.LinuxMemory{Limit: &l.MemoryBytes}
		if h.swap {
			res.Memory.Swap = &l.MemoryBytes
		}
	}
	if l.Cores > 0 {
		switch cpu {
		case CPUHard:
			quota, period := int64(l.Cores)*cpuPeriod, uint64(cpuPeriod)
			res.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
		case CPUShares:
			shares := uint64(l.Cores) * 1024
			res.CPU = &specs.LinuxCPU{Shares: &shares}
		}
	}
	if l.Pids > 0 {
		res.Pids = &specs.LinuxPids{Limit: &l.Pids}
	}
	return res
}

// rename renames the group from to to in each hierarchy (once where two
// controllers share one), as v1 allows.
func (h *v1) rename(from, to string) (group, error) {
	for _, c := range v1Controllers {
		dir := filepath.Join(h.root, string(c))
		err := os.Rename(filepath.Join(dir, from), filepath.Join(dir, to))
		if errors.Is(err, os.ErrNotExist) {
			if _, serr := os.Stat(filepath.Join(dir, to)); serr == nil {
				continue // renamed through the controller it shares a mount with
			}
		}
		if err != nil {
			return nil, err
		}
	}
	cg, err := cgroup1.Load(cgroup1.StaticPath(to), cgroup1.WithHierarchy(h.subsystems))
	if err != nil {
		return nil, err
	}
	return &v1Group{h: h, cg: cg, path: to}, nil
}

// ahead is the spare group under parent (one the launcher thread waits in),
// renamed path and limited to l: a start in it forks with no move. The
// spare has the limits of the start before it (forker.wait), most often
// l, which are then not written again. Nil when there is none, or it could
// not be made path (then it is removed).
func (h *v1) ahead(parent, path string, l Limits, cpu CPULimit) group {
	f := launcher()
	var g *v1Group
	_ = f.run(func(int, homeOf) (func() error, error) {
		sp := f.spare
		if sp == nil || sp.h != h || pathpkg.Dir(sp.path) != parent {
			return nil, nil
		}
		f.spare = nil
		err := errSpareUnfit
		if sp.fits(l, cpu) {
			var c group
			if c, err = h.rename(sp.path, path); err == nil {
				g = c.(*v1Group)
				g.limits, g.cpu = sp.limits, sp.cpu
				err = g.limit(l, cpu)
			}
		}
		if err != nil {
			g = nil
			home := f.goHome(h)
			return func() error {
				err := home()
				_ = h.remove(sp.path)
				_ = h.remove(path)
				return err
			}, nil
		}
		f.at = path
		return nil, nil
	})
	if g == nil {
		return nil
	}
	return g
}

// evict takes the launcher thread out of the group path, if it waits in it
// (a spare, or a group taken from one whose start never came), so that the
// group can be removed.
func (h *v1) evict(path string) {
	f := launcher()
	_ = f.run(func(int, homeOf) (func() error, error) {
		if f.spare != nil && f.spare.path == path {
			f.spare = nil
		}
		if f.at != path {
			return nil, nil
		}
		return f.goHome(h), nil
	})
}

func (h *v1) children(path string) ([]string, error) {
	seen := map[string]bool{}
	var names []string
	for _, c := range v1Controllers {
		entries, err := os.ReadDir(filepath.Join(h.root, string(c), path))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if e.IsDir() && !seen[e.Name()] {
				seen[e.Name()] = true
				names = append(names, e.Name())
			}
		}
	}
	return names, nil
}

func (h *v1) procs(path string) ([]int, error) {
	var pids []int
	found := false
	for _, c := range v1Controllers {
		got, err := readProcs(filepath.Join(h.root, string(c), path, "cgroup.procs"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		found = true
		pids = append(pids, got...)
	}
	if !found {
		return nil, os.ErrNotExist
	}
	return pids, nil
}

func (h *v1) remove(path string) error {
	cg, err := cgroup1.Load(cgroup1.StaticPath(path), cgroup1.WithHierarchy(h.subsystems))
	if errors.Is(err, cgroup1.ErrCgroupDeleted) {
		return nil
	}
	if err != nil {
		return err
	}
	return cg.Delete()
}

// readProcs reads a cgroup.procs file.
func readProcs(name string) ([]int, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

type v1Group struct {
	h    *v1
	cg   cgroup1.Cgroup
	path string
	// limits and cpu are what was written to the group when it was made or
	// last limited (zero for a group renamed: Group.Become).
	limits Limits
	cpu    CPULimit
}

// errSpareUnfit says a spare group has a limit the next group made from it
// would not (ahead): containerd's cgroup1 writes only the limits set, so
// that one would stay.
var errSpareUnfit = errors.New("the spare group has a limit the group would not")

// fits says whether every limit written to g is one l sets too, so that
// limiting g to l leaves none of g's own.
func (g *v1Group) fits(l Limits, cpu CPULimit) bool {
	cores := g.limits.Cores == 0 || g.cpu == CPUOff || l.Cores > 0 && cpu == g.cpu
	return cores && (g.limits.MemoryBytes == 0 || l.MemoryBytes > 0) && (g.limits.Pids == 0 || l.Pids > 0)
}

// start forks cmd from the launcher thread, in the group (v1 places
// threads, through its tasks files), so the process starts in the group:
// at once if the thread waits in it (a group made ahead: ahead), else once
// it moved in. A move waits on the kernel, which takes the threadgroup
// rwsem for writing and so waits for an RCU grace period (BenchmarkStart).
// Once start returned, off the launch's path, the thread moves on to wait
// in a new spare group under the same parent, for the next start (or in
// its own cgroups, if none can be made).
func (g *v1Group) start(cmd *exec.Cmd, start func() error) error {
	f := launcher()
	return f.run(func(tid int, home homeOf) (func() error, error) {
		if _, err := home(g.h); err != nil {
			return nil, fmt.Errorf("the launching thread's cgroups: %w", err)
		}
		moveOn := func() error { return f.wait(g.h, pathpkg.Dir(g.path), g.limits, g.cpu) }
		if f.at != g.path {
			if err := g.cg.AddTask(cgroup1.Process{Pid: tid}); err != nil {
				return moveOn, err
			}
			f.at = g.path
		}
		return moveOn, start()
	})
}

func (g *v1Group) add(pid int) error { return g.cg.Add(cgroup1.Process{Pid: pid}) }

// limit writes l to the group, unless it has l already.
func (g *v1Group) limit(l Limits, cpu CPULimit) error {
	if l == g.limits && cpu == g.cpu {
		return nil
	}
	if err := g.cg.Update(g.h.resources(l, cpu)); err != nil {
		return err
	}
	g.limits, g.cpu = l, cpu
	return nil
}

func (g *v1Group) stat() (Stat, error) {
	m, err := g.cg.Stat(cgroup1.IgnoreNotExist)
	if err != nil {
		return Stat{}, err
	}
	var st Stat
	if m.CPU != nil && m.CPU.Usage != nil {
		st.CPUSeconds = float64(m.CPU.Usage.Total) / 1e9
	}
	if m.Memory != nil && m.Memory.Usage != nil {
		st.MemoryBytes, st.PeakBytes = int64(m.Memory.Usage.Usage), int64(m.Memory.Usage.Max)
	}
	if m.MemoryOomControl != nil {
		st.OOMKills = int64(m.MemoryOomControl.OomKill)
	}
	return st, nil
}

// errLauncherAway says the launcher thread could not move back to its own
// cgroups after a start: later starts are refused, as they would fork from
// a thread in another process's group.
var errLauncherAway = errors.New("the launching thread could not return to its own cgroups")

// forker is the thread v1 starts contained processes from: one goroutine
// locked to its thread for the life of the process, so that the thread
// never ends (a child's Pdeathsig fires when the thread that forked it
// ends) and runs nothing but starts and the moves, renames and limits of
// the groups it waits in: no other goroutine's work is charged to a
// group.
type forker struct {
	calls chan func()
	tid   int // set by the thread before the first call
	// Used by the thread alone.
	homes map[*v1]cgroup1.Cgroup // its own cgroups in each hierarchy
	err   error                  // why it starts no more processes (errLauncherAway)
	// at is the group the thread is in, "" for its own cgroups; spare,
	// when set, is the group made ahead it waits in (at), which the next
	// group made under the same parent becomes (ahead).
	at    string
	spare *v1Group
	// spares counts the spare groups made, naming them.
	spares int
}

// spareName prefixes the names of the groups made ahead.
const spareName = ".spare-"

// wait moves the thread into the spare group under parent in h — one made
// now with limits l if there is none, as the next start is most often
// like the last — to wait for the next start; into its own cgroups if that
// fails.
func (f *forker) wait(h *v1, parent string, l Limits, cpu CPULimit) error {
	if f.spare == nil || f.spare.h != h || pathpkg.Dir(f.spare.path) != parent {
		if f.spare != nil {
			// Another parent's: removed if empty, else by its parent's Close.
			_ = f.spare.h.remove(f.spare.path)
		}
		f.spare = nil
		f.spares++
		c, err := h.create(pathpkg.Join(parent, spareName+strconv.Itoa(f.spares)), l, cpu)
		if err != nil {
			return f.goHome(h)()
		}
		f.spare = c.(*v1Group)
	}
	if err := f.spare.cg.AddTask(cgroup1.Process{Pid: f.tid}); err != nil {
		_ = f.spare.h.remove(f.spare.path)
		f.spare = nil
		return f.goHome(h)()
	}
	f.at = f.spare.path
	return nil
}

// goHome is what moves the thread back to its own cgroups in h.
func (f *forker) goHome(h *v1) func() error {
	return func() error {
		back, err := f.home(h)
		if err == nil {
			err = back.AddTask(cgroup1.Process{Pid: f.tid})
		}
		if err != nil {
			return fmt.Errorf("the launching thread's cgroups: %w", err)
		}
		f.at = ""
		return nil
	}
}

// homeOf returns the launcher thread's own cgroups in h.
type homeOf func(h *v1) (cgroup1.Cgroup, error)

// home returns the thread's own cgroups in h, read once (before it first
// moved).
func (f *forker) home(h *v1) (cgroup1.Cgroup, error) {
	if cg, ok := f.homes[h]; ok {
		return cg, nil
	}
	cg, err := cgroup1.Load(threadPath(f.tid), cgroup1.WithHierarchy(h.subsystems))
	if err == nil {
		f.homes[h] = cg
	}
	return cg, err
}

var launcher = sync.OnceValue(func() *forker {
	f := &forker{calls: make(chan func()), homes: map[*v1]cgroup1.Cgroup{}}
	ready := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread lives as long as the process
		f.tid = unix.Gettid()
		close(ready)
		for call := range f.calls {
			call()
		}
	}()
	<-ready
	return f
})

// run calls fn on the launcher thread with its tid, one call at a time,
// and returns fn's error; the thread then calls what fn returned to take it
// back home (if not nil) before the next call.
func (f *forker) run(fn func(tid int, home homeOf) (func() error, error)) error {
	done := make(chan error, 1)
	f.calls <- func() {
		if f.err != nil {
			done <- f.err
			return
		}
		goBack, err := fn(f.tid, f.home)
		done <- err
		if goBack == nil {
			return
		}
		if err := goBack(); err != nil {
			f.err = fmt.Errorf("%w: %w", errLauncherAway, err)
		}
	}
	return <-done
}

// threadPath is the cgroups of the thread tid of this process, from its
// /proc/self/task/TID/cgroup.
func threadPath(tid int) cgroup1.Path {
	paths, err := cgroup1.ParseCgroupFile(fmt.Sprintf("/proc/self/task/%d/cgroup", tid))
	return func(name cgroup1.Name) (string, error) {
		if err != nil {
			return "", err
		}
		p, ok := paths[string(name)]
		if !ok {
			return "", cgroup1.ErrControllerNotActive
		}
		return p, nil
	}
}
