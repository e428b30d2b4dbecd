package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v3"

	"github.com/glint-cluster/glint/internal/tooltest"
)

// The services DESIGN.md's docker-compose stack has, besides demo.
var stackServices = []string{"master", "worker-1", "worker-2", "otel-collector", "jaeger", "prometheus", "grafana", "pyroscope"}

func TestComposeLoadsWithItsEnvFile(t *testing.T) {
	p := loadCompose(t)
	if p.Name != "glint" {
		t.Errorf("project name %q, want glint", p.Name)
	}
	for _, name := range stackServices {
		if _, ok := p.Services[name]; !ok {
			t.Errorf("no service %s; services: %v", name, p.ServiceNames())
		}
	}
	if _, ok := p.DisabledServices["demo"]; !ok {
		t.Errorf("demo runs without --profile demo; want it only under the demo profile")
	}
	demo := service(t, loadCompose(t, "demo"), "demo")
	if !slices.Equal(demo.Profiles, []string{"demo"}) {
		t.Errorf("demo profiles %v, want [demo]", demo.Profiles)
	}
}

func TestComposeImagesArePinned(t *testing.T) {
	p := loadCompose(t, "demo")
	for _, name := range p.ServiceNames() {
		s := p.Services[name]
		if s.Image == "" {
			t.Errorf("service %s has no image", name)
			continue
		}
		if !pinned(s.Image) {
			t.Errorf("service %s: image %q has no version tag (other than latest) or digest", name, s.Image)
		}
	}
}

// Every file and directory compose bind-mounts must be in the repository:
// Docker would otherwise create an empty directory in its place.
func TestComposeBindMountsExist(t *testing.T) {
	p := loadCompose(t, "demo")
	root := tooltest.Root(t)
	for _, name := range p.ServiceNames() {
		for _, v := range p.Services[name].Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			rel, _ := filepath.Rel(root, v.Source)
			if _, err := os.Stat(v.Source); err != nil {
				t.Errorf("service %s mounts %s at %s, which does not exist", name, rel, v.Target)
			}
		}
	}
}

func TestComposeGlintServices(t *testing.T) {
	p := loadCompose(t, "demo")
	env := p.Environment
	master := service(t, p, "master")
	if master.Build == nil {
		t.Errorf("master does not build the image from the Dockerfile")
	}
	for _, name := range []string{"master", "worker-1", "worker-2", "demo"} {
		s := service(t, p, name)
		if imageRepo(s.Image) != glintRepo || s.Image != master.Image {
			t.Errorf("service %s runs %s, want the master's image %s", name, s.Image, master.Image)
		}
		for k, want := range map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": env["GLINT_OTLP_ENDPOINT"],
			"PYROSCOPE_SERVER_ADDRESS":    env["GLINT_PYROSCOPE_URL"],
		} {
			if got := s.Environment[k]; got == nil || *got != want || want == "" {
				t.Errorf("service %s: %s = %v, want .env's %q", name, k, deref(got), want)
			}
		}
		cmd := []string(s.Command)
		if len(cmd) == 0 {
			t.Errorf("service %s has no command", name)
			continue
		}
		f, args := flags(cmd[1:])
		switch cmd[0] {
		case "master", "worker":
			// Executors and the master reach a worker by --host; so does
			// anyone reading the master's /json.
			if f["--host"] != name {
				t.Errorf("service %s: --host %q, want its service name", name, f["--host"])
			}
			hc := s.HealthCheck
			want := []string{"CMD", "glint", "health"}
			if hc == nil || len(hc.Test) != 4 || !slices.Equal(hc.Test[:3], want) {
				t.Errorf("service %s: healthcheck %v, want [CMD glint health URL] (the image has no shell)", name, hc)
			}
		case "submit":
		default:
			t.Errorf("service %s runs glint %s", name, cmd[0])
		}
		if cmd[0] == "worker" {
			if f["--master"] != "http://master:7077" {
				t.Errorf("service %s: --master %q, want http://master:7077", name, f["--master"])
			}
			if f["--cores"] != env["GLINT_WORKER_CORES"] || f["--memory"] != env["GLINT_WORKER_MEMORY"] {
				t.Errorf("service %s: --cores %q --memory %q, want .env's GLINT_WORKER_CORES %q and GLINT_WORKER_MEMORY %q",
					name, f["--cores"], f["--memory"], env["GLINT_WORKER_CORES"], env["GLINT_WORKER_MEMORY"])
			}
			if _, ok := s.DependsOn["master"]; !ok {
				t.Errorf("service %s does not depend on master", name)
			}
		}
		if cmd[0] == "submit" {
			if f["--every"] == "" || len(args) == 0 || args[0] != "pi" {
				t.Errorf("service %s: %v, want glint submit --every … pi", name, cmd)
			}
		}
	}
	if got := service(t, p, "master").Ports; len(got) != 1 || got[0].Target != 7077 || got[0].Published != "7077" {
		t.Errorf("master publishes %v, want 7077:7077", got)
	}
}

// clusterTokenEnv is the environment variable compose reads the cluster
// token from (docker-compose.yml's secret cluster-token; make up sets it).
const clusterTokenEnv = "GLINT_CLUSTER_TOKEN"

// tokenFile is the file a glint service's command reads its token from:
// --token-file, else GLINT_TOKEN_FILE (glint's default for it).
func tokenFile(s types.ServiceConfig) string {
	if cmd := []string(s.Command); len(cmd) > 0 {
		if f, _ := flags(cmd[1:]); f["--token-file"] != "" {
			return f["--token-file"]
		}
	}
	if v := s.Environment["GLINT_TOKEN_FILE"]; v != nil {
		return *v
	}
	return ""
}

// secretTarget is where compose puts a service's secret in its container.
func secretTarget(sec types.ServiceSecretConfig) string {
	switch {
	case sec.Target == "":
		return "/run/secrets/" + sec.Source
	case !strings.HasPrefix(sec.Target, "/"):
		return "/run/secrets/" + sec.Target
	}
	return sec.Target
}

// secretAt is the secret a service has at path in its container, or "".
func secretAt(s types.ServiceConfig, path string) string {
	for _, sec := range s.Secrets {
		if secretTarget(sec) == path {
			return sec.Source
		}
	}
	return ""
}

// Every compose service that runs glint master or worker, and the demo's
// submit, has the cluster token: one Docker secret, the same for all, that
// its --token-file or GLINT_TOKEN_FILE names, the image's user's and
// readable by it alone; none runs with --insecure. A
// master or worker on 0.0.0.0 without a token does not start, so a service
// that lost it would only show when the stack is up.
func TestComposeGlintServicesHaveTheClusterToken(t *testing.T) {
	p := loadCompose(t, "demo")
	final := parseDockerfile(t)
	user, _, _ := strings.Cut(final[len(final)-1].last("USER"), ":")
	secrets := map[string][]string{} // secret → services
	seen := map[string]bool{}
	for _, name := range p.ServiceNames() {
		s := p.Services[name]
		cmd := []string(s.Command)
		if !isGlint(s) || len(cmd) == 0 {
			continue
		}
		if slices.Contains(cmd, "--insecure") || slices.ContainsFunc(cmd, func(a string) bool { return strings.HasPrefix(a, "--insecure=") }) {
			t.Errorf("service %s runs glint with --insecure: anyone who reaches it can run any program on every worker", name)
		}
		if !slices.Contains([]string{"master", "worker", "submit"}, cmd[0]) {
			continue
		}
		seen[cmd[0]] = true
		path := tokenFile(s)
		if path == "" {
			t.Errorf("service %s (glint %s) has no token: set GLINT_TOKEN_FILE to the cluster token's secret (x-glint in docker-compose.yml)", name, cmd[0])
			continue
		}
		secret := secretAt(s, path)
		if secret == "" {
			t.Errorf("service %s reads its token from %s, where it has no secret (it has %v)", name, path, s.Secrets)
			continue
		}
		// Compose's default mode, 0444, is a file glint refuses; a uid or gid
		// makes Docker look the image's user up on the host, which fails.
		if sec := s.Secrets[slices.IndexFunc(s.Secrets, func(sec types.ServiceSecretConfig) bool { return secretTarget(sec) == path })]; sec.UID != "" || sec.GID != "" || sec.Mode == nil || *sec.Mode&0o007 != 0 || *sec.Mode&0o040 == 0 {
			t.Errorf("service %s: secret %s is uid %q gid %q mode %v, want root's (no uid or gid) and readable by its group alone (0440)", name, secret, sec.UID, sec.GID, sec.Mode)
		}
		if user == "0" || !slices.Contains(s.GroupAdd, "0") {
			t.Errorf("service %s runs as user %s with groups %v: want the image's user, not root, in group 0, through which it reads the cluster token", name, user, s.GroupAdd)
		}
		secrets[secret] = append(secrets[secret], name)
	}
	for _, cmd := range []string{"master", "worker", "submit"} {
		if !seen[cmd] {
			t.Errorf("no compose service runs glint %s", cmd)
		}
	}
	if len(secrets) != 1 {
		t.Fatalf("the glint services read their tokens from %v, want one secret (the cluster token) for all", secrets)
	}
	for name := range secrets {
		sec, ok := p.Secrets[name]
		if !ok {
			t.Fatalf("no top-level secret %s", name)
		}
		// The token comes from the environment (make up: deploy/cluster.token),
		// never from a file or a value in the repository.
		if sec.Environment != clusterTokenEnv || sec.File != "" || sec.External {
			t.Errorf("secret %s: environment %q file %q external %v, want environment %s", name, sec.Environment, sec.File, sec.External, clusterTokenEnv)
		}
		if v, ok := p.Environment[sec.Environment]; ok {
			t.Errorf(".env sets %s (%d bytes): a token in the repository is everyone's; leave it to the environment (make up)", sec.Environment, len(v))
		}
	}
}

// make up gives compose the cluster token from a file that git ignores.
func TestMakeUpPassesAnIgnoredClusterToken(t *testing.T) {
	root := tooltest.Root(t)
	b, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	var file, recipe string
	inUp := false
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "CLUSTER_TOKEN :="); ok {
			file = strings.TrimSpace(v)
		}
		switch {
		case strings.HasPrefix(line, "up:"):
			inUp = true
		case inUp && strings.HasPrefix(line, "\t"):
			recipe += line
		default:
			inUp = false
		}
	}
	if file == "" || !strings.Contains(recipe, clusterTokenEnv+`="$$(cat $(CLUSTER_TOKEN))" docker compose`) {
		t.Fatalf("Makefile: CLUSTER_TOKEN %q, up runs %q; want it to pass %s from $(CLUSTER_TOKEN) to docker compose", file, recipe, clusterTokenEnv)
	}
	out, err := exec.Command("git", "-C", root, "check-ignore", "--no-index", file).CombinedOutput()
	if err != nil {
		t.Errorf("git check-ignore %s: %v %s: the cluster token file must be ignored", file, err, out)
	}
}

// Every published port is on a loopback address: the observability tools
// have no authentication, and the master's token is the only thing between
// anyone who reaches 7077 and every worker.
func TestComposePortsArePublishedOnLoopback(t *testing.T) {
	p := loadCompose(t, "demo")
	n := 0
	for _, name := range p.ServiceNames() {
		for _, pc := range p.Services[name].Ports {
			n++
			if !isLoopback(pc.HostIP) {
				t.Errorf("service %s publishes %s on %q, want a loopback address (.env's GLINT_PUBLISH_HOST)", name, pc.Published, pc.HostIP)
			}
		}
	}
	if n == 0 {
		t.Fatal("no published ports")
	}
}

func TestComposeObservabilityServices(t *testing.T) {
	p := loadCompose(t, "demo")
	published := map[string]uint32{"jaeger": 16686, "prometheus": 9090, "grafana": 3000, "pyroscope": 4040}
	for name, port := range published {
		s := service(t, p, name)
		if !slices.ContainsFunc(s.Ports, func(pc types.ServicePortConfig) bool { return pc.Target == port }) {
			t.Errorf("service %s does not publish %d: %v", name, port, s.Ports)
		}
	}
	prom := service(t, p, "prometheus")
	if !slices.Contains(prom.Command, "--enable-feature=exemplar-storage") {
		t.Errorf("prometheus command %v lacks --enable-feature=exemplar-storage", prom.Command)
	}
	grafana := service(t, p, "grafana")
	if v := grafana.Environment["GLINT_ALERT_WEBHOOK_URL"]; v == nil || *v == "" || *v != p.Environment["GLINT_ALERT_WEBHOOK_URL"] {
		t.Errorf("grafana's GLINT_ALERT_WEBHOOK_URL = %v, want .env's", deref(v))
	}
	for target, want := range map[string]string{
		"/etc/grafana/grafana.ini":    "deploy/grafana/grafana.ini",
		"/etc/grafana/provisioning":   "deploy/grafana/provisioning",
		"/var/lib/grafana/dashboards": "dashboards",
	} {
		top := &topology{root: tooltest.Root(t)}
		if got := top.mountSource(grafana, target); got != filepath.Join(top.root, want) {
			t.Errorf("grafana mounts %q at %s, want %s", got, target, want)
		}
	}
}

// Every address a deploy file, command or environment variable names must
// be a port that compose service listens on, for other containers.
func TestAddressesNameListeningServices(t *testing.T) {
	top := newTopology(t)
	files := []string{"deploy/prometheus/prometheus.yml"}
	for _, pattern := range []string{"deploy/otel/*.yaml", "deploy/grafana/provisioning/*/*.yaml", "deploy/grafana/provisioning/*/*.yml"} {
		m, err := filepath.Glob(filepath.Join(top.root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range m {
			rel, _ := filepath.Rel(top.root, path)
			files = append(files, filepath.ToSlash(rel))
		}
	}
	seen := 0
	for _, rel := range files {
		owner := top.owner(rel)
		if owner == "" {
			t.Errorf("%s: no compose service mounts it", rel)
			continue
		}
		yamlAddrs(readYAML(t, filepath.Join(top.root, rel)), "", func(path string, a addr) {
			seen++
			if err := top.check(owner, a); err != nil {
				t.Errorf("%s (%s, in service %s): %v", rel, path, owner, err)
			}
		})
	}
	for _, name := range top.project.ServiceNames() {
		s := top.project.Services[name]
		var values []string
		values = append(values, s.Command...)
		if s.HealthCheck != nil {
			values = append(values, s.HealthCheck.Test...)
		}
		for _, v := range s.Environment {
			if v != nil {
				values = append(values, *v)
			}
		}
		for _, v := range values {
			if a, ok := parseAddr(v); ok {
				seen++
				if err := top.check(name, a); err != nil {
					t.Errorf("service %s: %v", name, err)
				}
			}
		}
	}
	if seen == 0 {
		t.Fatal("found no addresses at all")
	}
}

// owner is the service that mounts a repository file, itself or through a
// directory.
func (top *topology) owner(rel string) string {
	for path := rel; path != "." && path != "/"; path = filepath.ToSlash(filepath.Dir(path)) {
		if s, ok := top.mounts[path]; ok {
			return s
		}
	}
	return ""
}

// The collector's and Jaeger's defaults listen on localhost, which no other
// container reaches: every listener in deploy/otel/*.yaml names its address.
func TestOtelListenersAreExplicit(t *testing.T) {
	root := tooltest.Root(t)
	for _, file := range []string{"deploy/otel/collector.yaml", "deploy/otel/jaeger.yaml"} {
		doc := readYAML(t, filepath.Join(root, file))
		var walk func(n *yaml.Node, path []string)
		walk = func(n *yaml.Node, path []string) {
			if n.Kind == yaml.DocumentNode {
				walk(n.Content[0], path)
				return
			}
			if len(path) > 1 && (path[0] == "receivers" || path[0] == "extensions") && slices.Contains([]string{"grpc", "http"}, path[len(path)-1]) {
				if e := mapValue(n, "endpoint"); e == nil || e.Value == "" {
					t.Errorf("%s: %s has no endpoint: it would listen on its default, localhost", file, strings.Join(path, "."))
				}
			}
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					walk(n.Content[i+1], append(slices.Clone(path), n.Content[i].Value))
				}
			}
		}
		walk(doc, nil)
		yamlAddrs(doc, "", func(path string, a addr) {
			if isLocal(a.host) && a.host != "0.0.0.0" {
				t.Errorf("%s: %s listens on %s, which other containers cannot reach", file, path, a.raw)
			}
		})
	}
}

// The collector names span metrics; Jaeger's Monitor tab and the dashboards
// query them by name. Both configs must produce
// traces_span_metrics_calls_total and traces_span_metrics_duration_seconds_*.
func TestSpanMetricNamesAgree(t *testing.T) {
	root := tooltest.Root(t)
	var collector struct {
		Connectors struct {
			Spanmetrics struct {
				Namespace string
				Histogram struct{ Unit string }
			}
		}
		Exporters map[string]struct {
			TranslationStrategy string `yaml:"translation_strategy"`
		}
	}
	tooltest.ReadYAML(t, filepath.Join(root, "deploy/otel/collector.yaml"), &collector)
	sm := collector.Connectors.Spanmetrics
	prefix := strings.ReplaceAll(sm.Namespace, ".", "_")
	if prefix != "traces_span_metrics" || sm.Histogram.Unit != "s" {
		t.Errorf("collector spanmetrics namespace %q unit %q, want traces.span.metrics and s", sm.Namespace, sm.Histogram.Unit)
	}
	if ts := collector.Exporters["prometheus"].TranslationStrategy; ts != "UnderscoreEscapingWithSuffixes" {
		t.Errorf("collector prometheus exporter translation_strategy %q: names lose their _total/_seconds suffixes", ts)
	}
	var jaeger struct {
		Extensions struct {
			JaegerStorage struct {
				MetricBackends map[string]struct {
					Prometheus struct {
						Endpoint          string
						MetricNamespace   string `yaml:"metric_namespace"`
						LatencyUnit       string `yaml:"latency_unit"`
						NormalizeCalls    bool   `yaml:"normalize_calls"`
						NormalizeDuration bool   `yaml:"normalize_duration"`
					}
				} `yaml:"metric_backends"`
			} `yaml:"jaeger_storage"`
			JaegerQuery struct {
				Storage struct{ Metrics string }
			} `yaml:"jaeger_query"`
		}
	}
	tooltest.ReadYAML(t, filepath.Join(root, "deploy/otel/jaeger.yaml"), &jaeger)
	backend, ok := jaeger.Extensions.JaegerStorage.MetricBackends[jaeger.Extensions.JaegerQuery.Storage.Metrics]
	if !ok {
		t.Fatalf("jaeger_query's metrics storage %q is not a jaeger_storage metric backend", jaeger.Extensions.JaegerQuery.Storage.Metrics)
	}
	names := spmNames(backend.Prometheus.MetricNamespace, backend.Prometheus.LatencyUnit, backend.Prometheus.NormalizeCalls, backend.Prometheus.NormalizeDuration)
	want := []string{"traces_span_metrics_calls_total", "traces_span_metrics_duration_seconds_bucket"}
	if !slices.Equal(names, want) {
		t.Errorf("Jaeger's Monitor tab queries %v, the collector exports %v", names, want)
	}
}

// spmNames are the metric names Jaeger's Prometheus metrics reader queries
// (jaeger internal/storage/metricstore/prometheus/metricstore/reader.go).
func spmNames(namespace, unit string, normalizeCalls, normalizeDuration bool) []string {
	calls, duration := "calls", "duration"
	if namespace != "" {
		calls, duration = namespace+"_"+calls, namespace+"_"+duration
	}
	if normalizeCalls {
		calls += "_total"
	}
	if normalizeDuration {
		duration += "_" + map[string]string{"ms": "milliseconds", "s": "seconds"}[unit]
	}
	return []string{calls, duration + "_bucket"}
}

func deref(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}

// The ha profile runs two masters on one etcd, built from the Dockerfile's
// etcd target, and a worker that follows whichever leads.
func TestComposeHAProfileRunsTwoMastersOnEtcd(t *testing.T) {
	p := loadCompose(t, "ha")
	etcd := service(t, p, "etcd")
	if etcd.Build == nil || etcd.Build.Target != "etcd" {
		t.Errorf("etcd builds %v, want the Dockerfile's etcd target", etcd.Build)
	}
	var masters []string
	for _, name := range []string{"master-ha-1", "master-ha-2"} {
		f, _ := flags([]string(service(t, p, name).Command)[1:])
		if f["--recovery-mode"] != "etcd" || f["--etcd-endpoints"] != "http://etcd:2379" || f["--host"] != name {
			t.Errorf("%s: %v, want --recovery-mode etcd --etcd-endpoints http://etcd:2379 --host %s", name, f, name)
		}
		masters = append(masters, "http://"+name+":7077")
	}
	f, _ := flags([]string(service(t, p, "worker-ha").Command)[1:])
	if f["--master"] != strings.Join(masters, ",") {
		t.Errorf("worker-ha: --master %q, want both HA masters %q", f["--master"], strings.Join(masters, ","))
	}
}
