package contain

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	cgroups "github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"

	"github.com/glint-cluster/glint/internal/tooltest"
)

// The test binary is also the processes the tests contain: with
// GLINT_CONTAIN_TEST_CHILD set, TestMain acts as the child named there.
const childEnv = "GLINT_CONTAIN_TEST_CHILD"

// childLifetime bounds every child, so that a failed test leaves nothing
// running for long.
const childLifetime = time.Minute

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(runChild(mode))
	}
	os.Exit(m.Run())
}

// runChild is a child process:
//
//	alloc   touches 256 MiB, page by page, prints "allocated" and exits 0
//	spin    spins every core it may use until it is killed
//	sleep   ignores SIGTERM, prints "ready" and sleeps
//	leave   opens the parent $GLINT_CONTAIN_TEST_PARENT, starts a sleep
//	        child in a group of it, prints "started PID" and sleeps: the
//	        test SIGKILLs it, as a worker dies
func runChild(mode string) int {
	switch mode {
	case "alloc":
		b := make([]byte, 256<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		runtime.KeepAlive(b)
		fmt.Println("allocated")
		return 0
	case "spin":
		for range runtime.GOMAXPROCS(0) - 1 {
			go spin()
		}
		spin()
	case "sleep":
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ready")
		time.Sleep(childLifetime)
		return 0
	case "leave":
		p, err := Open(os.Getenv("GLINT_CONTAIN_TEST_PARENT"), Options{})
		if err != nil {
			fmt.Println(err)
			return 2
		}
		g, err := p.New("left", Limits{MemoryBytes: MemoryLimit(64), Cores: 1, Pids: DefaultPids})
		if err != nil {
			fmt.Println(err)
			return 2
		}
		cmd := childCommand("sleep")
		cmd.Stdout = os.Stdout
		if err := g.Start(cmd, cmd.Start); err != nil {
			fmt.Println(err)
			return 2
		}
		fmt.Printf("started %d\n", cmd.Process.Pid)
		time.Sleep(childLifetime)
		return 0
	}
	return 97
}

func spin() {
	for deadline := time.Now().Add(childLifetime); time.Now().Before(deadline); {
		for n := 0; n < 1<<20; n++ {
			_ = n * 31
		}
	}
	os.Exit(0)
}

// childCommand runs the test binary as the child mode.
func childCommand(mode string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	return cmd
}

// openParent opens a parent cgroup of the test's own on the machine's
// hierarchy and closes it when the test ends, checking that nothing of it
// is left.
func openParent(t testing.TB) *Parent {
	t.Helper()
	name := fmt.Sprintf("glint-test-%s-%d", strings.ReplaceAll(t.Name(), "/", "_"), os.Getpid())
	p, err := Open(name, Options{Cores: 2})
	if err != nil {
		t.Fatalf("Open: %v (these tests need a writable cgroup hierarchy: run them as root)", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		assertNoCgroup(t, p)
	})
	return p
}

// assertNoCgroup fails the test if p's cgroup is in any hierarchy.
func assertNoCgroup(t testing.TB, p *Parent) {
	t.Helper()
	for _, dir := range cgroupDirs(p.h, p.path) {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s is left (%v)", dir, err)
		}
	}
}

// cgroupDirs are the directories of the cgroup path in h.
func cgroupDirs(h hierarchy, path string) []string {
	switch h := h.(type) {
	case *v1:
		var dirs []string
		for _, c := range v1Controllers {
			dirs = append(dirs, filepath.Join(h.root, string(c), path))
		}
		return dirs
	case *v2:
		return []string{filepath.Join(h.root, path)}
	}
	return nil
}

// waitLines reads lines from r until it has read one starting with each of
// prefixes, in any order, and returns them by prefix.
func waitLines(t *testing.T, r *bufio.Reader, prefixes ...string) map[string]string {
	t.Helper()
	got := map[string]string{}
	for len(got) < len(prefixes) {
		line, err := r.ReadString('\n')
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				got[p] = strings.TrimSpace(line)
			}
		}
		if err != nil && len(got) < len(prefixes) {
			t.Fatalf("lines %q of %q: %v", got, prefixes, err)
		}
	}
	return got
}

// A process that allocates past its group's memory limit is killed by the
// kernel (SIGKILL), and the group counts the OOM kill.
func TestAProcessOverItsMemoryLimitIsOOMKilled(t *testing.T) {
	p := openParent(t)
	g, err := p.New("alloc", Limits{MemoryBytes: 64 << 20, Pids: DefaultPids})
	if err != nil {
		t.Fatal(err)
	}
	cmd := childCommand("alloc")
	out := &strings.Builder{}
	cmd.Stdout = out
	if err := g.Start(cmd, cmd.Start); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("child ended %v (%q), want killed by SIGKILL", err, out)
	}
	st, err := g.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if st.OOMKills < 1 || st.PeakBytes < 32<<20 || st.PeakBytes > 65<<20 { // the kernel may charge a page past the limit before it kills
		t.Errorf("stat %+v: want an OOM kill and a peak near the 64 MiB limit", st)
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
}

// A group granted one core uses at most one, however many threads spin in
// it: its CPU time grows no faster than 1.1 s a second.
func TestAHardCPULimitCapsTheGroupAtItsCores(t *testing.T) {
	if testing.Short() {
		t.Skip("-short is the fast loop (make test-short): this test starts a process that spins for seconds; make test runs it")
	}
	p := openParent(t)
	g, err := p.New("spin", Limits{Cores: 1, MemoryBytes: MemoryLimit(64), Pids: DefaultPids})
	if err != nil {
		t.Fatal(err)
	}
	cmd := childCommand("spin")
	cmd.Env = append(cmd.Env, "GOMAXPROCS=4")
	if err := g.Start(cmd, cmd.Start); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	cpu := func() float64 {
		st, err := g.Stat()
		if err != nil {
			t.Fatal(err)
		}
		return st.CPUSeconds
	}
	// Measured from the first CPU time seen, once the spinning started.
	var start float64
	tooltest.Eventually(t, "the child to spin", func() bool { start = cpu(); return start > 0.1 })
	began := time.Now()
	var used float64
	tooltest.Eventually(t, "the group to use 2 s of CPU", func() bool { used = cpu() - start; return used >= 2 })
	cores := used / time.Since(began).Seconds()
	t.Logf("used %.2f s of CPU in %v: %.2f cores", used, time.Since(began), cores)
	if cores > 1.1 {
		t.Errorf("the group used %.2f cores, want at most 1.1", cores)
	}
}

// The process is in its group from its first instruction: a program that
// reads its own cgroups as the first thing it does finds the group there.
func TestAProcessStartsInItsGroup(t *testing.T) {
	p := openParent(t)
	g, err := p.New("cat", Limits{MemoryBytes: MemoryLimit(16), Cores: 1, Pids: 16})
	if err != nil {
		t.Fatal(err)
	}
	assertStartsIn(t, g, p.Version())
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
}

// A group made with the name of one left over replaces it: the process
// still in the old one is killed.
func TestNewReplacesAGroupLeftOfItsName(t *testing.T) {
	p := openParent(t)
	old, err := p.New("again", Limits{Pids: 16})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "1000")
	if err := old.Start(cmd, cmd.Start); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { ended <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-ended
	})
	g, err := p.New("again", Limits{Pids: 16})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		if err == nil {
			t.Error("the process in the group left over exited 0; want it killed")
		}
		ended <- err
	case <-time.After(removeWait):
		t.Error("the process in the group left over still runs once a group of its name was made")
	}
	assertStartsIn(t, g, p.Version())
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
}

// assertStartsIn starts cat /proc/self/cgroup in g and checks every
// hierarchy line of g's version names g.
func assertStartsIn(t *testing.T, g *Group, version int) {
	t.Helper()
	cmd := exec.Command("cat", "/proc/self/cgroup")
	out := &strings.Builder{}
	cmd.Stdout = out
	if err := g.Start(cmd, cmd.Start); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	switch version {
	case 1:
		for _, c := range v1Controllers {
			want[string(c)] = true
		}
	case 2:
		want[""] = true
	}
	for line := range strings.Lines(out.String()) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		for _, c := range strings.Split(parts[1], ",") {
			if !want[c] {
				continue
			}
			delete(want, c)
			if parts[2] != g.Path() {
				t.Errorf("the process started in %s cgroup %s, want %s", c, parts[2], g.Path())
			}
		}
	}
	if len(want) != 0 {
		t.Errorf("no line for %v in:\n%s", want, out)
	}
}

// What a worker that was SIGKILLed left — its groups and a process in one
// that ignores SIGTERM — is removed and killed when it opens its parent
// again; Close leaves nothing of the parent.
func TestOpenRemovesWhatAKilledRunLeft(t *testing.T) {
	if testing.Short() {
		t.Skip("-short is the fast loop (make test-short): this test starts a process and the one it leaves behind; make test runs it")
	}
	name := fmt.Sprintf("glint-test-%s-%d", t.Name(), os.Getpid())
	leaver := childCommand("leave")
	leaver.Env = append(leaver.Env, "GLINT_CONTAIN_TEST_PARENT="+name)
	stdout, err := leaver.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := leaver.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(stdout)
	line := waitLines(t, r, "started ", "ready")["started "]
	left, err := strconv.Atoi(strings.TrimPrefix(line, "started "))
	if err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	t.Cleanup(func() { syscall.Kill(left, syscall.SIGKILL) })
	leaver.Process.Kill()
	leaver.Wait()
	if !tooltest.Alive(left) {
		t.Fatalf("the left process %d died with the run that started it; the test needs it alive", left)
	}

	p := openParent(t)
	if p.Path() != "/"+name {
		t.Fatalf("parent %s, want /%s", p.Path(), name)
	}
	tooltest.Eventually(t, "the left process to die", func() bool { return !tooltest.Alive(left) })
	names, err := p.h.children(p.path)
	if err != nil || len(names) != 0 {
		t.Errorf("groups under the reopened parent: %v, %v; want none", names, err)
	}
}

// The v2 limits are the files the kernel reads: memory.max with the OOM
// of the whole group, cpu.max (hard) or cpu.weight (shares, the kernel's
// weight for 1024 shares a core), pids.max, and
// the controllers enabled above the group (a fake hierarchy in a directory:
// this machine's controllers are on v1).
func TestV2GroupsWriteTheirLimits(t *testing.T) {
	for _, tc := range []struct {
		cpu         CPULimit
		file, want  string
		controllers string // enabled for the groups under the parent
	}{
		{CPUHard, "cpu.max", "200000 100000", "+cpu +memory +pids"},
		{CPUShares, "cpu.weight", "174", "+cpu +memory +pids"}, // 1 core: 100, the default weight
		{CPUOff, "cpu.max", "", "+memory +pids"},
	} {
		t.Run(string(tc.cpu), func(t *testing.T) {
			root := t.TempDir()
			for _, f := range []string{"cgroup.controllers", "cgroup.subtree_control", "glint/cgroup.subtree_control", "glint/w/cgroup.subtree_control"} {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(root, f)), 0o755); err != nil {
					t.Fatal(err)
				}
				var b []byte
				if f == "cgroup.controllers" {
					b = []byte("cpu memory pids io\n")
				}
				if err := os.WriteFile(filepath.Join(root, f), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			p, err := Open("glint/w", Options{Root: root, Version: 2, CPU: tc.cpu, Cores: 2})
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"cgroup.subtree_control", "glint/cgroup.subtree_control"} {
				if b, err := os.ReadFile(filepath.Join(root, f)); err != nil || string(b) != "+cpu +memory +pids" {
					t.Errorf("%s = %q, %v once the parent is open; want +cpu +memory +pids", f, b, err)
				}
			}
			if p.Version() != 2 {
				t.Errorf("version %d, want 2", p.Version())
			}
			if _, err := p.New("e", Limits{Cores: 2, MemoryBytes: MemoryLimit(1024), Pids: 100}); err != nil {
				t.Fatal(err)
			}
			want := map[string]string{
				"glint/w/e/memory.max":           strconv.FormatInt(1024<<20+(1024<<20)/10, 10),
				"glint/w/e/memory.oom.group":     "1",
				"glint/w/e/pids.max":             "100",
				"glint/w/e/" + tc.file:           tc.want,
				"glint/w/cgroup.subtree_control": tc.controllers,
				"glint/w/cpu.weight":             "174",
			}
			for f, w := range want {
				b, err := os.ReadFile(filepath.Join(root, f))
				if w == "" {
					if !errors.Is(err, os.ErrNotExist) {
						t.Errorf("%s: %q, %v; want none", f, b, err)
					}
					continue
				}
				if err != nil || string(b) != w {
					t.Errorf("%s = %q, %v; want %q", f, b, err, w)
				}
			}
		})
	}
}

// On v2 the kernel forks the process into its group (CLONE_INTO_CGROUP):
// tried on the machine's unified hierarchy, whose cpu, memory and pids
// controllers may be on v1, so the group has no limits.
func TestV2ProcessesStartInTheirGroup(t *testing.T) {
	root := defaultRoot
	if cgroups.Mode() == cgroups.Hybrid {
		root = filepath.Join(defaultRoot, "unified")
	} else if cgroups.Mode() != cgroups.Unified {
		t.Fatalf("no unified hierarchy at %s (mode %v)", defaultRoot, cgroups.Mode())
	}
	h := &v2{root: root}
	path := fmt.Sprintf("/glint-test-%d", os.Getpid())
	c, err := h.create(path, Limits{}, CPUOff)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.remove(path); err != nil {
			t.Error(err)
		}
	})
	assertStartsIn(t, &Group{h: h, path: path, c: c}, 2)
}

// Where no hierarchy is mounted, Open says the worker cannot contain.
func TestOpenWithoutAHierarchyIsUnavailable(t *testing.T) {
	for _, v := range []int{0, 1, 2} {
		if _, err := Open("glint/w", Options{Root: t.TempDir(), Version: v}); !errors.Is(err, ErrUnavailable) {
			t.Errorf("version %d: Open in an empty directory = %v, want ErrUnavailable", v, err)
		}
	}
}

// MemoryLimit adds max(64 MiB, 10%) to the grant.
func TestMemoryLimitAddsTheOverhead(t *testing.T) {
	for _, tc := range []struct{ mib, want int64 }{
		{256, 320 << 20},
		{640, 704 << 20},
		{4096, 4096<<20 + 4096<<20/10},
	} {
		if got := MemoryLimit(tc.mib); got != tc.want {
			t.Errorf("MemoryLimit(%d) = %d, want %d", tc.mib, got, tc.want)
		}
	}
}

// Only hard, shares and off are CPU limits.
func TestParseCPULimit(t *testing.T) {
	for _, s := range []string{"hard", "shares", "off"} {
		if l, err := ParseCPULimit(s); err != nil || string(l) != s {
			t.Errorf("ParseCPULimit(%q) = %q, %v", s, l, err)
		}
	}
	if _, err := ParseCPULimit("soft"); err == nil {
		t.Error(`ParseCPULimit("soft"): no error`)
	}
}

// BenchmarkStart is what containing a process adds to the launch path:
// making its group and starting it there, against starting it alone. The
// reaping and the group's removal, which follow the process's end, are
// not timed.
func BenchmarkStart(b *testing.B) {
	run := func(b *testing.B, start func(cmd *exec.Cmd) error, end func()) {
		for range b.N {
			cmd := exec.Command("/bin/true")
			if err := start(cmd); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := cmd.Wait(); err != nil {
				b.Fatal(err)
			}
			end()
			b.StartTimer()
		}
	}
	b.Run("unconfined", func(b *testing.B) {
		run(b, func(cmd *exec.Cmd) error { return cmd.Start() }, func() {})
	})
	b.Run("contained", func(b *testing.B) {
		p := openParent(b)
		var g *Group
		run(b, func(cmd *exec.Cmd) error {
			var err error
			if g, err = p.New("bench", Limits{Cores: 1, MemoryBytes: MemoryLimit(256), Pids: DefaultPids}); err != nil {
				return err
			}
			return g.Start(cmd, cmd.Start)
		}, func() {
			if err := g.Remove(); err != nil {
				b.Fatal(err)
			}
		})
	})
}

// On v1 a group made ahead with a process in it becomes that process's
// launch's group: renamed and limited, the process still in it, no group
// left of the old name (v2 keeps the name: TestAV2GroupMadeAheadTakesItsLaunchsLimits).
func TestAV1GroupMadeAheadBecomesItsLaunchsWithItsProcessInIt(t *testing.T) {
	p, h := openV1Parent(t)
	g, err := p.New("standby", Limits{Pids: DefaultPids})
	if err != nil {
		t.Fatal(err)
	}
	cmd := childCommand("sleep")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(cmd, cmd.Start); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Wait() })
	waitLines(t, bufio.NewReader(out), "ready")
	old := g.Path()
	if err := g.Become("executor-app-0", Limits{MemoryBytes: MemoryLimit(64), Cores: 1, Pids: 50}); err != nil {
		t.Fatal(err)
	}
	if want := p.Path() + "/executor-app-0"; g.Path() != want {
		t.Errorf("group at %s, want %s", g.Path(), want)
	}
	for c, want := range map[cgroup1.Name]string{
		cgroup1.Memory: "memory.limit_in_bytes " + strconv.FormatInt(MemoryLimit(64), 10),
		cgroup1.Cpu:    "cpu.cfs_quota_us 100000",
		cgroup1.Pids:   "pids.max 50",
	} {
		file, value, _ := strings.Cut(want, " ")
		if b, err := os.ReadFile(filepath.Join(h.root, string(c), g.Path(), file)); err != nil || strings.TrimSpace(string(b)) != value {
			t.Errorf("%s = %q, %v; want %s", file, b, err, value)
		}
		if pids, err := readProcs(filepath.Join(h.root, string(c), g.Path(), "cgroup.procs")); err != nil || len(pids) != 1 || pids[0] != cmd.Process.Pid {
			t.Errorf("%s group holds %v (%v), want the process %d", c, pids, err, cmd.Process.Pid)
		}
		if _, err := os.Stat(filepath.Join(h.root, string(c), old)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s group %s left (%v)", c, old, err)
		}
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
}

// A v2 group keeps its name when it becomes a launch's (the kernel renames
// none), and takes the launch's limits.
func TestAV2GroupMadeAheadTakesItsLaunchsLimits(t *testing.T) {
	root := t.TempDir()
	for _, f := range []string{"cgroup.controllers", "cgroup.subtree_control", "w/cgroup.subtree_control"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, f), []byte("cpu memory pids\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p, err := Open("w", Options{Root: root, Version: 2, CPU: CPUHard})
	if err != nil {
		t.Fatal(err)
	}
	g, err := p.New("standby", Limits{Pids: 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Become("executor-app-0", Limits{Cores: 2, MemoryBytes: MemoryLimit(1024), Pids: 100}); err != nil {
		t.Fatal(err)
	}
	if g.Path() != "/w/standby" {
		t.Errorf("group at %s, want /w/standby", g.Path())
	}
	for f, w := range map[string]string{"memory.max": strconv.FormatInt(MemoryLimit(1024), 10), "pids.max": "100", "cpu.max": "200000 100000"} {
		if b, err := os.ReadFile(filepath.Join(root, "w/standby", f)); err != nil || string(b) != w {
			t.Errorf("%s = %q, %v; want %q", f, b, err, w)
		}
	}
}

// settled returns once the launching thread moved on after its last start
// (off the start's path).
func settled() {
	_ = launcher().run(func(int, homeOf) (func() error, error) { return nil, nil })
}

// threadsOf lists the threads of this process in the v1 group path.
func threadsOf(t *testing.T, h *v1, path string) []int {
	t.Helper()
	tids, err := readProcs(filepath.Join(h.root, string(cgroup1.Memory), path, "tasks"))
	if err != nil {
		t.Fatal(err)
	}
	var ours []int
	for _, tid := range tids {
		if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", tid)); err == nil {
			ours = append(ours, tid)
		}
	}
	return ours
}

// v1Limit is the content of the v1 group path's file in hierarchy c.
func v1Limit(t *testing.T, h *v1, c cgroup1.Name, path, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.root, string(c), path, file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// On v1 the spare group made after a start has that start's limits, the
// next start's most often: a group made from it with the same limits has
// them written no more (the test changes the spare's pids limit behind its
// back to see), one with others has them written.
func TestV1MakesTheSpareWithTheLastStartsLimits(t *testing.T) {
	p, h := openV1Parent(t)
	l := Limits{Cores: 1, MemoryBytes: MemoryLimit(64), Pids: 16}
	first, err := p.New("first", l)
	if err != nil {
		t.Fatal(err)
	}
	assertStartsIn(t, first, 1)
	settled()
	spare := launcher().spare.path
	if got := v1Limit(t, h, cgroup1.Memory, spare, "memory.limit_in_bytes"); got != strconv.FormatInt(l.MemoryBytes, 10) {
		t.Fatalf("the spare after a start has memory limit %s, want the start's %d", got, l.MemoryBytes)
	}
	if err := os.WriteFile(filepath.Join(h.root, string(cgroup1.Pids), spare, "pids.max"), []byte("17"), 0o644); err != nil {
		t.Fatal(err)
	}
	same, err := p.New("same", l)
	if err != nil {
		t.Fatal(err)
	}
	if got := v1Limit(t, h, cgroup1.Pids, same.Path(), "pids.max"); got != "17" {
		t.Errorf("a group made from a spare with its limits has pids limit %s; want them not written again (17)", got)
	}
	assertStartsIn(t, same, 1)
	settled()
	other, err := p.New("other", Limits{Cores: 1, MemoryBytes: MemoryLimit(64), Pids: 32})
	if err != nil {
		t.Fatal(err)
	}
	if got := v1Limit(t, h, cgroup1.Pids, other.Path(), "pids.max"); got != "32" {
		t.Errorf("a group made from a spare with other limits has pids limit %s, want its own 32", got)
	}
	for _, g := range []*Group{first, same, other} {
		if err := g.Remove(); err != nil {
			t.Fatal(err)
		}
	}
}

// openV1Parent is openParent's group, on a machine whose hierarchy is v1.
func openV1Parent(t *testing.T) (*Parent, *v1) {
	p := openParent(t)
	h, ok := p.h.(*v1)
	if !ok {
		t.Skip("cgroup v1 only: this machine's hierarchy is v2")
	}
	return p, h
}

// After a start on v1 the launching thread waits in a spare group under
// the parent; the next group made there is that spare, renamed and
// limited, with the thread in it already, so its start moves nothing; the
// thread then waits in a new spare, which Close removes with the rest.
func TestV1MakesTheNextGroupAheadWithTheLaunchingThreadInIt(t *testing.T) {
	p, h := openV1Parent(t)
	first, err := p.New("first", Limits{Pids: 16})
	if err != nil {
		t.Fatal(err)
	}
	assertStartsIn(t, first, 1)
	settled()
	spares := func() []string {
		var names []string
		children, err := h.children(p.Path())
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range children {
			if strings.HasPrefix(c, spareName) {
				names = append(names, c)
			}
		}
		return names
	}
	spare := spares()
	if len(spare) != 1 || len(threadsOf(t, h, p.Path()+"/"+spare[0])) != 1 {
		t.Fatalf("spare groups %v after a start, want one holding the launching thread", spare)
	}
	next, err := p.New("next", Limits{MemoryBytes: MemoryLimit(64), Cores: 1, Pids: 16})
	if err != nil {
		t.Fatal(err)
	}
	if len(spares()) != 0 || len(threadsOf(t, h, next.Path())) != 1 {
		t.Fatalf("spare groups %v once the next group is made, threads %v in it; want none, and the launching thread", spares(), threadsOf(t, h, next.Path()))
	}
	if b, err := os.ReadFile(filepath.Join(h.root, string(cgroup1.Memory), next.Path(), "memory.limit_in_bytes")); err != nil || strings.TrimSpace(string(b)) != strconv.FormatInt(MemoryLimit(64), 10) {
		t.Errorf("the group made ahead has memory limit %q, %v; want its own", b, err)
	}
	assertStartsIn(t, next, 1)
	settled()
	if threads := threadsOf(t, h, next.Path()); len(threads) != 0 || len(spares()) != 1 {
		t.Errorf("threads %v left in the started group and spares %v; want none and a new one", threads, spares())
	}
	// A group made ahead whose start never comes is removed all the same.
	// The spare had next's limits: this one, with fewer, is made anew, with
	// none of those it does not have.
	unused, err := p.New("unused", Limits{Pids: 16})
	if err != nil {
		t.Fatal(err)
	}
	if got := v1Limit(t, h, cgroup1.Memory, unused.Path(), "memory.limit_in_bytes"); got == strconv.FormatInt(MemoryLimit(64), 10) {
		t.Errorf("a group without a memory limit made after one with it has memory limit %s, the spare's", got)
	}
	if err := unused.Remove(); err != nil {
		t.Fatal(err)
	}
	for _, g := range []*Group{first, next} {
		if err := g.Remove(); err != nil {
			t.Fatal(err)
		}
	}
}
