package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/glint-cluster/glint/internal/jaeger"
	"github.com/glint-cluster/glint/internal/tooltest"
)

// scrape fetches a /metrics page as the Prometheus text format.
func scrape(t testing.TB, target string) string {
	t.Helper()
	resp, err := http.Get(target + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", target, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s %v", target, resp.Status, err)
	}
	return string(body)
}

// sample returns the value of the series name{labels}, and whether it exists.
func sample(t testing.TB, page, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(page))
	if err != nil {
		t.Fatalf("parse metrics: %v", err)
	}
	f, ok := families[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		for k, v := range labels {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue(), true
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

// waitForSample scrapes target until the series name (without labels) has value want.
func waitForSample(t testing.TB, target, name string, want float64) {
	t.Helper()
	var v float64
	if !tooltest.Poll(30*time.Second, 20*time.Millisecond, func() bool { v, _ = sample(t, scrape(t, target), name, nil); return v == want }) {
		t.Fatalf("%s at %s is %v after 30s, want %v", name, target, v, want)
	}
}

// promtoolCheck runs `promtool check metrics` (promtool from tools/go.mod) on a page.
func promtoolCheck(t testing.TB, what, page string) {
	t.Helper()
	cmd := exec.Command(tooltest.Binary(t, "tools/go.mod", "promtool"), "check", "metrics")
	cmd.Stdin = strings.NewReader(page)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics on %s: %v\n%s", what, err, out)
	}
}

// sdGroup is one target group of the master's /sd.
type sdGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

func discover(t testing.TB, masterURL string) []sdGroup {
	t.Helper()
	resp, err := http.Get(masterURL + "/sd")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var groups []sdGroup
	if err := json.NewDecoder(resp.Body).Decode(&groups); err != nil {
		t.Fatal(err)
	}
	return groups
}

func byRole(groups []sdGroup, role string) []sdGroup {
	var out []sdGroup
	for _, g := range groups {
		if g.Labels["role"] == role {
			out = append(out, g)
		}
	}
	return out
}

// runInBackground starts a glint client command and returns a wait function.
func runInBackground(t testing.TB, env []string, args ...string) (wait func() (string, error)) {
	t.Helper()
	cmd := exec.Command(glintBin, args...)
	cmd.Env = append(cmd.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var err error
	go func() { err = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-done
	})
	return func() (string, error) {
		<-done
		if err != nil {
			return out.String(), fmt.Errorf("%v: %w\n%s", args, err, out.String())
		}
		return out.String(), nil
	}
}

func TestMetricsFollowTheClusterAndPassPromtool(t *testing.T) {
	t.Parallel()
	// Long enough that a worker slowed by a loaded machine does not time out
	// before the test stops one on purpose.
	c := startCluster(t, 2, "--worker-timeout", "6s")
	// Each executor holds one task until the checks are done.
	release := filepath.Join(t.TempDir(), "release")
	wait := runInBackground(t, nil, "submit", "--master", c.master.url, "--executor-cores", "1",
		"--executor-memory", "256m", "--total-executor-cores", "4", "--log-level", "warn", "hold", release, "4")
	s := c.waitFor(t, "four executors running", func(s masterJSON) bool {
		running := 0
		for _, a := range s.ActiveApps {
			for _, e := range a.Executors {
				if e.State == "RUNNING" {
					running++
				}
			}
		}
		return running == 4
	})
	page := scrape(t, c.master.url)
	if v, _ := sample(t, page, "glint_master_workers", map[string]string{"state": "alive"}); v != 2 {
		t.Errorf("glint_master_workers{state=alive} = %v, want 2", v)
	}
	perWorker := map[string]int{}
	for _, e := range s.ActiveApps[0].Executors {
		if e.State == "RUNNING" {
			perWorker[e.Worker]++
		}
	}
	for _, w := range s.Workers {
		if v, _ := sample(t, page, "glint_master_worker_cores", map[string]string{"worker": w.ID, "state": "used"}); int(v) != perWorker[w.ID] {
			t.Errorf("master: worker %s uses %v cores, its running executors have %d", w.ID, v, perWorker[w.ID])
		}
	}
	// Every process's /metrics, found as Prometheus would through /sd, passes promtool.
	groups := discover(t, c.master.url)
	if n := len(byRole(groups, "executor")); n != 4 {
		t.Errorf("/sd lists %d executors while 4 run", n)
	}
	if len(byRole(groups, "worker")) != 2 || len(byRole(groups, "driver")) != 1 {
		t.Errorf("/sd groups %+v; want 2 workers and 1 driver", groups)
	}
	promtoolCheck(t, "master", page)
	for _, g := range groups {
		target := "http://" + g.Targets[0]
		if g.Labels["role"] == "executor" {
			// Four one-core executors, four held tasks: each gets one once it registered.
			waitForSample(t, target, "glint_executor_tasks_running", 1)
		}
		p := scrape(t, target)
		if g.Labels["role"] == "executor" {
			// One core: as many Ps, whatever the machine has.
			if v, _ := sample(t, p, "go_sched_gomaxprocs_threads", nil); v != 1 {
				t.Errorf("executor %s: GOMAXPROCS %v, want its one core", target, v)
			}
		}
		promtoolCheck(t, g.Labels["role"]+" "+target, p)
		if g.Labels["role"] == "worker" {
			if v, _ := sample(t, p, "glint_worker_cores", map[string]string{"state": "used"}); int(v) != perWorker[g.Labels["worker"]] {
				t.Errorf("worker %s reports %v cores used, want %d", g.Labels["worker"], v, perWorker[g.Labels["worker"]])
			}
		}
	}

	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
	c.waitFor(t, "app completed", func(s masterJSON) bool { return len(s.CompletedApps) == 1 })
	page = scrape(t, c.master.url)
	// Its end and its executors' are counted once each.
	for _, want := range []struct {
		name   string
		labels map[string]string
		value  float64
	}{
		{"glint_master_apps_ended_total", map[string]string{"state": "finished"}, 1},
		{"glint_master_apps_ended_total", map[string]string{"state": "failed"}, 0},
		{"glint_master_executor_launch_failures_total", map[string]string{"step": "unknown"}, 0},
	} {
		if got, _ := sample(t, page, want.name, want.labels); got != want.value {
			t.Errorf("%s%v = %v after the app finished, want %v", want.name, want.labels, got, want.value)
		}
	}
	// Its executors exited as the driver stopped them, or were killed with
	// the application the driver unregistered before their worker said so.
	exited, _ := sample(t, page, "glint_master_executor_ends_total", map[string]string{"state": "exited", "reason": "exited"})
	killed, _ := sample(t, page, "glint_master_executor_ends_total", map[string]string{"state": "killed", "reason": "killed"})
	if exited+killed != 4 {
		t.Errorf("executor ends: %v exited, %v killed; want the 4 executors", exited, killed)
	}
	for _, w := range s.Workers {
		if v, _ := sample(t, page, "glint_master_worker_cores", map[string]string{"worker": w.ID, "state": "used"}); v != 0 {
			t.Errorf("worker %s still uses %v cores after the app ended", w.ID, v)
		}
	}
	if n := len(byRole(discover(t, c.master.url), "executor")); n != 0 {
		t.Errorf("/sd still lists %d executors after the app ended", n)
	}

	// A stopped worker times out.
	stopped := c.workers[0].cmd.Process.Pid
	if err := syscall.Kill(stopped, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(stopped, syscall.SIGCONT) })
	c.waitFor(t, "the stopped worker dead", func(s masterJSON) bool { return s.alive() == 1 })
	page = scrape(t, c.master.url)
	if v, _ := sample(t, page, "glint_master_worker_timeouts_total", nil); v != 1 {
		t.Errorf("glint_master_worker_timeouts_total = %v, want 1", v)
	}
	stoppedID := c.state(t).Workers[0].ID
	for _, w := range c.state(t).Workers {
		if w.State == "DEAD" {
			stoppedID = w.ID
		}
	}
	if v, ok := sample(t, page, "glint_master_worker_timed_out_timestamp_seconds", map[string]string{"worker": stoppedID}); !ok || time.Since(time.Unix(int64(v), 0)) > time.Minute {
		t.Errorf("glint_master_worker_timed_out_timestamp_seconds{worker=%s} = %v (%v), want when it timed out", stoppedID, v, ok)
	}
	if v, _ := sample(t, page, "glint_master_worker_timeout_seconds", nil); v != 6 {
		t.Errorf("glint_master_worker_timeout_seconds = %v, want --worker-timeout 6s", v)
	}
	if v, _ := sample(t, page, "glint_master_workers", map[string]string{"state": "dead"}); v != 1 {
		t.Errorf("glint_master_workers{state=dead} = %v, want 1", v)
	}
	_ = syscall.Kill(stopped, syscall.SIGCONT)
}

// exemplarTraceIDs scrapes target in OpenMetrics and returns the trace ids of
// the exemplars on metric's buckets.
func exemplarTraceIDs(t testing.TB, target, metric string) []string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, target+"/metrics", nil)
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	re := regexp.MustCompile(`(?m)^` + metric + `_bucket\{[^}]*\} \S+ # \{trace_id="([0-9a-f]{32})"\}`)
	var ids []string
	for _, m := range re.FindAllStringSubmatch(string(body), -1) {
		ids = append(ids, m[1])
	}
	return ids
}

func TestLaunchExemplarsCarryTheLaunchesTraceID(t *testing.T) {
	t.Parallel()
	j := startJaeger(t)
	c := startClusterWithEnv(t, j.env(), 1)
	// The executors hold their tasks until the exemplars were seen.
	release := filepath.Join(t.TempDir(), "release")
	wait := runInBackground(t, j.env(), "submit", "--master", c.master.url, "--executor-cores", "1",
		"--executor-memory", "256m", "--total-executor-cores", "2", "--log-level", "warn", "hold", release, "2")
	s := c.waitFor(t, "app running with a trace id", func(s masterJSON) bool {
		return len(s.ActiveApps) == 1 && s.ActiveApps[0].TraceID != "" && len(s.ActiveApps[0].Executors) == 2
	})
	traceID := s.ActiveApps[0].TraceID
	var driver string
	for _, g := range byRole(discover(t, c.master.url), "driver") {
		driver = "http://" + g.Targets[0]
	}
	var driverIDs, workerIDs, masterIDs []string
	tooltest.Poll(20*time.Second, 100*time.Millisecond, func() bool {
		driverIDs = exemplarTraceIDs(t, driver, "glint_driver_executor_launch_seconds")
		workerIDs = exemplarTraceIDs(t, c.workers[0].url, "glint_worker_process_start_seconds")
		masterIDs = exemplarTraceIDs(t, c.master.url, "glint_master_executor_start_seconds")
		return len(driverIDs) > 0 && len(workerIDs) > 0 && len(masterIDs) > 0
	})
	for what, ids := range map[string][]string{"driver launch": driverIDs, "worker process start": workerIDs, "master executor start": masterIDs} {
		if len(ids) == 0 {
			t.Errorf("no exemplar on the %s histogram", what)
		}
		for _, id := range ids {
			if id != traceID {
				t.Errorf("%s exemplar trace id %s, want the app's %s", what, id, traceID)
			}
		}
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
	// The trace the exemplar names is a real one, with the executors' launches in it.
	j.waitForTrace(t, traceID, func(tr *jaeger.Trace) bool {
		return count(tr, func(s jaeger.Span) bool { return s.OperationName == "process.start" }) == 2
	})
}

// pyroscopeReceiver stands in for Pyroscope's ingest endpoint and keeps what arrives.
type pyroscopeReceiver struct {
	mu      sync.Mutex
	uploads []pyroscopeUpload
}

type pyroscopeUpload struct {
	name    string
	profile *profile.Profile
	err     error
}

func (r *pyroscopeReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	up := pyroscopeUpload{name: req.URL.Query().Get("name")}
	up.profile, up.err = readProfile(req)
	r.mu.Lock()
	r.uploads = append(r.uploads, up)
	r.mu.Unlock()
}

func readProfile(req *http.Request) (*profile.Profile, error) {
	if req.URL.Path != "/ingest" {
		return nil, fmt.Errorf("upload to %s, want /ingest", req.URL.Path)
	}
	_, params, err := mime.ParseMediaType(req.Header.Get("Content-Type"))
	if err != nil {
		return nil, err
	}
	mr := multipart.NewReader(req.Body, params["boundary"])
	for {
		part, err := mr.NextPart()
		if err != nil {
			return nil, fmt.Errorf("no profile part: %w", err)
		}
		if part.FormName() == "profile" {
			return profile.Parse(part)
		}
	}
}

func TestProcessesPushProfilesWithTheirNameAndTags(t *testing.T) {
	t.Parallel()
	receiver := &pyroscopeReceiver{}
	srv := httptest.NewServer(receiver)
	defer srv.Close()
	c := startCluster(t, 0)
	w := start(t, "profiled-worker", []string{"PYROSCOPE_SERVER_ADDRESS=" + srv.URL}, "worker", "--master", c.master.url,
		"--listen", "127.0.0.1:0", "--cores", "1", "--memory", "1g", "--work-dir", t.TempDir())
	s := c.waitFor(t, "the worker registered", func(s masterJSON) bool { return s.alive() == 1 })
	w.stop(t) // stopping uploads the last profiles
	receiver.mu.Lock()
	defer receiver.mu.Unlock()
	good := 0
	for _, up := range receiver.uploads {
		if up.err != nil {
			t.Errorf("upload %s: %v", up.name, up.err)
			continue
		}
		if !strings.HasPrefix(up.name, "glint.worker") || !strings.Contains(up.name, "worker_id="+s.Workers[0].ID) {
			t.Errorf("upload named %q, want glint.worker with worker_id=%s", up.name, s.Workers[0].ID)
		}
		if len(up.profile.Sample) > 0 {
			good++
		}
	}
	if good == 0 {
		t.Errorf("%d uploads, none a profile with samples", len(receiver.uploads))
	}
}

func TestTheMasterCollectsGarbageAtGOGC200UnlessTheEnvironmentSaysOtherwise(t *testing.T) {
	t.Parallel()
	for env, want := range map[string]float64{"GOGC=": 200, "GOGC=100": 100} {
		m := start(t, "master", []string{env}, "master", "--listen", "127.0.0.1:0")
		if got, ok := sample(t, scrape(t, m.url), "go_gc_gogc_percent", nil); !ok || got != want {
			t.Errorf("a master started with %s: go_gc_gogc_percent %v (found: %v), want %v", env, got, ok, want)
		}
	}
}
