package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/glint-cluster/glint/internal/tooltest"
)

// busyBytes is what each task of the busy application touches and holds.
const busyBytes = 96 << 20

// usageJSON is the measured usage the master's /json shows for a worker,
// an application or an executor.
type usageJSON struct {
	CPUSeconds  float64 `json:"cpuseconds"`
	MemoryBytes int64   `json:"memorybytes"`
	PeakBytes   int64   `json:"memorypeakbytes"`
}

// usageState is the part of the master's /json this test reads.
type usageState struct {
	Workers []struct {
		ID string `json:"id"`
		usageJSON
	} `json:"workers"`
	ActiveApps []struct {
		ID string `json:"id"`
		usageJSON
		Executors []struct {
			Worker string `json:"worker"`
			usageJSON
		} `json:"executors"`
	} `json:"activeapps"`
}

// contained reports whether the cluster's first worker places its
// executors in cgroups.
func (c *testCluster) contained(t *testing.T) bool {
	t.Helper()
	resp := getPage(t, c.client, c.workers[0].url+"/json")
	defer resp.Body.Close()
	var w struct {
		Contained bool `json:"contained"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&w); err != nil {
		t.Fatal(err)
	}
	return w.Contained
}

func (c *testCluster) usage(t *testing.T) usageState {
	t.Helper()
	resp := getPage(t, c.client, c.master.url+"/json")
	defer resp.Body.Close()
	var s usageState
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// An executor that spins a core and holds 96 MiB is seen doing so: in its
// worker's /metrics, the master's /json (per worker, application and
// executor), `glint status` and the application's page.
func TestMeasuredUsageReachesMetricsStatusAndTheUI(t *testing.T) {
	if testing.Short() {
		t.Skip("-short is the fast loop (make test-short); make test runs this: it starts a cluster and Chromium")
	}
	t.Parallel()
	c := startSizedCluster(t, nil, 1, 2, []string{"--usage-interval", "100ms"}, "--worker-timeout", "2s")
	release := filepath.Join(t.TempDir(), "release")
	wait := runInBackground(t, nil, "submit", "--master", c.master.url, "--name", "busy", "--executor-cores", "1",
		"--total-executor-cores", "1", "--executor-memory", "256m", "--log-level", "warn", "busy", release, "96m", "1")

	var app string
	var executor usageJSON
	var s usageState
	if !tooltest.Poll(30*time.Second, 50*time.Millisecond, func() bool {
		s = c.usage(t)
		if len(s.ActiveApps) != 1 || len(s.ActiveApps[0].Executors) != 1 || len(s.Workers) != 1 {
			return false
		}
		a, w := s.ActiveApps[0], s.Workers[0]
		app, executor = a.ID, a.Executors[0].usageJSON
		return executor.CPUSeconds >= 1 && executor.PeakBytes >= busyBytes && a.CPUSeconds >= executor.CPUSeconds &&
			a.MemoryBytes >= busyBytes && w.CPUSeconds >= executor.CPUSeconds && w.MemoryBytes >= busyBytes
	}) {
		t.Fatalf("the master's /json never showed a second of CPU and %d bytes held: %+v", busyBytes, s)
	}

	page := scrape(t, c.workers[0].url)
	cpu, ok := sample(t, page, "glint_worker_children_cpu_seconds_total", map[string]string{"process": "executor"})
	if !ok || cpu < executor.CPUSeconds {
		t.Errorf("worker's executor CPU %v (present %v), want at least the %v the master saw", cpu, ok, executor.CPUSeconds)
	}
	if mem, ok := sample(t, page, "glint_worker_children_memory_bytes", map[string]string{"process": "executor", "kind": "current"}); !ok || mem < busyBytes {
		t.Errorf("worker's executor memory %v (present %v), want at least %d", mem, ok, busyBytes)
	}

	out, errOut, err := runGlint(t, "status", "--master", c.master.url, app)
	if err != nil {
		t.Fatalf("glint status %s: %v\n%s", app, err, errOut)
	}
	if !strings.Contains(out, "CPU USED / GRANTED") || !regexp.MustCompile(`\d+\.\d\d / 1 cores \(\d+\.\d s\)\s+(9[6-9]|\d{3,})\.\d MiB / 256\.0 MiB`).MatchString(out) {
		t.Errorf("glint status %s shows no CPU used against 1 core and a peak of at least 96 MiB against 256 MiB:\n%s", app, out)
	}
	out, errOut, err = runGlint(t, "status", "--master", c.master.url)
	if err != nil || !strings.Contains(out, "MEASURED CPU") {
		t.Errorf("glint status: %v, want a MEASURED CPU column:\n%s%s", err, out, errOut)
	}

	p := &pages{t: t, ctx: browser(t), dir: t.TempDir()}
	p.do("open the app", chromedp.Navigate(c.master.url+"/app/"+app))
	p.login()
	p.do("app page", chromedp.WaitVisible(chromedp.CSS("#executors")))
	cells := eval[[]string](p, `[...document.querySelectorAll('#executors tr.executor td.cpu, #executors tr.executor td.memory-peak')].map(td => td.textContent)`)
	if len(cells) != 2 || !strings.Contains(cells[0], "/ 1 cores") || !strings.HasSuffix(cells[1], "/ 256.0 MiB") {
		t.Errorf("executor row's CPU and memory peak cells %q, want CPU against 1 core and peak against 256.0 MiB", cells)
	}
	var peak float64
	if len(cells) == 2 {
		fmt.Sscanf(cells[1], "%f MiB", &peak)
	}
	if peak < busyBytes>>20 {
		t.Errorf("peak shown %q, want at least 96 MiB", cells)
	}
	p.shot("app-usage")
	// The worker's page shows each executor's CPU and memory now and at peak.
	p.do("open the worker", chromedp.Navigate(c.workers[0].url+"/"))
	p.login()
	p.do("worker page", chromedp.WaitVisible(chromedp.CSS("#executors")))
	cells = eval[[]string](p, `[...document.querySelectorAll('#executors tr.executor td.cpu, #executors tr.executor td.memory-used')].map(td => td.textContent)`)
	var now, atPeak float64
	if len(cells) == 2 {
		fmt.Sscanf(cells[1], "%f MiB / %f MiB", &now, &atPeak)
	}
	if len(cells) != 2 || cells[0] == "0.0 s" || now < busyBytes>>20 || atPeak < now {
		t.Errorf("worker page's executor CPU and memory cells %q, want CPU used and at least 96 MiB now and at peak", cells)
	}
	p.shot("worker-usage")

	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := wait(); err != nil {
		t.Fatalf("busy: %v\n%s", err, out)
	}
}

// alloc in executors whose memory limit is below what a task touches: each
// executor its task runs in is killed at its own limit and ends FAILED
// saying so, and no other executor fails with it; spin's tasks
// each burn a core for the time asked and the application says so.
func TestAllocPastItsMemoryLimitEndsItsExecutorOutOfMemoryAndSpinBurnsCores(t *testing.T) {
	if testing.Short() {
		t.Skip("-short is the fast loop (make test-short); make test runs this: it starts a cluster")
	}
	t.Parallel()
	c := startSizedCluster(t, nil, 1, 2, nil)
	if !c.contained(t) {
		t.Skip("the worker runs its executors unconfined here (no writable cgroup hierarchy): no memory limit to exceed")
	}
	out, errOut, err := runGlint(t, "submit", "--master", c.master.url, "--name", "alloc", "--executor-cores", "1",
		"--total-executor-cores", "2", "--executor-memory", "128m", "--log-level", "warn", "alloc", "512m", "1")
	if err == nil {
		t.Fatalf("alloc 512m in 128m executors succeeded:\n%s", out)
	}
	s := c.waitFor(t, "the alloc application ended", func(s masterJSON) bool { return len(s.CompletedApps) == 1 })
	a := s.CompletedApps[0]
	var first string
	for _, e := range a.Executors {
		if e.ID == 0 || e.ID == 1 {
			if strings.HasPrefix(e.Message, "killed: memory limit ") && strings.Contains(e.Message, " exceeded (peak ") && e.State == "FAILED" {
				first = e.Message
				break
			}
		}
	}
	if first == "" {
		t.Fatalf("no executor of %s ended FAILED \"killed: memory limit … exceeded (peak …)\": %+v\n%s", a.ID, a.Executors, errOut)
	}
	t.Logf("%s ended %s %q; its first executor to run alloc: %q", a.ID, a.State, a.StatusMessage, first)
	// No executor failed with another's end: each that failed ran the task
	// past its own limit (the rest were killed as the application ended).
	for _, e := range a.Executors {
		if e.State == "FAILED" && !strings.HasPrefix(e.Message, "killed: memory limit ") {
			t.Errorf("executor %d of %s FAILED with %q, not by its own memory limit", e.ID, a.ID, e.Message)
		}
	}
	page := scrape(t, c.master.url)
	if n, ok := sample(t, page, "glint_master_executor_ends_total", map[string]string{"state": "failed", "reason": "oom"}); !ok || n < 1 {
		t.Errorf("glint_master_executor_ends_total{state=FAILED,reason=oom} %v (present %v), want at least 1", n, ok)
	}

	out, errOut, err = runGlint(t, "submit", "--master", c.master.url, "--name", "spin", "--executor-cores", "1",
		"--total-executor-cores", "2", "--log-level", "warn", "spin", "0.5", "2")
	if err != nil || !strings.Contains(out, "Spun 2 tasks for 500ms each") {
		t.Fatalf("spin 0.5 2: %v\n%s%s", err, out, errOut)
	}
}
