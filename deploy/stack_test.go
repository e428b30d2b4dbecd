package deploy_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v3"

	"github.com/glint-cluster/glint/internal/jaeger"
	"github.com/glint-cluster/glint/internal/tooltest"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// loopback runs compose services as local processes: every port a service
// listens on becomes a free loopback port, and every address in its
// command, environment and mounted config files is rewritten to match.
// Nothing else in those files changes, except where a test says so.
type loopback struct {
	top   *topology
	ports map[string]string // "service:port" → "127.0.0.1:N"
	logs  map[string]string // service → log file
	// extraArgs are appended to a service's command, where a test needs a
	// setting changed (a shorter worker timeout).
	extraArgs map[string][]string
	// secrets are the contents of the compose file's secrets: a new token
	// each (compose reads the cluster token from the environment, which
	// the tests do not have).
	secrets map[string]string
}

func newLoopback(t testing.TB) *loopback {
	t.Helper()
	top := newTopology(t)
	l := &loopback{top: top, ports: map[string]string{}, logs: map[string]string{}, secrets: map[string]string{}}
	for name := range top.project.Secrets {
		l.secrets[name] = rpc.NewToken()
	}
	var keys []string
	for name, ls := range top.listens {
		for _, ln := range ls {
			keys = append(keys, fmt.Sprintf("%s:%d", name, ln.port))
		}
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	for i, p := range tooltest.FreePorts(t, len(keys)) {
		l.ports[keys[i]] = fmt.Sprintf("127.0.0.1:%d", p)
	}
	// Processes log into the test's temporary directory; show the logs if
	// the test fails. TempDir first: its removal then runs after this.
	t.TempDir()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, name := range slices.Sorted(maps.Keys(l.logs)) {
			b, _ := os.ReadFile(l.logs[name])
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			t.Logf("--- %s (last lines of %s)\n%s", name, l.logs[name], strings.Join(lines[max(0, len(lines)-30):], "\n"))
		}
	})
	return l
}

// url is the loopback URL of service's port.
func (l *loopback) url(service string, port int) string {
	return "http://" + l.ports[fmt.Sprintf("%s:%d", service, port)]
}

// rewrite moves the address in s, as seen from service owner, to loopback.
func (l *loopback) rewrite(owner, s string) string {
	a, ok := parseAddr(s)
	if !ok {
		return s
	}
	host := a.host
	if isLocal(host) {
		host = owner
	}
	to, ok := l.ports[fmt.Sprintf("%s:%d", host, a.port)]
	if !ok {
		return s
	}
	return strings.Replace(s, a.raw, to, 1)
}

func (l *loopback) rewriteYAML(owner string, n *yaml.Node) {
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			l.rewriteYAML(owner, c)
		}
	case yaml.MappingNode:
		if host, port := mapValue(n, "host"), mapValue(n, "port"); host != nil && port != nil && isLocal(host.Value) {
			if to, ok := l.ports[owner+":"+port.Value]; ok {
				h, p, _ := strings.Cut(to, ":")
				host.Value, port.Value = h, p
			}
		}
		for i := 1; i < len(n.Content); i += 2 {
			l.rewriteYAML(owner, n.Content[i])
		}
	case yaml.ScalarNode:
		n.Value = l.rewrite(owner, n.Value)
	}
}

// setAll sets every value of key in a YAML tree.
func setAll(n *yaml.Node, key, value string) {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key && n.Content[i+1].Kind == yaml.ScalarNode {
				// The value's own type: a number replacing ${env:…} is a number.
				n.Content[i+1].Value, n.Content[i+1].Tag, n.Content[i+1].Style = value, "", 0
			}
		}
	}
	for _, c := range n.Content {
		setAll(c, key, value)
	}
}

// setAlertFor sets the for: of alert rule alert in rules file doc.
func setAlertFor(n *yaml.Node, alert, value string) {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "alert" && n.Content[i+1].Value == alert {
				setAll(n, "for", value)
				return
			}
		}
	}
	for _, c := range n.Content {
		setAlertFor(c, alert, value)
	}
}

// process is a compose service as a local process.
type process struct {
	name  string
	root  string // stands for the container's filesystem: mounts under it
	bin   string
	args  []string
	env   []string
	ready string // URL that answers 200 once it serves
	pid   int    // once started (env execs the binary, so this is the service's own pid)
	// token and tokenFile: a glint service's token (GLINT_TOKEN_FILE or
	// --token-file) and the file under root that holds it.
	token, tokenFile string
}

// notServedLocally are environment variables naming services the tests do
// not run (Pyroscope); the processes start without them.
var notServedLocally = []string{"PYROSCOPE_SERVER_ADDRESS"}

// readyWithoutHealthcheck is what says a service without a compose
// healthcheck is up: the collector's own metrics, and for demo (which
// serves nothing) the master it submits to.
var readyWithoutHealthcheck = map[string]string{
	"otel-collector": "http://otel-collector:8888/metrics",
	"demo":           "http://master:7077/healthz",
}

// prepare turns compose service name into a process: its bind mounts copied
// (YAML rewritten to loopback, then edited by tweak if set) under a temporary
// root, its secrets written there (l.secrets), its named volumes and the
// image's work dir made there, its command, environment and readiness
// rewritten: addresses to loopback, container paths to under the root.
func (l *loopback) prepare(t testing.TB, name string, tweak func(target string, doc *yaml.Node)) *process {
	t.Helper()
	s := l.top.project.Services[name]
	p := &process{name: name, root: t.TempDir()}
	var targets []string
	for _, v := range s.Volumes {
		dst := filepath.Join(p.root, v.Target)
		targets = append(targets, v.Target)
		switch v.Type {
		case types.VolumeTypeBind:
			l.copyTree(t, name, v.Source, dst, v.Target, tweak)
		case types.VolumeTypeVolume:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, sec := range s.Secrets {
		target := secretTarget(sec)
		content, ok := l.secrets[sec.Source]
		if !ok {
			t.Fatalf("service %s: no secret %s", name, sec.Source)
		}
		dst := filepath.Join(p.root, target)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, []byte(content+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		targets = append(targets, target)
	}
	switch repo := imageRepo(s.Image); repo {
	case glintRepo:
		p.bin = glintBinary(t)
		stages := parseDockerfile(t)
		wd := stages[len(stages)-1].last("WORKDIR")
		if err := os.MkdirAll(filepath.Join(p.root, wd), 0o755); err != nil {
			t.Fatal(err)
		}
		targets = append(targets, wd)
	case "otel/opentelemetry-collector-contrib", "jaegertracing/jaeger":
		p.bin = tooltest.Binary(t, "tools/jaeger/go.mod", "jaeger")
	case "prom/prometheus":
		p.bin = tooltest.Binary(t, "tools/go.mod", "prometheus")
	default:
		t.Fatalf("service %s: no local binary for image %s", name, repo)
	}
	// Longest first, so /etc/prometheus/rules wins over /etc/prometheus.
	slices.SortFunc(targets, func(a, b string) int { return len(b) - len(a) })
	cmd := []string(s.Command)
	for i, arg := range cmd {
		arg = l.rewrite(name, arg)
		if i > 0 && cmd[i-1] == "--host" {
			if _, ok := l.top.project.Services[arg]; ok {
				arg = "127.0.0.1" // its service name: here, loopback
			}
		}
		p.args = append(p.args, inRoot(arg, p.root, targets))
	}
	p.args = append(p.args, l.extraArgs[name]...)
	if imageRepo(s.Image) == "prom/prometheus" {
		if f, _ := flags(cmd); f["--web.listen-address"] == "" {
			p.args = append(p.args, "--web.listen-address="+l.ports[name+":9090"])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Environment)) {
		if v := s.Environment[k]; v != nil && !slices.Contains(notServedLocally, k) {
			p.env = append(p.env, k+"="+inRoot(l.rewrite(name, *v), p.root, targets))
		}
	}
	if path := tokenFile(s); path != "" {
		p.tokenFile = inRoot(path, p.root, targets)
		b, err := os.ReadFile(p.tokenFile)
		if err != nil {
			t.Fatalf("service %s: its token file: %v", name, err)
		}
		p.token = strings.TrimSpace(string(b))
	}
	if hc := s.HealthCheck; hc != nil {
		for _, arg := range hc.Test {
			if _, ok := parseAddr(arg); ok {
				p.ready = l.rewrite(name, arg)
			}
		}
	} else if u, ok := readyWithoutHealthcheck[name]; ok {
		p.ready = l.rewrite(name, u)
	}
	if p.ready == "" {
		t.Fatalf("service %s: nothing says when it is ready", name)
	}
	return p
}

// inRoot moves container paths in a command-line argument (a path, or
// --flag=path) under root.
func inRoot(arg, root string, targets []string) string {
	prefix, value := "", arg
	if strings.HasPrefix(arg, "-") {
		if name, v, ok := strings.Cut(arg, "="); ok {
			prefix, value = name+"=", v
		}
	}
	scheme := ""
	if v, ok := strings.CutPrefix(value, "file:"); ok {
		scheme, value = "file:", v
	}
	for _, target := range targets {
		if value == target || strings.HasPrefix(value, target+"/") {
			return prefix + scheme + filepath.Join(root, value)
		}
	}
	return arg
}

// copyTree copies a bind mount's source to dst, rewriting YAML files.
func (l *loopback) copyTree(t testing.TB, owner, src, dst, target string, tweak func(string, *yaml.Node)) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		out := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(out, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if ext := filepath.Ext(path); ext == ".yaml" || ext == ".yml" {
			var doc yaml.Node
			if err := yaml.Unmarshal(b, &doc); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			l.rewriteYAML(owner, &doc)
			if tweak != nil {
				tweak(filepath.ToSlash(filepath.Join(target, rel)), &doc)
			}
			if b, err = yaml.Marshal(&doc); err != nil {
				return err
			}
		}
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		return os.WriteFile(out, b, 0o644)
	})
	if err != nil {
		t.Fatalf("copy %s for service %s: %v", src, owner, err)
	}
}

// start runs p until the test ends and waits until it is ready. Its
// environment is its compose environment and nothing of the test's; and, as
// the image's user is not root, a worker's executors run as the worker's
// user (the test's, which may be root) as they do in its container.
func (l *loopback) start(t testing.TB, p *process) {
	t.Helper()
	env := []string{"-i", "PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TMPDIR=" + os.TempDir(), "GLINT_EXECUTOR_USERS=off"}
	env = append(env, p.env...)
	args := append(append(env, p.bin), p.args...)
	proc := tooltest.Start(t, p.name, p.ready, "/usr/bin/env", args...)
	l.logs[p.name], p.pid = proc.Log, proc.Pid
}

// startServices starts services in order, which must respect their
// depends_on among the ones started.
func (l *loopback) startServices(t testing.TB, order []string, tweak func(target string, doc *yaml.Node)) map[string]*process {
	t.Helper()
	started := map[string]*process{}
	for i, name := range order {
		for dep := range l.top.project.Services[name].DependsOn {
			if j := slices.Index(order, dep); j > i {
				t.Fatalf("%s depends on %s, which starts after it", name, dep)
			}
		}
		p := l.prepare(t, name, tweak)
		l.start(t, p)
		started[name] = p
	}
	return started
}

// eventually retries f until it succeeds or a minute and a half has passed.
func eventually(t testing.TB, what string, f func() error) {
	t.Helper()
	var err error
	if !tooltest.Poll(90*time.Second, 250*time.Millisecond, func() bool { err = f(); return err == nil }) {
		t.Fatalf("%s: %v", what, err)
	}
}

func getJSON(u string, v any) error { return getJSONWith(u, "", v) }

// get is GET u with a bearer token, if token is not "".
func get(u, token string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return http.DefaultClient.Do(req)
}

// getJSONWith is getJSON with a bearer token, if token is not "".
func getJSONWith(u, token string, v any) error {
	resp, err := get(u, token)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", u, resp.Status, b)
	}
	return json.Unmarshal(b, v)
}

// status is the status code of GET u with a bearer token, if token is not "".
func status(t testing.TB, u, token string) int {
	t.Helper()
	resp, err := get(u, token)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// testSpan is a one-span trace for sendSpans: a server span of service, named
// name, that lasted took and failed if failed.
type testSpan struct {
	service, name string
	took          time.Duration
	failed        bool
	traceID       string // set by sendSpans
}

// sendSpans posts spans to an OTLP/HTTP endpoint as JSON in one request, each
// in a trace of its own, ending now, and sets their trace ids.
func sendSpans(t testing.TB, endpoint string, spans []*testSpan) {
	t.Helper()
	now := time.Now()
	byService := map[string][]any{}
	for _, sp := range spans {
		sp.traceID = randomHex(16)
		span := map[string]any{
			"traceId": sp.traceID, "spanId": randomHex(8), "name": sp.name, "kind": 2, // SPAN_KIND_SERVER
			"startTimeUnixNano": strconv.FormatInt(now.Add(-sp.took).UnixNano(), 10),
			"endTimeUnixNano":   strconv.FormatInt(now.UnixNano(), 10),
		}
		if sp.failed {
			span["status"] = map[string]any{"code": 2, "message": "deploy test failure"} // STATUS_CODE_ERROR
		}
		byService[sp.service] = append(byService[sp.service], span)
	}
	var resourceSpans []any
	for _, service := range slices.Sorted(maps.Keys(byService)) {
		resourceSpans = append(resourceSpans, map[string]any{
			"resource": map[string]any{"attributes": []any{
				map[string]any{"key": "service.name", "value": map[string]any{"stringValue": service}},
			}},
			"scopeSpans": []any{map[string]any{
				"scope": map[string]any{"name": "glint/deploy_test"},
				"spans": byService[service],
			}},
		})
	}
	b, _ := json.Marshal(map[string]any{"resourceSpans": resourceSpans})
	// The collector serves its own metrics (its readiness here) before its
	// receivers listen: a refused connection is tried again.
	var resp *http.Response
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		resp, err = http.Post(endpoint+"/v1/traces", "application/json", bytes.NewReader(b))
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || time.Now().After(deadline) {
			t.Fatalf("send spans to the collector: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		out, _ := io.ReadAll(resp.Body)
		t.Fatalf("send spans to the collector: %s: %s", resp.Status, out)
	}
}

// tailSampling is the part of deploy/otel/collector.yaml the tests read.
type tailSampling struct {
	Processors struct {
		TailSampling struct {
			DecisionWait string `yaml:"decision_wait"`
			Policies     []struct {
				Name          string
				Type          string
				Probabilistic struct {
					SamplingPercentage string `yaml:"sampling_percentage"`
				}
			}
		} `yaml:"tail_sampling"`
	}
}

// restPercentage is the sampling percentage of deploy/otel/collector.yaml's
// probabilistic policy: the share of traces kept that no other policy keeps.
// The file takes it from the environment (${env:NAME}), which compose sets
// from .env.
func restPercentage(t testing.TB) float64 {
	t.Helper()
	var c tailSampling
	tooltest.ReadYAML(t, filepath.Join(tooltest.Root(t), "deploy/otel/collector.yaml"), &c)
	for _, p := range c.Processors.TailSampling.Policies {
		if p.Type != "probabilistic" {
			continue
		}
		v := p.Probabilistic.SamplingPercentage
		if name, ok := strings.CutPrefix(v, "${env:"); ok {
			name = strings.TrimSuffix(name, "}")
			env := service(t, loadCompose(t), "otel-collector").Environment[name]
			if env == nil {
				t.Fatalf("deploy/otel/collector.yaml's sampling_percentage is %s, which service otel-collector's environment does not set", v)
			}
			v = *env
		}
		percent, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("deploy/otel/collector.yaml's sampling_percentage %q: %v", p.Probabilistic.SamplingPercentage, err)
		}
		return percent
	}
	t.Fatal("deploy/otel/collector.yaml's tail_sampling has no probabilistic policy")
	return 0
}

// collectorConfig is where compose mounts deploy/otel/collector.yaml.
const collectorConfig = "/etc/otelcol-contrib/config.yaml"

// decideSoon makes the collector's tail sampling decide a second after a
// trace's first span instead of waiting for a slow launch to end.
func decideSoon(target string, doc *yaml.Node) {
	if target == collectorConfig {
		setAll(doc, "decision_wait", "1s")
	}
}

// tracesOf returns the ids of the traces Jaeger holds of service.
func tracesOf(jaegerURL, service string) (map[string]bool, error) {
	var r struct {
		Data []struct {
			TraceID string `json:"traceID"`
		}
	}
	if err := getJSON(jaegerURL+"/api/traces?limit=10000&lookback=1h&service="+url.QueryEscape(service), &r); err != nil {
		return nil, err
	}
	ids := map[string]bool{}
	for _, tr := range r.Data {
		ids[tr.TraceID] = true
	}
	return ids, nil
}

// servicesOf is the set of services a Jaeger trace has spans of.
func servicesOf(tr *jaeger.Trace) []string {
	var out []string
	for _, s := range tr.Spans {
		out = append(out, s.Service)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// deploy/otel/collector.yaml and deploy/otel/jaeger.yaml as they are, in the Jaeger binary
// (tail sampling deciding after 1 s instead of its decision_wait): every
// span becomes span metrics, with exemplars, under the names Prometheus,
// Jaeger's Monitor tab and the dashboards use; Jaeger gets every trace with
// an error or a launch step slower than 2 s, and the configured share of the
// rest.
func TestCollectorAndJaegerConfigsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("-short is the fast loop: this test starts two real Jaeger processes")
	}
	t.Parallel()
	l := newLoopback(t)
	l.startServices(t, []string{"jaeger", "otel-collector"}, decideSoon)

	// What tail sampling must keep: failed spans, and launch steps slower
	// than the objective. The rest: spans of other names, launch steps
	// within it, and ok spans.
	var keep, rest []*testSpan
	for _, name := range []string{"deploy-check", "process.start"} {
		for range 10 {
			keep = append(keep, &testSpan{service: "deploy-test", name: name, took: 20 * time.Millisecond, failed: true})
		}
	}
	for _, name := range []string{"schedule", "process.start", "report", "glint.worker.v1.WorkerService/LaunchExecutor"} {
		for range 5 {
			keep = append(keep, &testSpan{service: "deploy-test", name: name, took: 2500 * time.Millisecond})
		}
	}
	for _, sp := range []testSpan{
		{name: "deploy-check", took: 20 * time.Millisecond},
		{name: "deploy-check", took: 3 * time.Second}, // slow, but no launch step
		{name: "process.start", took: 1900 * time.Millisecond},
		{name: "schedule", took: time.Millisecond},
	} {
		for range 100 {
			rest = append(rest, &testSpan{service: "deploy-rest", name: sp.name, took: sp.took})
		}
	}
	sendSpans(t, l.url("otel-collector", 4318), append(slices.Clone(keep), rest...))

	// The spanmetrics connector flushes every metrics_flush_interval. A new
	// series starts at 0 with the exemplars of its first spans, and has its
	// count from the next flush on. It counts every span, those of traces
	// Jaeger does not get too.
	n := float64(len(rest))
	exemplar := false
	eventually(t, "span metrics of every span, with exemplars, on the collector's prometheus exporter", func() error {
		req, _ := http.NewRequest(http.MethodGet, l.url("otel-collector", 8889)+"/metrics", nil)
		req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var calls, restCalls float64
		for line := range strings.Lines(string(b)) {
			switch {
			case strings.HasPrefix(line, "traces_span_metrics_calls_total{") && strings.Contains(line, `service_name="deploy-test"`):
				calls += sampleValue(line)
			case strings.HasPrefix(line, "traces_span_metrics_calls_total{") && strings.Contains(line, `service_name="deploy-rest"`):
				restCalls += sampleValue(line)
			case strings.HasPrefix(line, "traces_span_metrics_duration_seconds_bucket{") && strings.Contains(line, `service_name="deploy-test"`):
				for _, sp := range keep {
					exemplar = exemplar || strings.Contains(line, `trace_id="`+sp.traceID+`"`)
				}
			}
		}
		if calls != float64(len(keep)) || restCalls != n || !exemplar {
			return fmt.Errorf("traces_span_metrics_calls_total %v of deploy-test (want %d) and %v of deploy-rest (want %v), a duration bucket with the exemplar of a kept trace %v, in:\n%s",
				calls, len(keep), restCalls, n, exemplar, b)
		}
		return nil
	})

	jaegerURL := l.url("jaeger", 16686)
	j := &jaeger.Client{URL: jaegerURL}
	eventually(t, "every trace with an error or a slow launch step reaches Jaeger through tail sampling", func() error {
		for _, sp := range keep {
			tr, err := j.Trace(context.Background(), sp.traceID)
			if err != nil {
				return fmt.Errorf("%s span %s (failed %v, took %v): %w", sp.name, sp.traceID, sp.failed, sp.took, err)
			}
			if got := servicesOf(tr); !slices.Equal(got, []string{"deploy-test"}) || tr.Spans[0].OperationName != sp.name {
				return fmt.Errorf("trace has %v", got)
			}
		}
		return nil
	})
	var services struct{ Data []string }
	if err := getJSON(jaegerURL+"/api/services", &services); err != nil || !slices.Contains(services.Data, "deploy-test") {
		t.Errorf("Jaeger /api/services: %v %v, want deploy-test", services.Data, err)
	}

	// The rest was decided with the kept traces (one request, one decision
	// tick); its kept share follows them within the batch processor's timeout.
	time.Sleep(3 * time.Second)
	kept, err := tracesOf(jaegerURL, "deploy-rest")
	if err != nil {
		t.Fatal(err)
	}
	percent := restPercentage(t)
	mean := n * percent / 100
	sd := math.Sqrt(n * percent / 100 * (1 - percent/100))
	// Trace ids are random, so the count is binomial: six standard
	// deviations either side, and none kept only at 0%.
	low, high := max(0, mean-6*sd), min(n, mean+6*sd)
	if percent > 0 {
		low = max(low, 1)
	}
	if got := float64(len(kept)); got < low || got > high {
		t.Errorf("Jaeger holds %v of %v traces no policy keeps; at %v%% want %.0f–%.0f", got, n, percent, low, high)
	}
	for _, sp := range rest {
		delete(kept, sp.traceID)
	}
	if len(kept) > 0 {
		t.Errorf("Jaeger holds deploy-rest traces that were never sent: %v", kept)
	}
}

// sampleValue is the value of a text-format sample line: the first field
// after the labels.
func sampleValue(line string) float64 {
	_, after, _ := strings.Cut(line, "} ")
	v, _ := strconv.ParseFloat(strings.Fields(after)[0], 64)
	return v
}

// docker-compose.yml without Docker: master, workers and demo from the
// glint built as the Dockerfile builds it, with compose's commands and
// environment and a cluster token in their secret's place; the collector and Jaeger from deploy/otel/*.yaml; Prometheus from
// deploy/prometheus with compose's flags. Every address is moved to
// loopback; Prometheus scrapes and evaluates every second instead of every
// 15 s, and the collector's tail sampling decides after a second and keeps
// every trace (the test follows one application's trace), to be quick;
// Pyroscope and Grafana do not run.
func TestComposeStackRunsOnLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("-short is the fast loop: this test runs the whole stack (Jaeger, collector, Prometheus, cluster)")
	}
	t.Parallel()
	l := newLoopback(t)
	fast := func(target string, doc *yaml.Node) {
		switch target {
		case "/etc/prometheus/prometheus.yml":
			for _, key := range []string{"scrape_interval", "evaluation_interval", "refresh_interval"} {
				setAll(doc, key, "1s")
			}
		case collectorConfig:
			decideSoon(target, doc)
			setAll(doc, "sampling_percentage", "100")
		case "/etc/prometheus/rules/glint.yml":
			// Its 5 minutes are promtool's to test (TestAlertRulesFireAndStayQuiet);
			// here, that the expression fires on a real master's counts.
			setAlertFor(doc, "GlintExecutorsFailingToStart", "0s")
		}
	}
	// A short worker timeout, so that a stopped worker times out within the test.
	l.extraArgs = map[string][]string{"master": {"--worker-timeout", "3s"}}
	order := []string{"jaeger", "otel-collector", "prometheus", "master", "worker-1", "worker-2", "demo"}
	procs := l.startServices(t, order, fast)

	t.Run("healthchecks pass", func(t *testing.T) {
		for _, name := range order {
			hc := l.top.project.Services[name].HealthCheck
			if hc == nil || len(hc.Test) < 2 || hc.Test[0] != "CMD" || hc.Test[1] != "glint" {
				continue // the others' URLs answered before they counted as started
			}
			var args []string
			for _, a := range hc.Test[2:] {
				args = append(args, l.rewrite(name, a))
			}
			if out, err := exec.Command(procs[name].bin, args...).CombinedOutput(); err != nil {
				t.Errorf("service %s: healthcheck glint %v: %v\n%s", name, args, err, out)
			}
		}
	})

	master := l.url("master", 7077)
	token := procs["master"].token
	t.Run("the master and the workers run with the cluster token", func(t *testing.T) {
		for _, name := range []string{"master", "worker-1", "worker-2", "demo"} {
			if p := procs[name]; p.token == "" || p.token != token {
				t.Errorf("service %s runs with token file %q (%d bytes), want the master's cluster token", name, p.tokenFile, len(p.token))
			}
		}
		// On loopback without a token they would serve anyone: their pages
		// answer only the token; /healthz, /metrics and /sd anyone.
		for _, u := range []string{master, l.url("worker-1", 7078), l.url("worker-2", 7078)} {
			for _, tc := range []struct {
				page, token string
				want        int
			}{
				{"/json", "", http.StatusUnauthorized},
				{"/json", rpc.NewToken(), http.StatusUnauthorized},
				{"/json", token, http.StatusOK},
				{"/healthz", "", http.StatusOK},
				{"/metrics", "", http.StatusOK},
			} {
				if got := status(t, u+tc.page, tc.token); got != tc.want {
					t.Errorf("GET %s%s with a token of %d bytes: %d, want %d", u, tc.page, len(tc.token), got, tc.want)
				}
			}
		}
		if got := status(t, master+"/sd", ""); got != http.StatusOK {
			t.Errorf("GET %s/sd without a token: %d, want 200 (Prometheus reads it without one)", master, got)
		}
	})

	var traceID string
	t.Run("demo's pi runs on the workers' executors", func(t *testing.T) {
		eventually(t, "a finished application on the master", func() error {
			var st struct {
				Completedapps []struct {
					ID, Name, State, Traceid string
					Executors                []struct{ Worker string }
				}
			}
			if err := getJSONWith(master+"/json", token, &st); err != nil {
				return err
			}
			for _, a := range st.Completedapps {
				if a.State == "FINISHED" && len(a.Executors) > 0 {
					traceID = a.Traceid
					return nil
				}
			}
			return fmt.Errorf("completed applications: %+v", st.Completedapps)
		})
	})
	if traceID == "" {
		t.Fatal("no application finished")
	}

	j := &jaeger.Client{URL: l.url("jaeger", 16686)}
	t.Run("its trace reaches Jaeger through the collector", func(t *testing.T) {
		want := []string{"glint-driver", "glint-executor", "glint-master", "glint-submit", "glint-worker"}
		eventually(t, "the application's trace in Jaeger", func() error {
			tr, err := j.Trace(context.Background(), traceID)
			if err != nil {
				return err
			}
			if got := servicesOf(tr); !slices.Equal(got, want) {
				return fmt.Errorf("trace %s has spans of %v, want %v", traceID, got, want)
			}
			return nil
		})
	})

	prom := l.url("prometheus", 9090)
	query := func(q string) ([]map[string]string, error) {
		var r struct {
			Data struct {
				Result []struct {
					Metric map[string]string
				}
			}
		}
		if err := getJSON(prom+"/api/v1/query?query="+url.QueryEscape(q), &r); err != nil {
			return nil, err
		}
		var out []map[string]string
		for _, s := range r.Data.Result {
			out = append(out, s.Metric)
		}
		return out, nil
	}
	expect := func(t *testing.T, q string, n int) {
		t.Helper()
		eventually(t, q, func() error {
			got, err := query(q)
			if err != nil {
				return err
			}
			if len(got) != n {
				return fmt.Errorf("%d series %v, want %d", len(got), got, n)
			}
			return nil
		})
	}

	t.Run("Prometheus scrapes the master and the workers /sd lists", func(t *testing.T) {
		expect(t, `up{job="glint-master",role="master"} == 1`, 1)
		expect(t, `up{job="glint",role="worker",worker=~"worker-.+"} == 1`, 2)
		expect(t, `glint_master_workers{state="alive"} == 2`, 1)
		expect(t, `up{job=~"spanmetrics|otel-collector|jaeger|prometheus"} == 1`, 4)
	})

	t.Run("span metrics reach Prometheus", func(t *testing.T) {
		expect(t, `sum by (service_name) (traces_span_metrics_calls_total{service_name="glint-master"})`, 1)
		expect(t, `sum by (service_name) (traces_span_metrics_duration_seconds_bucket{service_name="glint-master"})`, 1)
	})

	t.Run("Prometheus finds executors through /sd and scrapes them", func(t *testing.T) {
		// demo's pi is over in about a second; this application holds its
		// executors (its release file is never made) until the checks
		// passed, then it is stopped.
		var out bytes.Buffer
		submit := exec.Command(procs["master"].bin, "submit", "--master", master, "--token-file", procs["master"].tokenFile, "--executor-cores", "1",
			"--total-executor-cores", "2", "--executor-memory", "256m", "--log-level", "warn", "hold", filepath.Join(t.TempDir(), "never"), "2")
		submit.Stdout, submit.Stderr = &out, &out
		if err := submit.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = submit.Process.Signal(syscall.SIGTERM)
			_ = submit.Wait()
			if t.Failed() {
				t.Logf("submit's output:\n%s", out.String())
			}
		}()
		expect(t, `count(up{job="glint",role="executor"} == 1) >= 2`, 1)
		expect(t, `count(glint_executor_tasks_running{role="executor"}) >= 2`, 1)
	})

	t.Run("Prometheus stores exemplars whose traces are in Jaeger", func(t *testing.T) {
		for _, q := range []string{`traces_span_metrics_duration_seconds_bucket`, `{__name__=~"glint_.+_bucket"}`} {
			eventually(t, "exemplars of "+q+" naming a trace in Jaeger", func() error {
				var r struct {
					Data []struct {
						Exemplars []struct{ Labels map[string]string }
					}
				}
				now := time.Now()
				u := fmt.Sprintf("%s/api/v1/query_exemplars?query=%s&start=%d&end=%d", prom, url.QueryEscape(q), now.Add(-time.Hour).Unix(), now.Add(time.Minute).Unix())
				if err := getJSON(u, &r); err != nil {
					return err
				}
				for _, d := range r.Data {
					for _, e := range d.Exemplars {
						if id := e.Labels["trace_id"]; id != "" {
							if _, err := j.Trace(context.Background(), id); err == nil {
								return nil
							}
						}
					}
				}
				return fmt.Errorf("no exemplar whose trace_id is in Jaeger: %+v", r.Data)
			})
		}
	})

	t.Run("Prometheus evaluates the alert and recording rules", func(t *testing.T) {
		var file struct {
			Groups []struct {
				Rules []struct{ Alert, Record string }
			}
		}
		tooltest.ReadYAML(t, filepath.Join(tooltest.Root(t), "deploy/prometheus/rules/glint.yml"), &file)
		var want []string
		for _, g := range file.Groups {
			for _, r := range g.Rules {
				want = append(want, r.Alert+r.Record)
			}
		}
		slices.Sort(want)
		eventually(t, "rules loaded and evaluated", func() error {
			var r struct {
				Data struct {
					Groups []struct {
						Rules []struct{ Name, Health, Type string }
					}
				}
			}
			if err := getJSON(prom+"/api/v1/rules", &r); err != nil {
				return err
			}
			var ok []string
			for _, g := range r.Data.Groups {
				for _, rule := range g.Rules {
					if rule.Health == "ok" {
						ok = append(ok, rule.Name)
					}
				}
			}
			slices.Sort(ok)
			if !slices.Equal(ok, want) {
				return fmt.Errorf("healthy rules: %v, want %v: %+v", ok, want, r.Data.Groups)
			}
			return nil
		})
		// The objective's threshold is a bucket of the master's histogram,
		// and its error ratio has a value once executors started.
		expect(t, `glint:executor_starts_good:total > 0`, 1)
		expect(t, `glint:executor_start_errors:ratio_rate5m >= 0`, 1)
	})

	t.Run("Jaeger's Monitor tab reads span metrics from Prometheus", func(t *testing.T) {
		eventually(t, "call rates of glint-master from Jaeger's metrics API", func() error {
			var r struct {
				Metrics []struct {
					MetricPoints []any `json:"metricPoints"`
				} `json:"metrics"`
			}
			if err := getJSON(l.url("jaeger", 16686)+"/api/metrics/calls?service=glint-master&spanKind=server", &r); err != nil {
				return err
			}
			if len(r.Metrics) == 0 || len(r.Metrics[0].MetricPoints) == 0 {
				return fmt.Errorf("no call rates: %+v", r)
			}
			return nil
		})
	})

	t.Run("an application that fails fires GlintApplicationFailed", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "missing.txt")
		out, err := exec.Command(procs["master"].bin, "submit", "--master", master, "--token-file", procs["master"].tokenFile,
			"--executor-memory", "256m", "--log-level", "warn", "wordcount", missing).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "no such file or directory") {
			t.Fatalf("wordcount on a missing file: %v\n%s", err, out)
		}
		eventually(t, "GlintApplicationFailed firing", func() error {
			return alertFiring(prom, "GlintApplicationFailed", nil)
		})
	})

	t.Run("executors that cannot start fire GlintExecutorsFailingToStart", func(t *testing.T) {
		// A client-mode driver whose binary is gone once it started: its
		// executors, which run that binary, fail to start one after another.
		gone := filepath.Join(t.TempDir(), "glint")
		bin, err := os.ReadFile(procs["master"].bin)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(gone, bin, 0o755); err != nil {
			t.Fatal(err)
		}
		submit := exec.Command(gone, "submit", "--master", master, "--token-file", procs["master"].tokenFile,
			"--executor-memory", "256m", "--log-level", "warn", "pi", "10")
		if err := submit.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = submit.Process.Kill()
			_ = submit.Wait()
		}()
		if err := os.Remove(gone); err != nil {
			t.Fatal(err)
		}
		eventually(t, "GlintExecutorsFailingToStart firing", func() error {
			return alertFiring(prom, "GlintExecutorsFailingToStart", nil)
		})
	})

	t.Run("a stopped worker times out and GlintWorkerTimedOut fires, naming it", func(t *testing.T) {
		worker := procs["worker-2"].pid
		if err := syscall.Kill(worker, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = syscall.Kill(worker, syscall.SIGCONT) }()
		eventually(t, "GlintWorkerTimedOut firing", func() error {
			return alertFiring(prom, "GlintWorkerTimedOut", func(labels map[string]string) bool { return strings.Contains(labels["worker"], "worker-") })
		})
		// Before it timed out, it was late past half the master's 3 s
		// timeout — a fixed 30 s would never have been reached.
		expect(t, `max_over_time(ALERTS{alertname="GlintWorkerHeartbeatLate", alertstate="firing"}[5m])`, 1)
	})
}

// alertFiring is nil once Prometheus at prom has the alert name firing
// with labels match accepts (nil: any); else an error listing the alerts.
func alertFiring(prom, name string, match func(labels map[string]string) bool) error {
	var r struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string
				State  string
			}
		}
	}
	if err := getJSON(prom+"/api/v1/alerts", &r); err != nil {
		return err
	}
	for _, a := range r.Data.Alerts {
		if a.Labels["alertname"] == name && a.State == "firing" && (match == nil || match(a.Labels)) {
			return nil
		}
	}
	return fmt.Errorf("alerts: %+v", r.Data.Alerts)
}
