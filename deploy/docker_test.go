package deploy_test

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/glint-cluster/glint/internal/tooltest"
)

// dockerHost is what make compose-test runs the stack on: a Docker engine
// (the one that answers, or a dockerd it starts and later stops), the
// compose and buildx CLI plugins built from tools/compose in a
// DOCKER_CONFIG of its own (nothing of the user's Docker configuration is
// read or changed), and a cache directory that keeps what is expensive to
// make between runs.
type dockerHost struct {
	root   string
	cache  string   // under the user's cache directory
	config string   // DOCKER_CONFIG: cli-plugins only
	env    []string // every docker command's environment
	// daemon is the dockerd this run started or found left by a killed
	// run; nil when the engine was running already (it is left running).
	daemon *os.Process
	exited chan struct{} // closed when a daemon this run started exits
}

// daemonPidFile, in the cache, names the dockerd a run started, so that a
// later run stops one that a killed run left.
const daemonPidFile = "dockerd.pid"

func newDockerHost(t *testing.T) *dockerHost {
	t.Helper()
	dir, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	h := &dockerHost{root: tooltest.Root(t), cache: filepath.Join(dir, "glint", "compose-test")}
	if h.config, err = os.MkdirTemp("", "glint-docker-config-"); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{h.cache, filepath.Join(h.config, "cli-plugins")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "DOCKER_CONFIG" && k != "DOCKER_BUILDKIT" && !strings.HasPrefix(k, "COMPOSE_") && !strings.HasPrefix(k, "BUILDX_") {
			h.env = append(h.env, kv)
		}
	}
	h.env = append(h.env, "DOCKER_CONFIG="+h.config, "DOCKER_BUILDKIT=1")
	return h
}

// run runs a command with the host's environment plus env, its output
// going to the test's output as it comes (image builds print their
// progress), and fails the test if it fails.
func (h *dockerHost) run(t *testing.T, dir string, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, append(slices.Clone(h.env), env...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	t.Logf("%s %s: took %s", filepath.Base(name), describe(args), time.Since(start).Round(time.Second))
}

// output runs a command and returns its standard output; its standard error
// is in the error.
func (h *dockerHost) output(ctx context.Context, dir string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, h.env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// describe is a command line's arguments without the flags every command of
// its kind repeats (compose's project, files and profiles, build args) and
// the paths, for the test's log.
func describe(args []string) string {
	var out []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case slices.Contains([]string{"-p", "-f", "--profile", "--build-arg", "-o"}, a):
			i++
		case strings.HasPrefix(a, "/") || strings.HasPrefix(a, "-ldflags="):
		default:
			out = append(out, a)
		}
	}
	return strings.Join(out, " ")
}

// answers reports whether a Docker engine answers the docker CLI.
func (h *dockerHost) answers() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := h.output(ctx, "", "docker", "version", "--format", "{{.Server.Version}}")
	return err == nil && strings.TrimSpace(out) != ""
}

// engine makes sure a Docker engine answers: the running one, or a dockerd
// started here (logging to the cache's dockerd.log) that stop ends. A
// dockerd that a killed run started, named by the cache's pid file, is
// taken over and stopped too.
func (h *dockerHost) engine(t *testing.T) {
	t.Helper()
	pidFile := filepath.Join(h.cache, daemonPidFile)
	if b, err := os.ReadFile(pidFile); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && isDockerd(pid) {
			h.daemon, _ = os.FindProcess(pid)
			t.Logf("dockerd (pid %d), started by an earlier run that did not stop it, is stopped at the end of this one", pid)
		}
	}
	if h.answers() {
		if h.daemon == nil {
			t.Log("using the Docker engine that answers (left running)")
		}
		return
	}
	if h.daemon != nil {
		t.Fatalf("dockerd (pid %d) runs but does not answer; see %s", h.daemon.Pid, filepath.Join(h.cache, "dockerd.log"))
	}
	dockerd, err := exec.LookPath("dockerd")
	if err != nil {
		t.Fatal("no Docker engine answers and there is no dockerd to start: make compose-test installs Debian's docker.io when run as root")
	}
	logPath := filepath.Join(h.cache, "dockerd.log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(dockerd, "--log-level=warn")
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group: an interrupt of make reaches the test, which
	// takes the stack down first and then stops the daemon.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start dockerd: %v", err)
	}
	h.daemon, h.exited = cmd.Process, make(chan struct{})
	go func() { _ = cmd.Wait(); close(h.exited) }()
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("started dockerd (pid %d), logging to %s", cmd.Process.Pid, logPath)
	deadline := time.Now().Add(2 * time.Minute)
	for !h.answers() {
		select {
		case <-h.exited:
			t.Fatalf("dockerd exited:\n%s", tail(logPath, 30))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("dockerd does not answer after 2 minutes:\n%s", tail(logPath, 30))
		}
		time.Sleep(time.Second)
	}
}

// stop ends the dockerd this run started or took over, if any.
func (h *dockerHost) stop() {
	if h.daemon != nil {
		_ = h.daemon.Signal(syscall.SIGTERM)
		if !waitExit(h.daemon.Pid, h.exited, time.Minute) {
			_ = h.daemon.Kill()
			waitExit(h.daemon.Pid, h.exited, 10*time.Second)
		}
		_ = os.Remove(filepath.Join(h.cache, daemonPidFile))
		fmt.Fprintf(os.Stderr, "stopped dockerd (pid %d)\n", h.daemon.Pid)
		h.daemon = nil
	}
	_ = os.RemoveAll(h.config)
}

// waitExit waits until process pid is gone: exited closes for a child of
// this process (reaped by its Wait), else /proc tells.
func waitExit(pid int, exited chan struct{}, d time.Duration) bool {
	deadline := time.After(d)
	for {
		if exited != nil {
			select {
			case <-exited:
				return true
			case <-deadline:
				return false
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		if !isDockerd(pid) {
			return true
		}
		select {
		case <-deadline:
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// isDockerd reports whether pid is a running dockerd.
func isDockerd(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	// A zombie (state Z) has exited.
	if state, err := tooltest.ProcState(pid); err == nil && state == 'Z' {
		return false
	}
	arg0, _, _ := bytes.Cut(b, []byte{0})
	return filepath.Base(string(arg0)) == "dockerd"
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// plugins builds docker compose and docker buildx (compose builds images
// through buildx bake) from tools/compose/go.mod into the cache, with their
// versions stamped as their releases are (compose checks buildx's), and
// installs them as CLI plugins of the host's DOCKER_CONFIG.
func (h *dockerHost) plugins(t *testing.T) {
	t.Helper()
	mod := filepath.Join(h.root, "tools", "compose")
	for _, p := range []struct{ plugin, module, pkg, versionVar string }{
		{"docker-compose", "github.com/docker/compose/v5", "github.com/docker/compose/v5/cmd", "github.com/docker/compose/v5/internal.Version"},
		{"docker-buildx", "github.com/docker/buildx", "github.com/docker/buildx/cmd/buildx", "github.com/docker/buildx/version.Version"},
	} {
		version, err := h.output(context.Background(), mod, "go", "list", "-m", "-f", "{{.Version}}", p.module)
		if err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(h.cache, "bin", p.plugin)
		h.run(t, mod, nil, "go", "build", "-trimpath", "-ldflags=-s -w -X "+p.versionVar+"="+strings.TrimSpace(version), "-o", bin, p.pkg)
		if err := os.Symlink(bin, filepath.Join(h.config, "cli-plugins", p.plugin)); err != nil {
			t.Fatal(err)
		}
	}
}

// moduleDir is where a tools module's dependency module is in the module cache.
func (h *dockerHost) moduleDir(t *testing.T, modfile, module string) string {
	t.Helper()
	out, err := h.output(context.Background(), h.root, "go", "list", "-modfile="+filepath.Join(h.root, modfile), "-m", "-f", "{{.Dir}}", module)
	if err != nil || strings.TrimSpace(out) == "" {
		t.Fatalf("module %s of %s: %v", module, modfile, err)
	}
	return strings.TrimSpace(out)
}

// collector builds the collector tools/otelcol/builder.yaml describes with
// the OpenTelemetry Collector Builder, in the cache; a binary built from the
// same file is reused.
func (h *dockerHost) collector(t *testing.T) string {
	t.Helper()
	config := filepath.Join(h.root, "tools", "otelcol", "builder.yaml")
	dir := filepath.Join(h.cache, "otelcol")
	want, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	var dist struct {
		Dist struct {
			Name       string
			OutputPath string `yaml:"output_path"`
		}
	}
	tooltest.ReadYAML(t, config, &dist)
	bin := filepath.Join(dir, dist.Dist.OutputPath, dist.Dist.Name)
	stamp := filepath.Join(dir, "builder.yaml")
	if got, err := os.ReadFile(stamp); err == nil && bytes.Equal(got, want) {
		if _, err := os.Stat(bin); err == nil {
			return bin
		}
	}
	t.Logf("building the OpenTelemetry Collector Builder and with it the collector (%s)", config)
	builder := tooltest.Binary(t, "tools/otelcol/go.mod", "builder")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	h.run(t, dir, []string{"CGO_ENABLED=0"}, builder, "--config="+config)
	if err := os.WriteFile(stamp, want, 0o644); err != nil {
		t.Fatal(err)
	}
	return bin
}

// goProxy is a file module proxy (GOPROXY=file://…) with every module the
// Dockerfile's `go mod download` fetches: the download cache of a module
// cache of its own, filled from the host's module cache first.
func (h *dockerHost) goProxy(t *testing.T) string {
	t.Helper()
	modcache := filepath.Join(h.cache, "gomodcache")
	hostCache, err := h.output(context.Background(), h.root, "go", "env", "GOMODCACHE", "GOPROXY")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(hostCache)
	proxy := "file://" + filepath.Join(lines[0], "cache", "download")
	if len(lines) > 1 && lines[1] != "off" {
		proxy += "," + lines[1]
	}
	h.run(t, h.root, []string{"GOMODCACHE=" + modcache, "GOFLAGS=-modcacherw", "GOPROXY=" + proxy}, "go", "mod", "download")
	return filepath.Join(modcache, "cache", "download")
}

// localImage is an image deploy/images/NAME/Dockerfile builds from a
// context of files put together in the cache.
type localImage struct {
	name  string            // the recipe's directory under deploy/images
	ref   string            // what it is tagged
	files map[string]string // context path → file or directory on this machine
}

// build puts together img's context (the recipe's own files, then
// img.files, hard-linked where it can) and builds it, printing progress,
// with BUSYBOX_IMAGE naming the busybox base.
func (h *dockerHost) build(t *testing.T, img localImage, busybox string) {
	t.Helper()
	recipe := filepath.Join(h.root, "deploy", "images", img.name)
	ctxDir := filepath.Join(h.cache, "images", img.name)
	if err := os.RemoveAll(ctxDir); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(recipe)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, e := range entries {
		if e.Name() != "Dockerfile" {
			files[e.Name()] = filepath.Join(recipe, e.Name())
		}
	}
	for dst, src := range img.files {
		files[dst] = src
	}
	for dst, src := range files {
		if err := linkTree(src, filepath.Join(ctxDir, dst)); err != nil {
			t.Fatalf("image %s: %v", img.name, err)
		}
	}
	t.Logf("building image %s (deploy/images/%s)", img.ref, img.name)
	h.run(t, h.root, nil, "docker", "build", "--progress=plain", "--build-arg", "BUSYBOX_IMAGE="+busybox,
		"-t", img.ref, "-f", filepath.Join(recipe, "Dockerfile"), ctxDir)
}

// linkTree makes dst a copy of the file or tree src: hard links where the
// file system allows, else copies; modes are kept.
func linkTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(out, info.Mode().Perm()|0o700)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, out)
		}
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		if err := os.Link(p, out); err == nil {
			return nil
		}
		return copyFile(p, out, info.Mode().Perm())
	})
}

func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// requireStatic fails unless bin is a static executable: the local bases
// have no C library.
func requireStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatalf("%s is linked dynamically; the local images need a static binary", bin)
		}
	}
}

// sharedLibraries are the shared libraries bins load, with their loader:
// the path each is loaded from → the file it is.
func sharedLibraries(t *testing.T, bins ...string) map[string]string {
	t.Helper()
	libs := map[string]string{}
	for _, bin := range bins {
		out, err := exec.Command("ldd", bin).Output()
		if err != nil {
			t.Fatalf("ldd %s: %v", bin, err)
		}
		for line := range strings.Lines(string(out)) {
			f := strings.Fields(line)
			var lib string
			switch {
			case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
				lib = f[2]
			case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
				lib = f[0] // the loader
			default:
				continue // the vDSO
			}
			file, err := filepath.EvalSymlinks(lib)
			if err != nil {
				t.Fatal(err)
			}
			libs[lib] = file
		}
	}
	return libs
}

// localRef is the tag of the local build standing for image (an .env
// image reference): glint-local/ its last path element, : its tag.
func localRef(image string) string {
	tag := "local"
	if ref, _, _ := strings.Cut(image, "@"); strings.LastIndex(ref, ":") > strings.LastIndex(ref, "/") {
		tag = ref[strings.LastIndex(ref, ":")+1:]
	}
	return "glint-local/" + path.Base(imageRepo(image)) + ":" + tag
}

// localImages builds every image the stack needs that no registry can give
// here, and returns the .env image variables pointed at them.
func (h *dockerHost) localImages(t *testing.T, envFile map[string]string) []string {
	t.Helper()
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatal("no busybox: make compose-test installs Debian's busybox-static when run as root")
	}
	requireStatic(t, busybox)
	const caBundle = "/etc/ssl/certs/ca-certificates.crt"
	if _, err := os.Stat(caBundle); err != nil {
		t.Fatalf("no CA bundle: %v", err)
	}
	goVersion, err := h.output(context.Background(), h.root, "go", "env", "GOVERSION", "GOROOT")
	if err != nil {
		t.Fatal(err)
	}
	goEnv := strings.Fields(goVersion)
	if want := "go" + strings.TrimPrefix(localRef(envFile["GLINT_GO_IMAGE"]), "glint-local/golang:"); goEnv[0] != want {
		t.Fatalf("this machine's Go is %s; GLINT_GO_IMAGE %s needs %s", goEnv[0], envFile["GLINT_GO_IMAGE"], want)
	}

	// Jaeger and Prometheus as make test builds them (Go's build cache
	// has them then), which links the C library: the busybox base carries
	// this machine's, as quay.io/prometheus/busybox carries glibc.
	tool := func(modfile, name string) string {
		start := time.Now()
		t.Logf("building %s from %s (from Go's build cache once make test has built it)", name, modfile)
		bin := tooltest.Binary(t, modfile, name)
		t.Logf("built %s: took %s", name, time.Since(start).Round(time.Second))
		return bin
	}
	jaeger := tool("tools/jaeger/go.mod", "jaeger")
	prometheus := tool("tools/go.mod", "prometheus")
	promtool := tool("tools/go.mod", "promtool")
	otelcol := h.collector(t)
	requireStatic(t, otelcol)
	jaegerDir := h.moduleDir(t, "tools/jaeger/go.mod", "github.com/jaegertracing/jaeger")
	promDir := h.moduleDir(t, "tools/go.mod", "github.com/prometheus/prometheus")

	bb := localImage{name: "busybox", ref: "glint-local/busybox:compose-test", files: map[string]string{"busybox": busybox, "ca-certificates.crt": caBundle}}
	for dst, src := range sharedLibraries(t, jaeger, prometheus, promtool) {
		bb.files[filepath.Join("glibc", dst)] = src
	}
	images := []localImage{
		bb,
		{name: "static", ref: localRef(envFile["GLINT_BASE_IMAGE"])},
		{name: "go", ref: localRef(envFile["GLINT_GO_IMAGE"]), files: map[string]string{"go": goEnv[1], "goproxy": h.goProxy(t)}},
		{name: "jaeger", ref: localRef(envFile["JAEGER_IMAGE"]), files: map[string]string{
			"jaeger-linux": jaeger, "sampling-strategies.json": filepath.Join(jaegerDir, "cmd", "jaeger", "sampling-strategies.json")}},
		{name: "prometheus", ref: localRef(envFile["PROMETHEUS_IMAGE"]), files: map[string]string{
			"prometheus": prometheus, "promtool": promtool,
			"prometheus.yml": filepath.Join(promDir, "documentation", "examples", "prometheus.yml"),
			"LICENSE":        filepath.Join(promDir, "LICENSE"), "NOTICE": filepath.Join(promDir, "NOTICE")}},
		{name: "otelcol", ref: localRef(envFile["OTEL_COLLECTOR_IMAGE"]), files: map[string]string{"otelcol-contrib": otelcol}},
	}
	for _, img := range images {
		h.build(t, img, bb.ref)
	}
	return []string{
		"GLINT_BASE_IMAGE=" + images[1].ref,
		"GLINT_GO_IMAGE=" + images[2].ref,
		"JAEGER_IMAGE=" + images[3].ref,
		"PROMETHEUS_IMAGE=" + images[4].ref,
		"OTEL_COLLECTOR_IMAGE=" + images[5].ref,
	}
}
