package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/chromedp/chromedp"
)

// A dynamic-allocation application that grows from one executor to two,
// and whose second is killed and replaced: its page draws each executor's
// launch from its own request, labelled with why it was asked for, with the
// numbers under the chart.
func TestWebUITimelineDrawsEachExecutorFromItsOwnRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("-short is the fast loop (make test-short); make test runs this: it starts a cluster and Chromium")
	}
	t.Parallel()
	c := startCluster(t, 2) // 4 cores
	dir := t.TempDir()
	tasksDone, appDone := filepath.Join(dir, "tasks"), filepath.Join(dir, "app")
	wait := runInBackground(t, nil, "submit", "--master", c.master.url, "--executor-cores", "1", "--executor-memory", "256m",
		"--conf", "spark.dynamicAllocation.enabled=true", "--conf", "spark.dynamicAllocation.initialExecutors=1",
		"--conf", "spark.dynamicAllocation.maxExecutors=2", "--conf", "spark.dynamicAllocation.schedulerBacklogTimeout=200ms",
		"--log-level", "warn", "hold", tasksDone, "4", appDone)
	s := c.waitFor(t, "two executors running", func(s masterJSON) bool { return sum(executorsOn(s, "RUNNING")) == 2 })
	app := s.ActiveApps[0].ID
	// The second executor's process is killed: one replaces it.
	var killed bool
	for _, w := range c.workers {
		for _, pid := range childrenOf(w.cmd.Process.Pid) {
			if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.Contains(string(cmdline), "--executor-id\x001\x00") && !killed {
				killed = syscall.Kill(pid, syscall.SIGKILL) == nil
			}
		}
	}
	if !killed {
		t.Fatal("no process of executor 1 found to kill")
	}
	c.waitFor(t, "a replacement running", func(s masterJSON) bool {
		return len(s.ActiveApps) == 1 && len(s.ActiveApps[0].Executors) == 3 && sum(executorsOn(s, "RUNNING")) == 2
	})

	// While it runs, its page refreshes itself; its Jobs tab shows its task
	// set running, the failed attempt of the killed executor's task among
	// its failures; its Executors tab what each executor ran.
	p := &pages{t: t, ctx: browser(t), dir: t.TempDir()}
	p.do("open the app", chromedp.Navigate(c.master.url+"/app/"+app+"?tab=jobs"))
	p.login()
	p.do("the jobs tab", chromedp.WaitVisible(chromedp.CSS("#task-sets")))
	p.shot("jobs")
	if n := eval[int](p, `document.querySelectorAll('#refresh').length`); n != 1 {
		t.Error("a running application's page does not refresh itself")
	}
	set := eval[[]string](p, `[...document.querySelector('#task-sets tr.task-set').cells].map(td => td.textContent)`)
	if len(set) < 9 || set[2] != "RUNNING" || set[3] != "0 / 4" || set[5] != "1" || !strings.Contains(set[8], "executor 1") {
		t.Errorf("task set row %q: want RUNNING, 0 of 4 succeeded, the killed executor's task's failed attempt", set)
	}
	p.do("the executors tab", chromedp.Navigate(c.master.url+"/app/"+app), chromedp.WaitVisible(chromedp.CSS("#executors")))
	ran := eval[map[string]string](p, `Object.fromEntries([...document.querySelectorAll('#executors tr.executor')].map(tr => [tr.dataset.executor, tr.querySelector('td.tasks-failed').textContent]))`)
	if ran["1"] != "1" || ran["0"] != "0" {
		t.Errorf("tasks failed per executor %q: want the killed executor's one", ran)
	}
	p.shot("executors")

	for _, f := range []string{tasksDone, appDone} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := wait(); err != nil {
		t.Fatalf("submit: %v\n%s", err, out)
	}

	p.do("the ended app", chromedp.Navigate(c.master.url+"/app/"+app))
	p.do("the timeline", chromedp.WaitVisible(chromedp.CSS("#timeline")))
	p.shot("timeline")
	rows := eval[[][]string](p, `[...document.querySelectorAll('#timeline g.executor')].map(g => [g.dataset.executor, g.dataset.cause, g.querySelector('rect.bar').dataset.phase, g.querySelector('rect.bar').getAttribute('x')])`)
	want := map[string]string{"0": "initial", "1": "dynamic allocation", "2": "replacement"}
	if len(rows) != len(want) {
		t.Fatalf("timeline rows %q, want one per executor, %d", rows, len(want))
	}
	// Every row starts with its schedule at the axis' start: its own request.
	start := rows[0][3]
	for _, r := range rows {
		if want[r[0]] != r[1] || r[2] != "schedule" || r[3] != start {
			t.Errorf("timeline row %q: want executor %s asked for as %q, its schedule first at x=%s", r, r[0], want[r[0]], start)
		}
	}
	// The numbers table has a line for each, with its phases and total.
	lines := eval[[][]string](p, `[...document.querySelectorAll('#launches tbody tr')].map(tr => [...tr.querySelectorAll('td')].map(td => td.textContent))`)
	if len(lines) != len(want) {
		t.Fatalf("numbers table %q, want a line per executor", lines)
	}
	for _, l := range lines {
		if l[1] != want[l[0]] || l[2] == "" || l[len(l)-2] == "" {
			t.Errorf("numbers table line %q: want its cause, its schedule and its total", l)
		}
	}
	// The killed executor ended unasked: its state shows as a failure; those
	// released as the application ended do not.
	states := eval[map[string]string](p, `Object.fromEntries([...document.querySelectorAll('#executors tr.executor')].map(tr => [tr.dataset.executor, tr.querySelector('td.state').className]))`)
	if !strings.Contains(states["0"], "asked") || strings.Contains(states["1"], "asked") || !strings.Contains(states["2"], "asked") {
		t.Errorf("executor states' classes %q: want 0 and 2 (ended as asked) apart from 1 (killed)", states)
	}
}
