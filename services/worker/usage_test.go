package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/services/master"
)

// heldBytes is what a hold-memory child touches and holds.
const heldBytes = 64 << 20

// usageChild is the burn, hold-memory, alloc, spin and cache modes of
// runChild (alloc, spin and cache: contain_test.go); cache writes a file of
// cachedBytes, which stays in the page cache, charged to its cgroup. burn starts a
// hold-memory grandchild, prints "holding" once it holds its memory, and
// spins one core; hold-memory touches every page of heldBytes and holds
// them. Both end when the file "release" appears in dir.
func usageChild(mode, dir string, deadline time.Time) int {
	released := func() bool {
		_, err := os.Stat(filepath.Join(dir, "release"))
		return err == nil || time.Now().After(deadline)
	}
	switch mode {
	case "alloc":
		b := make([]byte, allocBytes)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		fmt.Println("allocated")
		for !released() {
			time.Sleep(10 * time.Millisecond)
		}
		runtime.KeepAlive(b)
		return 0
	case "cache":
		if err := os.WriteFile(filepath.Join(dir, "cache"), make([]byte, cachedBytes), 0o600); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println("cached")
		for !released() {
			time.Sleep(10 * time.Millisecond)
		}
		return 0
	case "spin":
		for range runtime.GOMAXPROCS(0) {
			go func() {
				for n := 0; !released(); n++ {
					for range 1 << 20 {
						n = n*31 + 7
					}
				}
			}()
		}
		for !released() {
			time.Sleep(10 * time.Millisecond)
		}
		return 0
	}
	if mode == "hold-memory" {
		b := make([]byte, heldBytes)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1 // one byte a page makes the page resident
		}
		fmt.Println("holding")
		for !released() {
			time.Sleep(10 * time.Millisecond)
		}
		runtime.KeepAlive(b)
		return 0
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 98
	}
	gc := exec.Command(exe)
	gc.Env = append(os.Environ(), childModeEnv+"=hold-memory")
	gc.Stdout, gc.Stderr = os.Stdout, os.Stderr
	if err := gc.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 98
	}
	for n := 0; !released(); n++ {
		for range 1 << 20 {
			n = n*31 + 7
		}
	}
	if err := gc.Wait(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 98
	}
	return 0
}

// scrape reads the value of the sample named by series (name and labels as
// the text format writes them) from the worker's /metrics, NaN if absent.
func scrape(t *testing.T, url, series string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatalf("get /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read /metrics: %v", err)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return math.NaN()
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatalf("%s: %v", series, err)
	}
	return v
}

// masterJSONUsage is the part of the master's /json this test reads.
type masterJSONUsage struct {
	Workers []struct {
		ID         string  `json:"id"`
		CPUSeconds float64 `json:"cpuseconds"`
		Memory     int64   `json:"memorybytes"`
	} `json:"workers"`
	ActiveApps []struct {
		ID         string  `json:"id"`
		CPUSeconds float64 `json:"cpuseconds"`
		Memory     int64   `json:"memorybytes"`
		Executors  []struct {
			CPUSeconds float64 `json:"cpuseconds"`
			PeakBytes  int64   `json:"memorypeakbytes"`
		} `json:"executors"`
	} `json:"activeapps"`
}

func fetchMasterJSON(t *testing.T, url string) masterJSONUsage {
	t.Helper()
	resp, err := http.Get(url + "/json")
	if err != nil {
		t.Fatalf("get master /json: %v", err)
	}
	defer resp.Body.Close()
	var st masterJSONUsage
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("decode master /json: %v", err)
	}
	return st
}

// An executor's process tree is measured while it runs: the worker's
// /metrics and /json, and the master's /json per worker, application and
// executor, show CPU that grows while it spins and memory at least what its
// grandchild touched; once it ended its CPU stays counted and its memory
// is no longer current.
func TestUsageOfARunningExecutorTreeIsMeasuredAndReported(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c := startCluster(t, clusterConfig{
		master: master.Config{WorkerTimeout: 400 * time.Millisecond}, runMaster: true,
		worker: Config{UsageInterval: 20 * time.Millisecond},
	})
	w := c.worker
	appID := c.registerApp(t, executorCommand(t, "burn", 0), 1)
	c.waitMasterExecutor(t, appID, 0, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)
	dir := filepath.Join(w.cfg.WorkDir, appID, "0")
	waitFileContains(t, filepath.Join(dir, "stdout"), "holding")

	cpu := `glint_worker_children_cpu_seconds_total{process="executor"}`
	current := `glint_worker_children_memory_bytes{kind="current",process="executor"}`
	peak := `glint_worker_children_memory_bytes{kind="peak",process="executor"}`
	var first float64
	tooltest.Eventually(t, "the executor's tree holding its grandchild's memory in /metrics", func() bool {
		first = scrape(t, w.url, cpu)
		return scrape(t, w.url, current) >= heldBytes && scrape(t, w.url, peak) >= heldBytes && first > 0
	})
	tooltest.Eventually(t, "the executor's CPU seconds growing while it spins", func() bool {
		return scrape(t, w.url, cpu) >= first+0.2
	})
	if v := scrape(t, w.url, `glint_worker_children_cpu_seconds_total{process="driver"}`); v != 0 {
		t.Errorf("drivers' CPU %v with no driver running, want 0", v)
	}
	e, _ := w.executor(t, appID, 0)
	if e.CPUSeconds <= 0 || e.MemoryBytes < heldBytes || e.PeakBytes < e.MemoryBytes {
		t.Errorf("worker /json executor usage %+v: want CPU > 0 and current memory ≥ %d ≤ peak", e.usageJSON, heldBytes)
	}
	tooltest.Eventually(t, "the master's /json showing the usage per worker, application and executor", func() bool {
		st := fetchMasterJSON(t, c.masterURL)
		if len(st.Workers) != 1 || len(st.ActiveApps) != 1 || len(st.ActiveApps[0].Executors) != 1 {
			return false
		}
		wk, a := st.Workers[0], st.ActiveApps[0]
		return wk.CPUSeconds > 0 && wk.Memory >= heldBytes && a.CPUSeconds > 0 && a.Memory >= heldBytes &&
			a.Executors[0].CPUSeconds > 0 && a.Executors[0].PeakBytes >= heldBytes
	})

	before := scrape(t, w.url, cpu)
	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	e = w.waitFinishedExecutor(t, appID, 0)
	if e.MemoryBytes != 0 || e.PeakBytes < heldBytes || e.CPUSeconds < before {
		t.Errorf("finished executor's usage %+v: want no current memory, peak ≥ %d, CPU ≥ %v", e.usageJSON, heldBytes, before)
	}
	if v := scrape(t, w.url, current); v != 0 {
		t.Errorf("current memory %v with no executor running, want 0", v)
	}
	if v := scrape(t, w.url, cpu); v < e.CPUSeconds {
		t.Errorf("executors' CPU %v after the executor ended, want at least its %v", v, e.CPUSeconds)
	}
}

// What a process used after its last sample is not lost: once it ended,
// its exit status gives the CPU of its tree (the descendants it reaped) and
// its largest peak, though no sample was taken while it ran.
func TestAnExecutorsLastUsageComesFromItsExitStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c := startCluster(t, clusterConfig{worker: Config{UsageInterval: time.Hour}})
	w := c.worker
	appID := c.registerApp(t, executorCommand(t, "burn", 0), 1)
	c.waitMasterExecutor(t, appID, 0, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)
	dir := filepath.Join(w.cfg.WorkDir, appID, "0")
	waitFileContains(t, filepath.Join(dir, "stdout"), "holding")
	e, _ := w.executor(t, appID, 0)
	tooltest.Eventually(t, "the executor to spin for a fifth of a second", func() bool {
		st, err := readProcStat(fmt.Sprintf("/proc/%d/stat", e.PID))
		return err == nil && st.ticks >= clockTicks/5
	})
	if e.CPUSeconds != 0 || e.PeakBytes != 0 {
		t.Fatalf("usage %+v before any sample, want none", e.usageJSON)
	}
	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	e = w.waitFinishedExecutor(t, appID, 0)
	if e.CPUSeconds < 0.2 || e.PeakBytes < heldBytes || e.MemoryBytes != 0 {
		t.Errorf("finished executor's usage %+v: want CPU ≥ 0.2 s, peak ≥ %d, no current memory", e.usageJSON, heldBytes)
	}
	if v := scrape(t, w.url, `glint_worker_children_cpu_seconds_total{process="executor"}`); v != e.CPUSeconds {
		t.Errorf("executors' CPU %v, want the ended executor's %v", v, e.CPUSeconds)
	}
}

// A sample's CPU counts once; a restart (a new pid) counts from zero; CPU
// never goes back; the peak is the highest memory seen.
func TestMeasuredAddsCPUOnceAndKeepsThePeak(t *testing.T) {
	var m measured
	steps := []struct {
		pid       int
		u         usage
		wantDelta float64
		wantUsed  usage
	}{
		{10, usage{cpuSeconds: 2, memoryBytes: 100, peakBytes: 150}, 2, usage{2, 100, 150}},
		{10, usage{cpuSeconds: 3, memoryBytes: 50, peakBytes: 50}, 1, usage{3, 50, 150}},
		{10, usage{cpuSeconds: 1, memoryBytes: 200, peakBytes: 200}, 0, usage{3, 200, 200}},
		{10, usage{cpuSeconds: 3.5, memoryBytes: 200, peakBytes: 200}, 0.5, usage{3.5, 200, 200}},
		{11, usage{cpuSeconds: 1, memoryBytes: 10, peakBytes: 10}, 1, usage{4.5, 10, 200}},
	}
	for i, st := range steps {
		if d := m.addLocked(st.pid, st.u); d != st.wantDelta || m.used != st.wantUsed {
			t.Errorf("step %d: delta %v used %+v, want %v and %+v", i, d, m.used, st.wantDelta, st.wantUsed)
		}
	}
}

// readProcStat counts fields from the command name's last ')': a name with
// spaces and parentheses does not shift them.
func TestReadProcStatCountsFromTheLastParenthesis(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stat")
	line := "42 (a) b) (c) S 7 42 42 0 -1 4194304 99 0 0 0 11 22 33 44 20 0 1 0 424579 3133440 378\n"
	if err := os.WriteFile(path, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := readProcStat(path)
	if err != nil || st.ppid != 7 || st.ticks != 11+22+33+44 {
		t.Errorf("readProcStat = %+v, %v; want ppid 7, 110 ticks", st, err)
	}
}

// BenchmarkProcSourceMeasure is one sample of one process tree, the
// benchmark's own (one pass over /proc, whatever else runs on the machine).
func BenchmarkProcSourceMeasure(b *testing.B) {
	src := procSource{dir: "/proc"}
	pids := []int{os.Getpid()}
	for b.Loop() {
		if u := src.measure(pids); len(u) != 1 {
			b.Fatalf("measure = %v", u)
		}
	}
	entries, _ := os.ReadDir("/proc")
	b.ReportMetric(float64(len(entries)), "proc-entries")
}

// A cluster-mode driver's process tree is measured too: the worker's
// drivers' metrics and the master's view of the driver and its worker.
func TestUsageOfARunningDriverIsMeasuredAndReported(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c := startCluster(t, clusterConfig{
		master: master.Config{WorkerTimeout: 400 * time.Millisecond}, runMaster: true,
		worker: Config{UsageInterval: 20 * time.Millisecond},
	})
	w := c.worker
	resp, err := c.master.SubmitDriver(context.Background(), connect.NewRequest(&masterv1.SubmitDriverRequest{
		Description: &masterv1.DriverDescription{Name: "worker-test-driver", Cores: 1, MemoryMib: 64, Command: driverCommand(t, "burn")},
	}))
	if err != nil {
		t.Fatalf("submit driver: %v", err)
	}
	dir := filepath.Join(w.cfg.WorkDir, resp.Msg.GetDriverId())
	waitFileContains(t, filepath.Join(dir, "stdout"), "holding")
	tooltest.Eventually(t, "the driver's tree in /metrics", func() bool {
		return scrape(t, w.url, `glint_worker_children_cpu_seconds_total{process="driver"}`) > 0 &&
			scrape(t, w.url, `glint_worker_children_memory_bytes{kind="current",process="driver"}`) >= heldBytes
	})
	tooltest.Eventually(t, "the master showing the driver's usage and its worker's", func() bool {
		st := c.state(t)
		ds, ws := st.GetActiveDrivers(), st.GetWorkers()
		return len(ds) == 1 && ds[0].GetUsage().GetCpuSeconds() > 0 && ds[0].GetUsage().GetMemoryBytes() >= heldBytes &&
			len(ws) == 1 && ws[0].GetUsage().GetMemoryBytes() >= heldBytes
	})
	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
}
