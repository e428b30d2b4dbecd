package deploy_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v3"

	"github.com/glint-cluster/glint/internal/tooltest"
)

// glintRepo is the image repository docker-compose.yml and deploy/k8s run Glint from.
const glintRepo = "ghcr.io/glint-cluster/glint"

// loadCompose loads docker-compose.yml the way `docker compose --profile …`
// does in the repository, with the repository's .env and nothing from the
// test's own environment.
func loadCompose(t testing.TB, profiles ...string) *types.Project {
	t.Helper()
	root := tooltest.Root(t)
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, "docker-compose.yml")},
		cli.WithWorkingDirectory(root),
		cli.WithEnvFiles(filepath.Join(root, ".env")),
		cli.WithDotEnv,
		cli.WithProfiles(profiles),
	)
	if err != nil {
		t.Fatalf("compose options: %v", err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("load docker-compose.yml: %v", err)
	}
	return p
}

func service(t testing.TB, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, err := p.GetService(name)
	if err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return s
}

// imageRepo is an image reference without its tag and digest.
func imageRepo(image string) string {
	image, _, _ = strings.Cut(image, "@")
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		image = image[:i]
	}
	return image
}

// pinned reports whether an image reference names an explicit version: a
// tag other than "latest", or a digest.
func pinned(image string) bool {
	if _, digest, ok := strings.Cut(image, "@"); ok {
		return strings.HasPrefix(digest, "sha256:") && len(digest) == len("sha256:")+64
	}
	i := strings.LastIndex(image, ":")
	if i < strings.LastIndex(image, "/") || i < 0 {
		return false
	}
	tag := image[i+1:]
	return tag != "" && tag != "latest"
}

// flags splits a command line's arguments after its subcommand into flags
// ("--name value", "--name=value", "-name=value") and positional arguments.
// Every flag the deploy files use takes a value.
func flags(args []string) (map[string]string, []string) {
	out := map[string]string{}
	var positional []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			positional = append(positional, args[i:]...)
			break
		}
		if name, value, ok := strings.Cut(a, "="); ok {
			out[name] = value
			continue
		}
		if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			out[a] = args[i+1]
			i++
			continue
		}
		out[a] = "true"
	}
	return out, positional
}

// glintDefaultListen is each long-running glint command's default --listen (README).
var glintDefaultListen = map[string]string{"master": ":7077", "worker": ":7078"}

// isGlint reports whether a compose service runs the Glint image.
func isGlint(s types.ServiceConfig) bool { return imageRepo(s.Image) == glintRepo }

// addr is an address found in a deploy file, a command or an environment
// variable: a URL's host, or a bare host:port.
type addr struct {
	host string
	port int
	raw  string // the host:port as written, e.g. ":7078", "jaeger:4317"
}

var bareHostPort = regexp.MustCompile(`^(|[A-Za-z][A-Za-z0-9_.-]*|\d+\.\d+\.\d+\.\d+|\[[0-9a-fA-F:]*\]):(\d{1,5})$`)

// parseAddr returns the address s names, if it is a URL with a host or a
// bare host:port. A URL without a port has its scheme's.
func parseAddr(s string) (addr, bool) {
	if u, err := url.Parse(s); err == nil && u.Host != "" && slices.Contains([]string{"http", "https", "grpc"}, u.Scheme) {
		p := u.Port()
		if p == "" {
			p = map[string]string{"http": "80", "https": "443", "grpc": "443"}[u.Scheme]
		}
		port, err := strconv.Atoi(p)
		if err != nil {
			return addr{}, false
		}
		return addr{host: u.Hostname(), port: port, raw: u.Host}, true
	}
	m := bareHostPort.FindStringSubmatch(s)
	if m == nil {
		return addr{}, false
	}
	port, _ := strconv.Atoi(m[2])
	return addr{host: strings.Trim(m[1], "[]"), port: port, raw: s}, true
}

// isLocal reports whether host means "this container" (a listen address or
// a call to itself).
func isLocal(host string) bool {
	return slices.Contains([]string{"", "0.0.0.0", "::", "localhost", "127.0.0.1", "::1"}, host)
}

// isLoopback reports whether a listener on host is reachable only from its
// own container.
func isLoopback(host string) bool {
	return slices.Contains([]string{"localhost", "127.0.0.1", "::1"}, host)
}

// yamlAddrs calls visit for every address in a YAML tree: scalars that are
// URLs or host:port, and mappings with host and port keys (the collector's
// telemetry readers). path is the dotted path of keys to the value.
func yamlAddrs(n *yaml.Node, path string, visit func(path string, a addr)) {
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			yamlAddrs(c, path, visit)
		}
	case yaml.MappingNode:
		if host, port := mapValue(n, "host"), mapValue(n, "port"); host != nil && port != nil {
			if p, err := strconv.Atoi(port.Value); err == nil {
				visit(path, addr{host: host.Value, port: p, raw: host.Value + ":" + port.Value})
			}
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			yamlAddrs(n.Content[i+1], strings.TrimPrefix(path+"."+n.Content[i].Value, "."), visit)
		}
	case yaml.ScalarNode:
		if a, ok := parseAddr(n.Value); ok {
			visit(path, a)
		}
	}
}

func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func readYAML(t testing.TB, path string) *yaml.Node {
	t.Helper()
	var doc yaml.Node
	tooltest.ReadYAML(t, path, &doc)
	return &doc
}

// listener is a port a compose service serves on.
type listener struct {
	port     int
	loopback bool   // bound to the container's loopback: other containers cannot reach it
	from     string // where it is set
}

// topology is docker-compose.yml with what each service listens on and
// which repository files it mounts.
type topology struct {
	root    string
	project *types.Project
	listens map[string][]listener
	// mounts maps a bind-mounted repository path (relative, slash-separated)
	// to the service that mounts it.
	mounts map[string]string
}

func newTopology(t testing.TB) *topology {
	t.Helper()
	p := loadCompose(t, "demo")
	top := &topology{root: tooltest.Root(t), project: p, listens: map[string][]listener{}, mounts: map[string]string{}}
	for _, name := range p.ServiceNames() {
		s := p.Services[name]
		for _, v := range s.Volumes {
			if v.Type == types.VolumeTypeBind {
				rel, err := filepath.Rel(top.root, v.Source)
				if err != nil || strings.HasPrefix(rel, "..") {
					t.Errorf("service %s mounts %s, outside the repository", name, v.Source)
					continue
				}
				top.mounts[filepath.ToSlash(rel)] = name
			}
		}
		top.listens[name] = top.listenersOf(t, s)
	}
	return top
}

// mountSource is the repository file a service mounts at target, or "".
func (top *topology) mountSource(s types.ServiceConfig, target string) string {
	for _, v := range s.Volumes {
		if v.Type == types.VolumeTypeBind && v.Target == target {
			return v.Source
		}
	}
	return ""
}

// listenersOf derives a service's listening ports from its command and the
// config file it mounts, or from its image's documented default.
func (top *topology) listenersOf(t testing.TB, s types.ServiceConfig) []listener {
	t.Helper()
	cmd := []string(s.Command)
	switch repo := imageRepo(s.Image); repo {
	case glintRepo:
		if len(cmd) == 0 {
			t.Errorf("service %s: no glint command", s.Name)
			return nil
		}
		f, _ := flags(cmd[1:])
		listen, ok := f["--listen"]
		if !ok {
			listen, ok = glintDefaultListen[cmd[0]]
		}
		if !ok {
			return nil // submit: its driver listens on an ephemeral port
		}
		a, ok := parseAddr(listen)
		if !ok {
			t.Errorf("service %s: --listen %q is not host:port", s.Name, listen)
			return nil
		}
		return []listener{{port: a.port, loopback: isLoopback(a.host), from: "--listen " + listen}}
	case "otel/opentelemetry-collector-contrib", "jaegertracing/jaeger":
		f, _ := flags(cmd)
		config := strings.TrimPrefix(f["--config"], "file:")
		src := top.mountSource(s, config)
		if src == "" {
			t.Errorf("service %s: --config %q is not a file it mounts", s.Name, config)
			return nil
		}
		var out []listener
		yamlAddrs(readYAML(t, src), "", func(path string, a addr) {
			if isLocal(a.host) {
				out = append(out, listener{port: a.port, loopback: isLoopback(a.host), from: filepath.Base(src) + " " + path})
			}
		})
		return out
	case "prom/prometheus":
		f, _ := flags(cmd)
		listen := orDefault(f["--web.listen-address"], "0.0.0.0:9090") // Prometheus' default
		a, ok := parseAddr(listen)
		if !ok {
			t.Errorf("service %s: --web.listen-address %q is not host:port", s.Name, listen)
			return nil
		}
		return []listener{{port: a.port, loopback: isLoopback(a.host), from: "--web.listen-address " + listen}}
	case "grafana/grafana":
		port := 3000 // Grafana's default [server] http_port
		if ini := top.mountSource(s, "/etc/grafana/grafana.ini"); ini != "" {
			if p, ok := iniValue(t, ini, "server", "http_port"); ok {
				port, _ = strconv.Atoi(p)
			}
		}
		return []listener{{port: port, from: "grafana.ini [server] http_port"}}
	case "grafana/pyroscope":
		f, _ := flags(cmd)
		port, err := strconv.Atoi(orDefault(f["-server.http-listen-port"], "4040")) // Pyroscope's default
		if err != nil {
			t.Errorf("service %s: -server.http-listen-port: %v", s.Name, err)
		}
		return []listener{{port: port, from: "-server.http-listen-port"}}
	default:
		t.Errorf("service %s: image %s: deploy_test does not know what it listens on; add it to listenersOf", s.Name, repo)
		return nil
	}
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// iniValue reads key in [section] of an ini file, if the file exists.
func iniValue(t testing.TB, path, section, key string) (string, bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return "", false
	}
	current := ""
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			current = strings.Trim(line, "[]")
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok && current == section && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// reachable reports whether service listens on port for other containers,
// and says what it does listen on otherwise.
func (top *topology) reachable(service string, port int) error {
	s, ok := top.project.Services[service]
	if !ok {
		return fmt.Errorf("no compose service %q", service)
	}
	var open []string
	for _, l := range top.listens[s.Name] {
		if l.port == port && !l.loopback {
			return nil
		}
		note := l.from
		if l.loopback {
			note += ", loopback only"
		}
		open = append(open, fmt.Sprintf("%d (%s)", l.port, note))
	}
	return fmt.Errorf("service %s does not listen on %d for other containers; it listens on %v", service, port, open)
}

// listensOn reports whether service listens on port at all (a call to itself).
func (top *topology) listensOn(service string, port int) bool {
	return slices.ContainsFunc(top.listens[service], func(l listener) bool { return l.port == port })
}

// check returns why a reaches nothing, said from owner's point of view: a
// local host must be a port owner listens on, another host a compose
// service (or one of owner's extra_hosts) listening on that port.
func (top *topology) check(owner string, a addr) error {
	if isLocal(a.host) {
		if !top.listensOn(owner, a.port) {
			return fmt.Errorf("%s: service %s does not listen on %d", a.raw, owner, a.port)
		}
		return nil
	}
	if _, ok := top.project.Services[owner].ExtraHosts[a.host]; ok {
		return nil // outside the compose project, by name
	}
	if err := top.reachable(a.host, a.port); err != nil {
		return fmt.Errorf("%s: %w", a.raw, err)
	}
	return nil
}
