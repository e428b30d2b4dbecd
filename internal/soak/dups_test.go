package soak

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

const launchHeader = "Launch command: \"glint\"\n========================================\n\n"

// writeLaunch writes a launch directory under a work dir: stdout with a
// header per launch and the given output after each.
func writeLaunch(t *testing.T, dir string, outputs ...string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, o := range outputs {
		b.WriteString(launchHeader + o)
	}
	if err := os.WriteFile(filepath.Join(dir, "stdout"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "stderr"), []byte(launchHeader), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestScanWorkDirsFindsAnExecutorLaunchedTwice(t *testing.T) {
	w0, w1 := t.TempDir(), t.TempDir()
	writeLaunch(t, filepath.Join(w0, "app-20261202000000-0001", "0"), "")
	writeLaunch(t, filepath.Join(w1, "app-20261202000000-0001", "1"), "")
	writeLaunch(t, filepath.Join(w0, ".spare-1", "run"), "")
	writeLaunch(t, filepath.Join(w0, "driver-20261202000000-0001"), "Pi is roughly 3.1\n")
	ok, err := ScanWorkDirs([]string{w0, w1})
	if err != nil {
		t.Fatal(err)
	}
	if vs := ok.ExecutorTwice(); len(vs) > 0 || len(ok.Executors) != 2 || len(ok.Drivers) != 1 {
		t.Fatalf("distinct executors: %v; read %d executors, %d drivers", vs, len(ok.Executors), len(ok.Drivers))
	}

	writeLaunch(t, filepath.Join(w1, "app-20261202000000-0001", "0"), "")     // in a second work dir
	writeLaunch(t, filepath.Join(w1, "app-20261202000000-0002", "0"), "", "") // twice in one
	bad, err := ScanWorkDirs([]string{w0, w1})
	if err != nil {
		t.Fatal(err)
	}
	vs := bad.ExecutorTwice()
	if len(vs) != 2 || !strings.Contains(vs[0].Detail, "app-20261202000000-0001/0") || !strings.Contains(vs[1].Detail, "app-20261202000000-0002/0") {
		t.Fatalf("executors launched twice: %v", vs)
	}
}

func TestCheckJobFindsWhatRanTwice(t *testing.T) {
	pi := Job{Name: "soak-file-0001-cluster-pi", Deploy: DeployCluster, App: "pi", Want: []string{"Pi is roughly 3.1"}}
	client := Job{Name: "soak-file-0002-client-pi", Deploy: DeployClient, App: "pi", Want: []string{"Pi is roughly 3.1"}}
	answer := "Pi is roughly 3.1\n"
	for _, c := range []struct {
		name   string
		job    Job
		stdout string              // a client's
		dirs   map[string][]string // driver id → its launches' outputs, in one work dir
		chain  []string
		apps   []string
		want   []string
	}{
		{name: "a client's answer", job: client, stdout: answer, apps: []string{"app-1"}},
		{name: "a client's answer twice", job: client, stdout: answer + answer, apps: []string{"app-1"}, want: []string{AppTwice}},
		{name: "a client registered twice", job: client, stdout: answer, apps: []string{"app-1", "app-2"}, want: []string{AppTwice}},
		{name: "a driver's answer", job: pi, dirs: map[string][]string{"driver-1-1": {answer}}, chain: []string{"driver-1-1"}, apps: []string{"app-1"}},
		{name: "a driver restarted after a failure", job: pi, dirs: map[string][]string{"driver-1-1": {"", answer}},
			chain: []string{"driver-1-1"}, apps: []string{"app-1", "app-2"}},
		{name: "a driver relaunched after its worker was lost", job: pi, dirs: map[string][]string{"driver-1-1": {""}, "driver-1-2": {answer}},
			chain: []string{"driver-1-1", "driver-1-2"}, apps: []string{"app-1", "app-2"}},
		{name: "a finished driver restarted", job: pi, dirs: map[string][]string{"driver-1-1": {answer, ""}},
			chain: []string{"driver-1-1"}, apps: []string{"app-1"}, want: []string{FinishedRelaunch}},
		{name: "a finished driver relaunched", job: pi, dirs: map[string][]string{"driver-1-1": {answer}, "driver-1-2": {answer}},
			chain: []string{"driver-1-1", "driver-1-2"}, apps: []string{"app-1", "app-2"}, want: []string{FinishedRelaunch}},
		{name: "more applications than launches", job: pi, dirs: map[string][]string{"driver-1-1": {answer}},
			chain: []string{"driver-1-1"}, apps: []string{"app-1", "app-2"}, want: []string{AppTwice}},
	} {
		w := WorkDirs{Drivers: map[string][]Launch{}}
		for id, outs := range c.dirs {
			w.Drivers[id] = []Launch{{WorkDir: "w", Stdout: launchHeader + strings.Join(outs, launchHeader), Launches: len(outs)}}
		}
		rec := JobRecord{Job: c.job, Chain: c.chain, Acknowledged: len(c.chain) > 0}
		if c.job.Deploy == DeployClient {
			rec.Result.Outputs = SplitOutput(c.stdout, false)
		} else {
			rec.Result.Outputs, _ = w.DriverOutputs(c.chain)
		}
		if got := kinds(CheckJob(rec, w, c.apps)); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	// A driver id in two work dirs, each with one launch.
	w := WorkDirs{Drivers: map[string][]Launch{"driver-1-1": {
		{WorkDir: "w0", Stdout: launchHeader + answer, Launches: 1}, {WorkDir: "w1", Stdout: launchHeader, Launches: 1}}}}
	rec := JobRecord{Job: pi, Chain: []string{"driver-1-1"}, Acknowledged: true}
	rec.Result.Outputs, _ = w.DriverOutputs(rec.Chain)
	if got := kinds(CheckJob(rec, w, []string{"app-1"})); !slices.Contains(got, DriverTwice) {
		t.Errorf("a driver in two work dirs: %v, want %s", got, DriverTwice)
	}
}

func TestAJobWhoseClientFailedButWhoseDriverRanIsFound(t *testing.T) {
	w0 := t.TempDir()
	header := "Launch command: \"glint\" \"driver\" \"--name\" \"soak-file-0030-cluster-wordcount\" \"wordcount\"\n" + strings.Repeat("=", 40) + "\n\n"
	dir := filepath.Join(w0, "driver-20261202034750-0012")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "stdout"), []byte(header+"alpha: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeLaunch(t, filepath.Join(w0, "driver-20261202034750-0013"), "")
	w, err := ScanWorkDirs([]string{w0})
	if err != nil {
		t.Fatal(err)
	}
	job := Job{Name: "soak-file-0030-cluster-wordcount", Deploy: DeployCluster, App: "wordcount", Want: []string{"alpha: 3"}}
	chain := w.DriversNamed(job.Name)
	if !slices.Equal(chain, []string{"driver-20261202034750-0012"}) {
		t.Fatalf("drivers named %s: %v", job.Name, chain)
	}
	rec := JobRecord{Job: job, Chain: chain}
	rec.Result.Outputs, _ = w.DriverOutputs(chain)
	if got := kinds(CheckJob(rec, w, []string{"app-1"})); !slices.Equal(got, []string{RanThoughFailed}) {
		t.Fatalf("a driver its client never heard of: %v", got)
	}
	rec.Acknowledged = true
	if got := kinds(CheckJob(rec, w, []string{"app-1"})); len(got) > 0 {
		t.Fatalf("a driver its client was told of: %v", got)
	}
}

func TestTwinsAreExecutorsThatTwoProcessesAre(t *testing.T) {
	procs := []Proc{
		{PID: 10, AppID: "app-1", ExecutorID: "0"},
		{PID: 11, AppID: "app-1", ExecutorID: "1"},
		{PID: 12, DriverID: "driver-1"},
		{PID: 13},
	}
	if tw := Twins(procs); len(tw) > 0 {
		t.Fatalf("twins among distinct executors: %v", tw)
	}
	tw := Twins(append(procs, Proc{PID: 14, AppID: "app-1", ExecutorID: "1"}))
	if len(tw) != 1 || tw[0].Key != "app-1/1" || !slices.Equal(tw[0].PIDs, []int{11, 14}) {
		t.Fatalf("twins %v", tw)
	}
	if v := tw[0].Violation(); v.Kind != ExecutorTwice {
		t.Fatalf("a twin's violation: %+v", v)
	}
}

func TestLeftoversAreReportedOnceAfterTheirGrace(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	l := Leftovers{Grace: 10 * time.Second}
	workers := map[int]bool{100: true}
	ended := func(app string) bool { return app == "app-ended" }
	procs := []Proc{
		{PID: 1, AppID: "app-running", ExecutorID: "0", WorkerPID: 100}, // fine
		{PID: 2, AppID: "app-running", ExecutorID: "1", WorkerPID: 200}, // its worker is gone
		{PID: 3, AppID: "app-ended", ExecutorID: "0", WorkerPID: 100},   // its application ended
		{PID: 4, DriverID: "driver-1", WorkerPID: 200},                  // its worker is gone
		{PID: 5}, // a client or a master
	}
	var got [][]int
	for _, dt := range []time.Duration{0, 5 * time.Second, 11 * time.Second, 30 * time.Second} {
		var pids []int
		for _, v := range l.Observe(t0.Add(dt), procs, workers, ended) {
			if v.Kind != LeftBehind {
				t.Fatalf("%+v", v)
			}
			for _, p := range procs {
				if strings.Contains(v.Detail, "pid "+strconv.Itoa(p.PID)+" ") {
					pids = append(pids, p.PID)
				}
			}
		}
		got = append(got, pids)
	}
	if want := [][]int{nil, nil, {2, 3, 4}, nil}; !slices.EqualFunc(got, want, slices.Equal[[]int]) {
		t.Fatalf("reported per scan %v, want %v", got, want)
	}
	// One that went away before its grace is not reported, and starts
	// afresh if it is seen again.
	l = Leftovers{Grace: 10 * time.Second}
	l.Observe(t0, procs[1:2], workers, ended)
	l.Observe(t0.Add(5*time.Second), nil, workers, ended)
	if vs := l.Observe(t0.Add(12*time.Second), procs[1:2], workers, ended); len(vs) > 0 {
		t.Fatalf("reported at once after it came back: %v", vs)
	}
}
