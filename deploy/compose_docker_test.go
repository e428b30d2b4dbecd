package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"

	"github.com/glint-cluster/glint/internal/jaeger"
	"github.com/glint-cluster/glint/internal/tooltest"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry"
)

// composeTestEnv is set by make compose-test, which runs
// TestComposeStackInDocker: it needs a Docker engine (started when none
// answers) and builds every image, so plain go test skips it.
const composeTestEnv = "GLINT_COMPOSE_TEST"

// composeProject is the compose project the test runs: not the file's own
// name (glint), so that it never touches a user's stack on the same engine.
const composeProject = "glint-compose-test"

// notRun are the compose services the test neither builds nor runs:
// Grafana and Pyroscope are AGPL-licensed. Their provisioning is checked
// without them (dashboards/, deploy/grafana by TestAddressesNameListeningServices).
var notRun = []string{"grafana", "pyroscope"}

// testWorkerTimeout is the master's --worker-timeout in the test's compose
// override: a killed worker times out within the test.
const testWorkerTimeout = "10s"

// stack is docker-compose.yml run by the compose CLI on a Docker engine,
// with an override file holding the test's changes (override).
type stack struct {
	*dockerHost
	files     []string // compose files: docker-compose.yml, the override
	token     string   // the cluster token (GLINT_CLUSTER_TOKEN)
	tokenFile string   // the same, for glint on the host
	glint     string   // glint built as the Dockerfile builds it, for this machine
	services  []string // what the test runs, without the ha profile's
	ha        []string // the ha profile's services
	down      sync.Once
}

// compose is `docker compose` with the project, the files and both profiles.
func (s *stack) compose(args ...string) []string {
	out := []string{"compose", "-p", composeProject}
	for _, f := range s.files {
		out = append(out, "-f", f)
	}
	return append(append(out, "--profile", "demo", "--profile", "ha"), args...)
}

func (s *stack) composeOutput(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return s.output(ctx, s.root, "docker", s.compose(args...)...)
}

// removeProject removes the project's containers, networks and volumes.
func (s *stack) removeProject() {
	if out, err := s.composeOutput("down", "--volumes", "--remove-orphans", "--timeout", "5"); err != nil {
		fmt.Fprintf(os.Stderr, "docker compose down: %v\n%s", err, out)
	}
}

// takeDown removes the project, once.
func (s *stack) takeDown() { s.down.Do(s.removeProject) }

// container is the id of service's container.
func (s *stack) container(t *testing.T, service string) string {
	t.Helper()
	out, err := s.composeOutput("ps", "--all", "-q", service)
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(out)
	if id == "" || strings.Contains(id, "\n") {
		t.Fatalf("service %s: containers %q, want one", service, id)
	}
	return id
}

// hostname is the host name of service's container (its spans' host.name).
func (s *stack) hostname(t *testing.T, service string) string {
	t.Helper()
	out, err := s.output(context.Background(), "", "docker", "inspect", "--format", "{{.Config.Hostname}}", s.container(t, service))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// address is service's container's IP address on the project's network.
func (s *stack) address(t *testing.T, service string) string {
	t.Helper()
	out, err := s.output(context.Background(), "", "docker", "inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", s.container(t, service))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(out)
	if len(f) != 1 {
		t.Fatalf("service %s: addresses %q, want one network's", service, out)
	}
	return f[0]
}

// psEntry is a line of `docker compose ps --format json`.
type psEntry struct {
	Service, State, Health string
}

func (s *stack) ps() (map[string]psEntry, error) {
	out, err := s.composeOutput("ps", "--all", "--format", "json")
	if err != nil {
		return nil, err
	}
	got := map[string]psEntry{}
	out = strings.TrimSpace(out)
	if strings.HasPrefix(out, "[") {
		var all []psEntry
		if err := json.Unmarshal([]byte(out), &all); err != nil {
			return nil, err
		}
		for _, e := range all {
			got[e.Service] = e
		}
		return got, nil
	}
	for line := range strings.Lines(out) {
		var e psEntry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			return nil, fmt.Errorf("docker compose ps: %w: %s", err, line)
		}
		got[e.Service] = e
	}
	return got, nil
}

// logsOnFailure prints the services' logs if t fails, before the stack
// goes down.
func (s *stack) logsOnFailure(t *testing.T) {
	t.Cleanup(func() {
		if t.Failed() {
			s.logs(t)
		}
	})
}

// logs prints the last lines of every service's log.
func (s *stack) logs(t *testing.T) {
	out, _ := s.composeOutput("ps", "--all")
	t.Logf("docker compose ps:\n%s", out)
	out, _ = s.composeOutput("logs", "--no-color", "--tail", "40")
	t.Logf("docker compose logs (last 40 lines each):\n%s", out)
}

// glintCmd runs glint on the host against the published master port.
func (s *stack) glintCmd(ctx context.Context, args ...string) (string, error) {
	return s.output(ctx, s.root, s.glint, args...)
}

// exec runs glint in service's container (the image has no shell).
func (s *stack) exec(service string, args ...string) (string, error) {
	return s.composeOutput(append([]string{"exec", "-T", service, "glint"}, args...)...)
}

// await retries f every half second until it succeeds or d has passed.
func await(t *testing.T, what string, d time.Duration, f func() error) {
	t.Helper()
	start := time.Now()
	var err error
	if !tooltest.Poll(d, 500*time.Millisecond, func() bool { err = f(); return err == nil }) {
		t.Fatalf("%s: not within %s: %v", what, d, err)
	}
	t.Logf("%s: after %s", what, time.Since(start).Round(100*time.Millisecond))
}

// clusterJSON is the part of the master's /json the test reads.
type clusterJSON struct {
	Status  string
	Workers []struct {
		ID, Host, State string
	}
	ActiveApps, CompletedApps []struct {
		ID, Name, State, TraceID string
		Executors                []struct {
			ID            int32
			Worker, State string
		}
	}
	ActiveDrivers, CompletedDrivers []struct {
		ID, Name, State, Worker string
	}
}

const publishedMaster = "http://127.0.0.1:7077"

func (s *stack) cluster() (clusterJSON, error) {
	var c clusterJSON
	err := getJSONWith(publishedMaster+"/json", s.token, &c)
	return c, err
}

// override is the test's compose override file, written from the compose
// file itself: the master's --worker-timeout shortened, the dependencies on
// services the test does not run dropped, and no Pyroscope address for the
// glint services (there is none to push profiles to).
func override(t *testing.T, services map[string]bool) string {
	t.Helper()
	p := loadCompose(t, "demo", "ha")
	var b strings.Builder
	b.WriteString("# make compose-test's changes to docker-compose.yml (deploy/compose_docker_test.go).\nservices:\n")
	for _, name := range p.ServiceNames() {
		sv := p.Services[name]
		if !services[name] {
			continue
		}
		var lines []string
		if name == "master" {
			cmd, _ := json.Marshal(append(slices.Clone([]string(sv.Command)), "--worker-timeout", testWorkerTimeout))
			lines = append(lines, "command: "+string(cmd))
		}
		deps := map[string]map[string]string{}
		dropped := false
		for dep, d := range sv.DependsOn {
			if slices.Contains(notRun, dep) {
				dropped = true
				continue
			}
			deps[dep] = map[string]string{"condition": d.Condition}
		}
		if dropped {
			j, _ := json.Marshal(deps)
			lines = append(lines, "depends_on: !override "+string(j))
		}
		if _, ok := sv.Environment["PYROSCOPE_SERVER_ADDRESS"]; ok {
			lines = append(lines, `environment: {PYROSCOPE_SERVER_ADDRESS: ""}`)
		}
		if len(lines) > 0 {
			fmt.Fprintf(&b, "  %s:\n", name)
			for _, l := range lines {
				fmt.Fprintf(&b, "    %s\n", l)
			}
		}
	}
	return b.String()
}

// docker-compose.yml as users run it: the compose CLI on a Docker engine,
// every image built here (.env's image variables pointed at local builds,
// deploy/images), checked from the host. The test's only changes are in
// its override file (override) and GLINT_TRACE_SAMPLING_PERCENTAGE=100, so
// that the demo's trace is kept. Grafana and Pyroscope are not run.
func TestComposeStackInDocker(t *testing.T) {
	if os.Getenv(composeTestEnv) == "" {
		t.Skip("make compose-test runs this test (Docker, every image built here): set " + composeTestEnv + "=1")
	}
	h := newDockerHost(t)
	s := &stack{dockerHost: h, token: rpc.NewToken()}

	// Whatever ends the test — success, failure, an interrupt — the stack
	// goes down and the daemon it started stops.
	var once sync.Once
	teardown := func() { once.Do(func() { s.takeDown(); h.stop() }) }
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		if sig, ok := <-sigs; ok {
			fmt.Fprintf(os.Stderr, "%v: taking the stack down\n", sig)
			teardown()
			os.Exit(1)
		}
	}()
	t.Cleanup(func() {
		signal.Stop(sigs)
		close(sigs)
		teardown()
	})

	project := loadCompose(t, "demo", "ha")
	envFile := project.Environment
	run := map[string]bool{}
	for _, name := range project.ServiceNames() {
		if !slices.Contains(notRun, name) {
			run[name] = true
		}
	}
	for _, name := range project.ServiceNames() {
		if !run[name] {
			continue
		}
		if slices.Contains(project.Services[name].Profiles, "ha") {
			s.ha = append(s.ha, name)
		} else {
			s.services = append(s.services, name)
		}
	}
	t.Logf("running %v, then the ha profile's %v; not %v: Grafana and Pyroscope are AGPL-licensed and are neither built nor run here (their provisioning is checked statically)",
		s.services, s.ha, notRun)

	dir := t.TempDir()
	s.tokenFile = filepath.Join(dir, "cluster.token")
	if err := os.WriteFile(s.tokenFile, []byte(s.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	overrideFile := filepath.Join(h.cache, "override.yml")
	if err := os.WriteFile(overrideFile, []byte(override(t, run)), 0o644); err != nil {
		t.Fatal(err)
	}
	s.files = []string{filepath.Join(h.root, "docker-compose.yml"), overrideFile}
	// Nothing of the shell's environment changes what .env sets.
	h.env = slices.DeleteFunc(h.env, func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		_, ok := envFile[k]
		return ok || k == clusterTokenEnv
	})
	h.env = append(h.env, clusterTokenEnv+"="+s.token, "GLINT_TRACE_SAMPLING_PERCENTAGE=100")

	h.engine(t)
	h.plugins(t)
	// What a killed run left.
	s.removeProject()

	h.env = append(h.env, h.localImages(t, envFile)...)
	s.glint = glintBinary(t)

	t.Log("building glint's images with docker compose (the Dockerfile, on the local bases)")
	h.run(t, h.root, nil, "docker", s.compose("--progress=plain", "build", "master", "etcd")...)
	h.run(t, h.root, nil, "docker", s.compose(append([]string{"up", "--detach", "--wait", "--wait-timeout", "300"}, s.services...)...)...)

	t.Run("every service is healthy and glint status lists two alive workers", func(t *testing.T) { s.checkHealthy(t, project.Services) })
	appID := ""
	t.Run("the demo's pi finishes with π", func(t *testing.T) { appID = s.checkDemo(t) })
	t.Run("its trace reaches Jaeger through the collector and glint trace shows every executor's launch", func(t *testing.T) {
		if appID == "" {
			t.Skip("no demo application finished")
		}
		s.checkTrace(t, appID)
	})
	t.Run("a killed worker: its executors scraped before, GlintWorkerTimedOut fires, its tasks finish elsewhere", s.checkKilledWorker)
	t.Run("the ha profile: a killed leader's standby leads within the lease, a submission during the failover lands once", s.checkHA)
	t.Run("docker compose down -v leaves nothing of the project", s.checkDown)
}

func (s *stack) checkHealthy(t *testing.T, services types.Services) {
	s.logsOnFailure(t)
	await(t, "every service running, healthy where it has a healthcheck", 5*time.Minute, func() error {
		ps, err := s.ps()
		if err != nil {
			return err
		}
		for _, name := range s.services {
			e := ps[name]
			hc := services[name].HealthCheck
			if e.State != "running" || (hc != nil && !hc.Disable && e.Health != "healthy") {
				return fmt.Errorf("service %s: %s %s", name, e.State, e.Health)
			}
		}
		return nil
	})
	await(t, "glint status lists worker-1 and worker-2 alive", 2*time.Minute, func() error {
		out, err := s.glintCmd(context.Background(), "status", "--master", publishedMaster, "--token-file", s.tokenFile)
		if err != nil {
			return err
		}
		alive := aliveWorkers(out)
		if !slices.Equal(alive, []string{"worker-1:7078", "worker-2:7078"}) {
			return fmt.Errorf("alive workers %v in:\n%s", alive, out)
		}
		return nil
	})
}

// aliveWorkers are the addresses of the ALIVE rows of glint status's
// Workers table.
func aliveWorkers(status string) []string {
	var out []string
	in := false
	for line := range strings.Lines(status) {
		f := strings.Fields(line)
		switch {
		case strings.TrimSpace(line) == "Workers":
			in = true
		case len(f) == 0 || f[0] == "Applications":
			in = in && len(f) == 0 && len(out) == 0
		case in && len(f) > 2 && f[2] == "ALIVE":
			out = append(out, f[1])
		}
	}
	slices.Sort(out)
	return out
}

var piLine = regexp.MustCompile(`Pi is roughly ([0-9.]+)`)

// checkDemo waits for a pi of the demo's to finish and returns its id.
func (s *stack) checkDemo(t *testing.T) string {
	s.logsOnFailure(t)
	var app string
	await(t, "a demo pi FINISHED on the master, its answer in the demo's log", 4*time.Minute, func() error {
		c, err := s.cluster()
		if err != nil {
			return err
		}
		for _, a := range c.CompletedApps {
			if a.Name == "pi" && a.State != "FINISHED" {
				t.Fatalf("demo application %s ended %s", a.ID, a.State)
			}
			if a.Name == "pi" && app == "" {
				app = a.ID
			}
		}
		if app == "" {
			return fmt.Errorf("completed applications %+v", c.CompletedApps)
		}
		out, err := s.composeOutput("logs", "--no-color", "demo")
		if err != nil {
			return err
		}
		m := piLine.FindAllStringSubmatch(out, -1)
		if len(m) == 0 {
			return fmt.Errorf("no answer in the demo's log:\n%s", out)
		}
		for _, x := range m {
			if v, _ := strconv.ParseFloat(x[1], 64); math.Abs(v-math.Pi) > 0.01 {
				t.Fatalf("the demo's pi says %s", x[0])
			}
		}
		return nil
	})
	return app
}

// launchRow is a row of glint trace's executor launch table.
var launchRow = regexp.MustCompile(`^(\d+)\s+(\S+)\s+(.*)$`)

func (s *stack) checkTrace(t *testing.T, appID string) {
	s.logsOnFailure(t)
	c, err := s.cluster()
	if err != nil {
		t.Fatal(err)
	}
	var traceID string
	workers := map[string]string{} // executor id → worker id
	for _, a := range c.CompletedApps {
		if a.ID == appID {
			traceID = a.TraceID
			for _, e := range a.Executors {
				workers[strconv.Itoa(int(e.ID))] = e.Worker
			}
		}
	}
	workerHost := map[string]string{} // worker id → compose service (its --host)
	for _, w := range c.Workers {
		workerHost[w.ID] = w.Host
	}
	if traceID == "" || len(workers) == 0 {
		t.Fatalf("application %s: trace id %q, executors %v", appID, traceID, workers)
	}
	hosts := map[string]string{}
	for _, name := range []string{"master", "worker-1", "worker-2", "demo"} {
		hosts[name] = s.hostname(t, name)
	}

	j := &jaeger.Client{URL: "http://127.0.0.1:16686"}
	want := []string{"glint-driver", "glint-executor", "glint-master", "glint-submit", "glint-worker"}
	var tr *jaeger.Trace
	// The collector decides after decision_wait (30 s) from the trace's first span.
	await(t, "the application's trace in Jaeger with spans of every glint process", 3*time.Minute, func() error {
		if tr, err = j.Trace(context.Background(), traceID); err != nil {
			return err
		}
		if got := servicesOf(tr); !slices.Equal(got, want) {
			return fmt.Errorf("trace %s has spans of %v, want %v", traceID, got, want)
		}
		return nil
	})
	// Each span was made inside its process's container: host.name is that
	// container's host name; a worker's and an executor's are a worker
	// container's, the one the span names where it names one.
	for _, sp := range tr.Spans {
		got, _ := sp.Tag("host.name")
		var want []string
		switch sp.Service {
		case "glint-master":
			want = []string{hosts["master"]}
		case "glint-driver", "glint-submit":
			want = []string{hosts["demo"]}
		case "glint-worker", "glint-executor":
			w, ok := sp.Tag(string(telemetry.WorkerID))
			if e, isExec := sp.Tag(string(telemetry.ExecutorID)); !ok && isExec && sp.Service == "glint-executor" {
				w, ok = workers[e], true
			}
			if ok {
				want = []string{hosts[workerHost[w]]}
			} else {
				want = []string{hosts["worker-1"], hosts["worker-2"]}
			}
		}
		if !slices.Contains(want, got) || got == "" {
			t.Errorf("span %s of %s: host.name %q, want one of %v (the containers' host names: %v)", sp.OperationName, sp.Service, got, want, hosts)
		}
	}

	out, err := s.glintCmd(context.Background(), "trace", appID, "--jaeger", "http://127.0.0.1:16686")
	if err != nil {
		t.Fatalf("glint trace: %v\n%s", err, out)
	}
	t.Logf("glint trace %s:\n%s", appID, out)
	rows, withTask := 0, 0
	in := false
	for line := range strings.Lines(out) {
		line = strings.TrimRight(line, "\n")
		if strings.HasPrefix(line, "EXECUTOR") {
			in = true
			continue
		}
		m := launchRow.FindStringSubmatch(line)
		if !in || m == nil {
			in = in && line != ""
			continue
		}
		rows++
		cells := strings.Fields(m[3])
		if len(cells) != len(launchPhasesTotal) || slices.Contains(cells[:firstTaskColumn], "-") {
			t.Errorf("executor %s: launch phases %v, want a time for each of %v", m[1], cells, launchPhasesTotal[:firstTaskColumn])
			continue
		}
		if !slices.Contains(cells[firstTaskColumn:], "-") {
			withTask++
		}
	}
	if rows != len(workers) {
		t.Errorf("glint trace shows %d executor launches, the application had %d executors", rows, len(workers))
	}
	if withTask == 0 {
		t.Errorf("glint trace shows no executor's first task, want every phase of at least one executor's launch")
	}
}

// launchPhasesTotal are the columns of glint trace's launch table after
// EXECUTOR and WORKER: its phases and the total. FIRST TASK and TOTAL are
// "-" for an executor that got no task: on a loaded machine the first
// executor to register may run all of the demo's tasks before the second
// registers, so those two are asked of one executor at least.
var launchPhasesTotal = []string{"LAUNCH EXECUTOR", "PROCESS START", "BOOT", "RETRIEVE PROPS", "REGISTER", "FIRST TASK", "TOTAL"}

// firstTaskColumn is FIRST TASK's index in launchPhasesTotal.
var firstTaskColumn = slices.Index(launchPhasesTotal, "FIRST TASK")

// prometheus is the published Prometheus.
const prometheusURL = "http://127.0.0.1:9090"

func promQuery(q string) ([]map[string]string, error) {
	var r struct {
		Data struct {
			Result []struct{ Metric map[string]string }
		}
	}
	if err := getJSON(prometheusURL+"/api/v1/query?query="+url.QueryEscape(q), &r); err != nil {
		return nil, err
	}
	var out []map[string]string
	for _, s := range r.Data.Result {
		out = append(out, s.Metric)
	}
	return out, nil
}

// releaseFile is where the test's hold application's tasks look for the
// file that ends them, in their executors' containers.
const releaseFile = "/tmp/glint-compose-test-release"

func (s *stack) checkKilledWorker(t *testing.T) {
	s.logsOnFailure(t)
	// A cluster-mode application holding its executors until the release
	// file exists: its driver on one worker, executors on both. It is
	// submitted as the README says, from a container of the stack: a
	// cluster-mode driver runs the submitting glint's path, which only the
	// image's glint has in the workers' containers.
	name := "hold-" + randomHex(4)
	out, err := s.composeOutput("run", "--rm", "-T", "--no-deps", "demo", "submit", "--master", "http://master:7077",
		"--deploy-mode", "cluster", "--name", name, "--driver-memory", "512m", "--executor-cores", "1", "--executor-memory", "256m",
		"--total-executor-cores", "3", "hold", releaseFile, "4")
	if err != nil {
		t.Fatalf("glint submit: %v\n%s", err, out)
	}
	var driverWorker, appID string
	byWorker := map[string]int{}
	await(t, "the held application's driver and three executors running", 3*time.Minute, func() error {
		c, err := s.cluster()
		if err != nil {
			return err
		}
		hostOf := map[string]string{}
		for _, w := range c.Workers {
			hostOf[w.ID] = w.Host
		}
		for _, d := range c.ActiveDrivers {
			if d.Name == name && d.State == "RUNNING" {
				driverWorker = hostOf[d.Worker]
			}
		}
		clear(byWorker)
		running := 0
		for _, a := range c.ActiveApps {
			if a.Name != name {
				continue
			}
			appID = a.ID
			for _, e := range a.Executors {
				if e.State == "RUNNING" {
					running++
					byWorker[hostOf[e.Worker]]++
				}
			}
		}
		if driverWorker == "" || running != 3 {
			return fmt.Errorf("driver on %q, running executors by worker %v", driverWorker, byWorker)
		}
		return nil
	})
	victim := "worker-1"
	if driverWorker == victim {
		victim = "worker-2"
	}
	if byWorker[victim] == 0 {
		t.Fatalf("no executor on %s, the worker without the driver: %v", victim, byWorker)
	}
	survivor := driverWorker
	// Executors are reached at their worker container's address on the
	// project's network.
	workerAt := map[string]string{}
	for _, w := range []string{"worker-1", "worker-2"} {
		workerAt[s.address(t, w)] = w
	}

	await(t, "every Prometheus target up (through /sd), executors inside both worker containers among them", 3*time.Minute, func() error {
		var r struct {
			Data struct {
				ActiveTargets []struct {
					Labels    map[string]string
					Health    string
					LastError string
				}
			}
		}
		if err := getJSON(prometheusURL+"/api/v1/targets?state=active", &r); err != nil {
			return err
		}
		jobs := map[string]int{}
		executorHosts := map[string]bool{}
		for _, tg := range r.Data.ActiveTargets {
			if tg.Health != "up" {
				return fmt.Errorf("target %v: %s %s", tg.Labels, tg.Health, tg.LastError)
			}
			jobs[tg.Labels["job"]+"/"+tg.Labels["role"]]++
			if tg.Labels["role"] == "executor" {
				host, _, _ := strings.Cut(tg.Labels["instance"], ":")
				w := workerAt[host]
				if w == "" || !strings.Contains(tg.Labels["worker"], "-"+w+"-") {
					return fmt.Errorf("executor target %v: not at the address of its worker's container (%v)", tg.Labels, workerAt)
				}
				executorHosts[w] = true
			}
		}
		for _, want := range []string{"glint-master/master", "glint/worker", "glint/driver", "glint/executor", "spanmetrics/", "otel-collector/", "jaeger/", "prometheus/"} {
			if jobs[want] == 0 {
				return fmt.Errorf("no target of job/role %s: %v", want, jobs)
			}
		}
		if jobs["glint/worker"] != 2 || jobs["glint/executor"] < 3 || !executorHosts["worker-1"] || !executorHosts["worker-2"] {
			return fmt.Errorf("targets by job/role %v, executors on %v: want both workers and the application's three executors", jobs, executorHosts)
		}
		return nil
	})
	for _, q := range []string{
		`count by (worker) (glint_worker_cores{worker=~"worker-.+"})`,
		`count by (worker) (glint_worker_memory_bytes{worker=~"worker-.+"})`,
	} {
		await(t, q+" for both workers", time.Minute, func() error {
			got, err := promQuery(q)
			if err != nil || len(got) != 2 {
				return fmt.Errorf("%v %v", got, err)
			}
			return nil
		})
	}
	await(t, "span metrics of every glint process in Prometheus", 2*time.Minute, func() error {
		got, err := promQuery(`count by (service_name) (traces_span_metrics_calls_total{service_name=~"glint-.+"})`)
		if err != nil {
			return err
		}
		var names []string
		for _, m := range got {
			names = append(names, m["service_name"])
		}
		slices.Sort(names)
		if !slices.Equal(names, []string{"glint-driver", "glint-executor", "glint-master", "glint-submit", "glint-worker"}) {
			return fmt.Errorf("span metrics of %v", names)
		}
		return nil
	})

	if out, err := s.output(context.Background(), "", "docker", "kill", s.container(t, victim)); err != nil {
		t.Fatalf("docker kill %s: %v %s", victim, err, out)
	}
	t.Logf("killed %s (%d of the application's executors); its driver is on %s", victim, byWorker[victim], survivor)
	await(t, "GlintWorkerTimedOut firing in Prometheus", 4*time.Minute, func() error {
		return alertFiring(prometheusURL, "GlintWorkerTimedOut", nil)
	})

	// Release the tasks where they can still run: in the surviving worker's
	// container (the image has no shell; docker cp needs none).
	empty := filepath.Join(t.TempDir(), "release")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := s.output(context.Background(), "", "docker", "cp", empty, s.container(t, survivor)+":"+releaseFile); err != nil {
		t.Fatalf("docker cp: %v %s", err, out)
	}
	await(t, "the application FINISHED, its lost executors' tasks run on "+survivor, 3*time.Minute, func() error {
		c, err := s.cluster()
		if err != nil {
			return err
		}
		for _, a := range c.CompletedApps {
			if a.ID != appID {
				continue
			}
			if a.State != "FINISHED" {
				t.Fatalf("application %s ended %s", a.ID, a.State)
			}
			for _, d := range c.CompletedDrivers {
				if d.Name == name && d.State != "FINISHED" {
					t.Fatalf("its driver %s ended %s", d.ID, d.State)
				}
			}
			return nil
		}
		return fmt.Errorf("application %s not completed", appID)
	})
}

// leaseTTL is the ha masters' --etcd-lease-ttl (glint's default).
const leaseTTL = 10 * time.Second

func (s *stack) checkHA(t *testing.T) {
	s.logsOnFailure(t)
	s.run(t, s.root, nil, "docker", s.compose(append([]string{"up", "--detach", "--wait", "--wait-timeout", "300"}, s.ha...)...)...)
	masters := []string{"master-ha-1", "master-ha-2"}
	// A master's /readyz answers 200 while it leads (ALIVE), 503 while it
	// stands by or recovers; the ha masters publish no port, so it is read
	// in their containers.
	leads := func(m string) bool {
		_, err := s.exec(m, "health", "http://localhost:7077/readyz")
		return err == nil
	}
	var leader, standby string
	await(t, "one ha master leading with worker-ha, the other standing by", 3*time.Minute, func() error {
		leader, standby = "", ""
		for _, m := range masters {
			if leads(m) {
				leader = m
			} else {
				standby = m
			}
		}
		if leader == "" || standby == "" {
			return fmt.Errorf("leader %q, standby %q", leader, standby)
		}
		out, err := s.exec(leader, "status", "--master", "http://localhost:7077")
		if err != nil || !slices.Equal(aliveWorkers(out), []string{"worker-ha:7078"}) {
			return fmt.Errorf("leader %s: %v\n%s", leader, err, out)
		}
		return nil
	})

	if out, err := s.output(context.Background(), "", "docker", "kill", s.container(t, leader)); err != nil {
		t.Fatalf("docker kill %s: %v %s", leader, err, out)
	}
	killed := time.Now()
	// A submission while no master leads, from a container of the
	// project's (the ha masters publish no port): the client tries both
	// masters until one takes it.
	name := "during-failover-" + randomHex(4)
	var submitOut bytes.Buffer
	submit := exec.Command("docker", s.compose("run", "--rm", "-T", "--no-deps", "demo", "submit",
		"--master", "http://master-ha-1:7077,http://master-ha-2:7077", "--name", name,
		"--executor-cores", "1", "--total-executor-cores", "1", "--executor-memory", "256m", "sleep", "1s", "2")...)
	submit.Dir, submit.Env = s.root, s.env
	submit.Stdout, submit.Stderr = &submitOut, &submitOut
	if err := submit.Start(); err != nil {
		t.Fatal(err)
	}
	submitted := make(chan error, 1)
	go func() { submitted <- submit.Wait() }()
	ended := false
	defer func() {
		if !ended {
			_ = submit.Process.Kill()
			<-submitted
		}
	}()

	await(t, standby+" leads", 2*time.Minute, func() error {
		if !leads(standby) {
			return fmt.Errorf("%s does not lead", standby)
		}
		return nil
	})
	// The standby takes over once the dead leader's lease expires, and
	// leads once its recovery ends; polling through docker exec adds its
	// own round trips.
	led := time.Since(killed)
	t.Logf("%s killed → %s leads after %s (lease TTL %s)", leader, standby, led.Round(100*time.Millisecond), leaseTTL)
	if led > leaseTTL+5*time.Second {
		t.Errorf("%s led %s after the leader was killed, more than the lease TTL %s (and 5 s of recovery and polling)", standby, led, leaseTTL)
	}
	select {
	case err := <-submitted:
		ended = true
		if err != nil {
			t.Fatalf("the submission during the failover: %v\n%s", err, submitOut.String())
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("the submission during the failover has not ended after 3 minutes:\n%s", submitOut.String())
	}
	out, err := s.exec(standby, "status", "--master", "http://localhost:7077", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		ActiveApps, CompletedApps []struct {
			ID          string
			State       string
			Description struct{ Name string }
		}
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("glint status --json: %v\n%s", err, out)
	}
	var landed []string
	for _, a := range append(st.ActiveApps, st.CompletedApps...) {
		if a.Description.Name == name {
			landed = append(landed, a.ID+" "+a.State)
		}
	}
	if len(landed) != 1 || !strings.HasSuffix(landed[0], "_FINISHED") {
		t.Errorf("applications %s on the new leader: %v, want one, FINISHED", name, landed)
	}
}

func (s *stack) checkDown(t *testing.T) {
	s.takeDown()
	filter := "label=com.docker.compose.project=" + composeProject
	for _, args := range [][]string{
		{"ps", "--all", "--quiet", "--filter", filter},
		{"network", "ls", "--quiet", "--filter", filter},
		{"volume", "ls", "--quiet", "--filter", filter},
	} {
		out, err := s.output(context.Background(), "", "docker", args...)
		if err != nil {
			t.Fatal(err)
		}
		if left := strings.TrimSpace(out); left != "" {
			t.Errorf("docker %s: %s", strings.Join(args, " "), left)
		}
	}
}
