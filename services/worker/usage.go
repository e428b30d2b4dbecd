package worker

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/contain"
)

// defaultUsageInterval is how often the worker measures what its executors
// and drivers use: often enough for a dashboard's 15 s scrape, rare enough
// that one sample (a pass over /proc) costs a negligible share of a core
// (BenchmarkProcSourceMeasure).
const defaultUsageInterval = 5 * time.Second

// clockTicks is USER_HZ, the unit of /proc/PID/stat's CPU times: 100 on
// every Linux architecture Go supports (the kernel fixes it for user space).
const clockTicks = 100

// usage is what a process tree used: CPU time (user + system) in seconds,
// resident memory now and the highest resident memory seen, in bytes.
type usage struct {
	cpuSeconds  float64
	memoryBytes int64
	peakBytes   int64
}

// usageSource measures process trees; the worker asks it every
// UsageInterval, outside its lock, for the trees of its running executors
// and drivers that have no cgroup (sampleUsage). procSource reads /proc.
type usageSource interface {
	// measure returns, for each of pids, the usage of the tree of processes
	// rooted at it (the process and its descendants) since it started. A
	// pid that is gone is left out.
	measure(pids []int) map[int]usage
}

// procSource measures process trees from a proc file system (dir, "/proc").
// A tree is the root and every process whose parent is in the tree, found
// in one pass over dir's process entries per measure (the kernel's
// /proc/PID/task/TID/children needs CONFIG_PROC_CHILDREN, which not every
// kernel has). CPU is utime+stime+cutime+cstime of each process in the
// tree (cutime counts the descendants it reaped), memory VmRSS summed over
// it, and peak the larger of that sum and the highest VmHWM of one process:
// a lower bound of the tree's peak, exact for one process.
type procSource struct{ dir string }

// procStat is what measure reads from one /proc/PID/stat.
type procStat struct {
	ppid  int
	ticks uint64
}

func (p procSource) measure(pids []int) map[int]usage {
	entries, err := os.ReadDir(p.dir)
	if err != nil {
		return nil
	}
	stats := make(map[int]procStat, len(entries))
	children := make(map[int][]int, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readProcStat(filepath.Join(p.dir, e.Name(), "stat"))
		if err != nil {
			continue // it ended while the pass ran
		}
		stats[pid] = st
		children[st.ppid] = append(children[st.ppid], pid)
	}
	out := make(map[int]usage, len(pids))
	for _, root := range pids {
		if _, ok := stats[root]; !ok {
			continue
		}
		var u usage
		var ticks uint64
		// seen guards against a cycle a reused pid could make in a
		// snapshot taken while processes come and go.
		seen := map[int]bool{}
		for stack := []int{root}; len(stack) > 0; {
			pid := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if seen[pid] {
				continue
			}
			seen[pid] = true
			ticks += stats[pid].ticks
			rss, hwm := readProcStatus(filepath.Join(p.dir, strconv.Itoa(pid), "status"))
			u.memoryBytes += rss
			u.peakBytes = max(u.peakBytes, hwm)
			stack = append(stack, children[pid]...)
		}
		u.cpuSeconds = float64(ticks) / clockTicks
		u.peakBytes = max(u.peakBytes, u.memoryBytes)
		out[root] = u
	}
	return out
}

// readProcStat reads the parent and the CPU ticks (utime, stime, cutime,
// cstime: fields 14 to 17) from a /proc/PID/stat. The command name, field 2,
// is in parentheses and may hold spaces and parentheses itself, so the
// fields are counted from its last ')'.
func readProcStat(path string) (procStat, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("%s: no command name", path)
	}
	f := bytes.Fields(b[i+1:]) // f[0] is field 3, the state
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("%s: %d fields after the command name, want 15", path, len(f))
	}
	ppid, err := strconv.Atoi(string(f[1]))
	if err != nil {
		return procStat{}, fmt.Errorf("%s: ppid: %w", path, err)
	}
	var ticks uint64
	for _, v := range f[11:15] {
		n, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil {
			return procStat{}, fmt.Errorf("%s: cpu time: %w", path, err)
		}
		ticks += n
	}
	return procStat{ppid: ppid, ticks: ticks}, nil
}

// readProcStatus reads VmRSS and VmHWM, in bytes, from a /proc/PID/status;
// a process that ended, or a kernel thread, has neither (0).
func readProcStatus(path string) (rss, hwm int64) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, value, ok := bytes.Cut(sc.Bytes(), []byte(":"))
		if !ok {
			continue
		}
		var dst *int64
		switch string(name) {
		case "VmRSS":
			dst = &rss
		case "VmHWM":
			dst = &hwm
		default:
			continue
		}
		kb, err := strconv.ParseInt(string(bytes.TrimSuffix(bytes.TrimSpace(value), []byte(" kB"))), 10, 64)
		if err == nil && kb > 0 {
			*dst = kb << 10
		}
	}
	return rss, hwm
}

// measured is a runner's usage and where its last sample stood.
type measured struct {
	// used is the runner's usage over all its starts: CPU adds up, memory
	// is its current process's (0 once it ended), peak the highest seen.
	used usage
	// sampledPID is the process the last sample was of (0: none yet), and
	// sampledCPU what its tree had used then.
	sampledPID int
	sampledCPU float64
}

// addLocked records a sample u of the process pid and returns how much CPU
// it used since the previous one. A new pid is a restart: its CPU counts
// from zero. CPU never goes back (a descendant that ended unreaped takes
// its time with it).
func (m *measured) addLocked(pid int, u usage) float64 {
	if m.sampledPID != pid {
		m.sampledPID, m.sampledCPU = pid, 0
	}
	delta := max(0, u.cpuSeconds-m.sampledCPU)
	m.sampledCPU += delta
	m.used.cpuSeconds += delta
	m.used.memoryBytes = u.memoryBytes
	m.used.peakBytes = max(m.used.peakBytes, u.peakBytes, u.memoryBytes)
	return delta
}

// usageLoop samples usage every UsageInterval until ctx ends.
func (s *Server) usageLoop(ctx context.Context) {
	if s.cfg.UsageInterval < 0 {
		return
	}
	t := time.NewTicker(s.cfg.UsageInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.sampleUsage()
		}
	}
}

// sampleUsage measures every running executor and driver once: from its
// cgroup on a contained worker (what its limits apply to: memory counts
// its page cache too), else its process tree from /proc.
func (s *Server) sampleUsage() {
	s.mu.Lock()
	var pids []int
	groups := map[int]*contain.Group{}
	for _, r := range s.executors {
		sampleOf(&r.runner, &pids, groups)
	}
	for _, r := range s.drivers {
		sampleOf(&r.runner, &pids, groups)
	}
	s.mu.Unlock()
	if len(pids)+len(groups) == 0 {
		return
	}
	got := make(map[int]usage, len(pids)+len(groups))
	if len(pids) > 0 {
		maps.Copy(got, s.usage.measure(pids))
	}
	for pid, g := range groups {
		if st, err := g.Stat(); err == nil {
			got[pid] = usage{cpuSeconds: st.CPUSeconds, memoryBytes: st.MemoryBytes, peakBytes: st.PeakBytes}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.executors {
		if u, ok := got[r.pid]; ok && r.pid != 0 {
			s.usedCPU[executorKind.noun] += r.measured.addLocked(r.pid, u)
		}
	}
	for _, r := range s.drivers {
		if u, ok := got[r.pid]; ok && r.pid != 0 {
			s.usedCPU[driverKind.noun] += r.measured.addLocked(r.pid, u)
		}
	}
}

// sampleOf adds r's running process to what sampleUsage measures: its
// group, or its pid.
func sampleOf[S comparable](r *runner[S], pids *[]int, groups map[int]*contain.Group) {
	switch {
	case r.pid == 0:
	case r.group != nil:
		groups[r.pid] = r.group
	default:
		*pids = append(*pids, r.pid)
	}
}

// endUsageLocked records the last usage of a process that ended, from its
// wait status: the CPU of it and the descendants it reaped, and the peak
// resident memory of the largest of them; or, where more, from its cgroup
// (grouped): the CPU and peak memory of all it ran. Its current memory is
// 0. It returns the CPU it used since the last sample.
func (r *runner[S]) endUsageLocked(pid int, ps *os.ProcessState, grouped contain.Stat) float64 {
	if ps == nil {
		return 0
	}
	u := usage{cpuSeconds: (ps.UserTime() + ps.SystemTime()).Seconds()}
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		u.peakBytes = ru.Maxrss << 10
	}
	u.cpuSeconds, u.peakBytes = max(u.cpuSeconds, grouped.CPUSeconds), max(u.peakBytes, grouped.PeakBytes)
	return r.measured.addLocked(pid, u)
}

// usageReportLocked is what the worker tells the master its executors and
// drivers use, in heartbeats: those measured at least once.
func (s *Server) usageReportLocked() []*masterv1.ProcessUsage {
	var out []*masterv1.ProcessUsage
	for _, r := range s.sortedExecutorsLocked() {
		if r.sampledPID != 0 {
			out = append(out, r.used.proto(&masterv1.ProcessUsage{AppId: r.appID, ExecutorId: r.execID}))
		}
	}
	for _, r := range s.sortedDriversLocked() {
		if r.sampledPID != 0 {
			out = append(out, r.used.proto(&masterv1.ProcessUsage{DriverId: r.id}))
		}
	}
	return out
}

// proto fills in p's measured fields.
func (u usage) proto(p *masterv1.ProcessUsage) *masterv1.ProcessUsage {
	p.CpuSeconds, p.MemoryBytes, p.MemoryPeakBytes = u.cpuSeconds, u.memoryBytes, u.peakBytes
	return p
}
