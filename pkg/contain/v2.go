package contain

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/containerd/cgroups/v3/cgroup2"
)

// v2Controllers are the controllers a v2 group's limits need.
var v2Controllers = []string{"cpu", "memory", "pids"}

// v2 is the unified hierarchy mounted at root.
type v2 struct {
	root string
	// swap says the kernel accounts swap (memory.swap.max): a group may
	// then swap none, so that its memory limit bounds it.
	swap bool
}

func openV2(root string) (*v2, error) {
	b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	have := strings.Fields(string(b))
	for _, c := range v2Controllers {
		if !slices.Contains(have, c) {
			return nil, fmt.Errorf("%w: controller %s not in %s/cgroup.controllers", ErrUnavailable, c, root)
		}
	}
	_, err = os.Stat(filepath.Join(root, "memory.swap.max"))
	if errors.Is(err, os.ErrNotExist) {
		// The root has no memory.swap.max; a child shows whether swap is
		// accounted. Look at where this process runs.
		if self, perr := cgroup2.NestedGroupPath(""); perr == nil {
			_, err = os.Stat(filepath.Join(root, self, "memory.swap.max"))
		}
	}
	return &v2{root: root, swap: err == nil}, nil
}

func (*v2) version() int { return 2 }

// makeParent makes path with cpu, memory and pids enabled in it (the
// subtree_control of every cgroup above it); making a group enables them
// for the groups under path.
func (h *v2) makeParent(path string, cores int32) error {
	cpu := &cgroup2.CPU{}
	if cores > 0 {
		weight := cgroup2.ConvertCPUSharesToCgroupV2Value(uint64(cores) * 1024)
		cpu.Weight = &weight
	}
	_, err := cgroup2.NewManager(h.root, path, &cgroup2.Resources{CPU: cpu, Memory: &cgroup2.Memory{}, Pids: &cgroup2.Pids{}})
	return err
}

func (h *v2) create(path string, l Limits, cpu CPULimit) (group, error) {
	m, err := cgroup2.NewManager(h.root, path, h.resources(l, cpu))
	if err != nil {
		return nil, err
	}
	return &v2Group{h: h, m: m, dir: filepath.Join(h.root, path)}, nil
}

// resources are l as v2's limits.
func (h *v2) resources(l Limits, cpu CPULimit) *cgroup2.Resources {
	res := &cgroup2.Resources{}
	if l.MemoryBytes > 0 {
		// The whole group is killed on OOM, as one executor: no process of
		// it lives on without the one the kernel chose.
		oomGroup := true
		res.Memory = &cgroup2.Memory{Max: &l.MemoryBytes, OOMGroup: &oomGroup}
		if h.swap {
			none := int64(0)
			res.Memory.Swap = &none
		}
	}
	if l.Cores > 0 {
		switch cpu {
		case CPUHard:
			quota, period := int64(l.Cores)*cpuPeriod, uint64(cpuPeriod)
			res.CPU = &cgroup2.CPU{Max: cgroup2.NewCPUMax(&quota, &period)}
		case CPUShares:
			weight := cgroup2.ConvertCPUSharesToCgroupV2Value(uint64(l.Cores) * 1024)
			res.CPU = &cgroup2.CPU{Weight: &weight}
		}
	}
	if l.Pids > 0 {
		res.Pids = &cgroup2.Pids{Max: l.Pids}
	}
	return res
}

// rename is not v2's: the kernel renames no group of the unified
// hierarchy.
func (h *v2) rename(string, string) (group, error) { return nil, errNoRename }

// ahead is nil: v2 forks a process into its group (clone3), and moves
// nothing, so it makes no group ahead.
func (h *v2) ahead(string, string, Limits, CPULimit) group { return nil }

// evict does nothing: no thread of this process waits in a v2 group.
func (h *v2) evict(string) {}

// errNoRename says the hierarchy renames no group.
var errNoRename = errors.New("this cgroup hierarchy renames no group")

func (h *v2) children(path string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(h.root, path))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

func (h *v2) procs(path string) ([]int, error) {
	return readProcs(filepath.Join(h.root, path, "cgroup.procs"))
}

func (h *v2) remove(path string) error {
	if _, err := os.Stat(filepath.Join(h.root, path)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	m, err := cgroup2.Load(path, cgroup2.WithMountpoint(h.root))
	if err != nil {
		return err
	}
	return m.Delete()
}

type v2Group struct {
	h   *v2
	m   *cgroup2.Manager
	dir string // the group's directory
}

// start has the kernel fork cmd straight into the group: clone3 with
// CLONE_INTO_CGROUP and the group's directory.
func (g *v2Group) start(cmd *exec.Cmd, start func() error) error {
	dir, err := os.Open(g.dir)
	if err != nil {
		return err
	}
	defer dir.Close()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(dir.Fd())
	return start()
}

func (g *v2Group) add(pid int) error { return g.m.AddProc(uint64(pid)) }

func (g *v2Group) limit(l Limits, cpu CPULimit) error { return g.m.Update(g.h.resources(l, cpu)) }

func (g *v2Group) stat() (Stat, error) {
	m, err := g.m.StatFiltered(cgroup2.StatCPU | cgroup2.StatMemory | cgroup2.StatMemoryEvents)
	if err != nil {
		return Stat{}, err
	}
	var st Stat
	if m.CPU != nil {
		st.CPUSeconds = float64(m.CPU.UsageUsec) / 1e6
	}
	if m.Memory != nil {
		st.MemoryBytes, st.PeakBytes = int64(m.Memory.Usage), int64(m.Memory.MaxUsage)
	}
	if m.MemoryEvents != nil {
		st.OOMKills = int64(m.MemoryEvents.OomKill)
	}
	return st, nil
}
