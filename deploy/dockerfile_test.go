package deploy_test

import (
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/glint-cluster/glint/internal/tooltest"
	"github.com/glint-cluster/glint/pkg/child"
)

// binDir holds what the tests build once for the whole package: glint and
// glint-executor, as the Dockerfile builds them.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "glint-deploy-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, …
	args string
}

// stage is a FROM and the instructions up to the next one.
type stage struct {
	// image is the FROM image with the Dockerfile's global ARGs at their
	// defaults; from is the FROM image as written (e.g. ${BASE_IMAGE}).
	image, from, name string
	instrs            []instruction
}

func (s stage) all(cmd string) []string {
	var out []string
	for _, in := range s.instrs {
		if in.cmd == cmd {
			out = append(out, in.args)
		}
	}
	return out
}

func (s stage) last(cmd string) string {
	all := s.all(cmd)
	if len(all) == 0 {
		return ""
	}
	return all[len(all)-1]
}

func parseDockerfile(t testing.TB) []stage {
	t.Helper()
	stages, _ := parseDockerfileArgs(t)
	return stages
}

// parseDockerfileArgs returns the Dockerfile's stages and its global ARGs
// (those before the first FROM, which FROM lines may use) with their defaults.
func parseDockerfileArgs(t testing.TB) ([]stage, map[string]string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(tooltest.Root(t), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var stages []stage
	globals := map[string]string{}
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		cmd, args, _ := strings.Cut(line, " ")
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			f := shellFields(in.args)
			f = slices.DeleteFunc(f, func(s string) bool { return strings.HasPrefix(s, "--") })
			st := stage{from: f[0], image: os.Expand(f[0], func(name string) string { return globals[name] })}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			}
			stages = append(stages, st)
			return
		}
		if len(stages) == 0 {
			if in.cmd != "ARG" {
				t.Errorf("Dockerfile: %s before FROM", in.cmd)
			}
			name, value, _ := strings.Cut(in.args, "=")
			globals[name] = value
			return
		}
		stages[len(stages)-1].instrs = append(stages[len(stages)-1].instrs, in)
	}
	for line := range strings.Lines(string(b)) {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		if body, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(trimmed)
		flush()
	}
	flush()
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stages, want a build stage and a runtime stage", len(stages))
	}
	return stages, globals
}

// shellFields splits a shell command line into words, honouring quotes and
// backslashes (no expansion).
func shellFields(s string) []string {
	var out []string
	var cur strings.Builder
	inWord, quote := false, byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case c == '\'' || c == '"':
			quote, inWord = c, true
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			inWord = true
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out
}

// goBuild finds the RUN that builds glint and returns its environment
// assignments and `go build` arguments.
func goBuild(t testing.TB, stages []stage) (env map[string]string, args []string) {
	t.Helper()
	for _, st := range stages {
		for _, run := range st.all("RUN") {
			words := shellFields(run)
			i := slices.Index(words, "go")
			if i < 0 || i+1 >= len(words) || words[i+1] != "build" {
				continue
			}
			env = map[string]string{}
			for _, w := range words[:i] {
				if k, v, ok := strings.Cut(w, "="); ok && !strings.HasPrefix(k, "-") {
					env[k] = v
				}
			}
			args = words[i+2:]
			if j := slices.IndexFunc(args, func(w string) bool { return w == "&&" || w == ";" }); j >= 0 {
				args = args[:j]
			}
			return env, args
		}
	}
	t.Fatal("Dockerfile: no RUN … go build")
	return nil, nil
}

func TestDockerfile(t *testing.T) {
	stages := parseDockerfile(t)
	names := map[string]bool{}
	for _, st := range stages {
		if !names[st.image] && st.image != "scratch" && !pinned(st.image) {
			t.Errorf("Dockerfile: FROM %s has no version tag (other than latest) or digest", st.image)
		}
		if st.name != "" {
			names[st.name] = true
		}
	}

	env, args := goBuild(t, stages)
	if env["CGO_ENABLED"] != "0" {
		t.Errorf("Dockerfile builds glint with CGO_ENABLED=%q, want 0 (a static binary for distroless/static)", env["CGO_ENABLED"])
	}
	if !slices.Contains(args, "-trimpath") || !slices.Contains(args, "./cmd/glint") || !slices.Contains(args, "./cmd/glint-executor") {
		t.Errorf("Dockerfile: go build %v, want -trimpath … ./cmd/glint ./cmd/glint-executor", args)
	}

	final := stages[len(stages)-1]
	if uid, _, _ := strings.Cut(final.last("USER"), ":"); uid == "" || uid == "0" || uid == "root" {
		t.Errorf("Dockerfile: the image runs as user %q, want a non-root user", final.last("USER"))
	}
	var entrypoint []string
	if err := json.Unmarshal([]byte(final.last("ENTRYPOINT")), &entrypoint); err != nil || !slices.Equal(entrypoint, []string{"glint"}) {
		t.Errorf("Dockerfile: ENTRYPOINT %s, want [\"glint\"]", final.last("ENTRYPOINT"))
	}
	// Healthchecks run `glint health …` without the entrypoint: glint must be on PATH.
	if !slices.ContainsFunc(final.all("COPY"), func(c string) bool { return strings.HasSuffix(c, " /usr/local/bin/glint") }) {
		t.Errorf("Dockerfile: glint is not copied to /usr/local/bin/glint (on PATH, for `glint health`)")
	}
	// Beside glint, where its workers' executors are started from.
	if !slices.ContainsFunc(final.all("COPY"), func(c string) bool { return strings.HasSuffix(c, " /usr/local/bin/glint"+child.ExecutorSuffix) }) {
		t.Errorf("Dockerfile: glint-executor is not copied to /usr/local/bin/glint-executor, beside glint")
	}

	// The image agrees with docker-compose.yml: the ports its glint services
	// listen on, and the workers' work dir.
	top := newTopology(t)
	var composePorts []int
	for _, name := range top.project.ServiceNames() {
		s := top.project.Services[name]
		if !isGlint(s) {
			continue
		}
		for _, l := range top.listens[name] {
			composePorts = append(composePorts, l.port)
		}
		if cmd := []string(s.Command); len(cmd) > 0 && cmd[0] == "worker" {
			if f, _ := flags(cmd[1:]); f["--work-dir"] != final.last("WORKDIR") {
				t.Errorf("service %s: --work-dir %q, the image's work dir (writable by its user) is %q", name, f["--work-dir"], final.last("WORKDIR"))
			}
		}
	}
	if got, want := exposed(t, final), sortedUnique(composePorts); !slices.Equal(got, want) {
		t.Errorf("Dockerfile EXPOSE %v, compose's glint services listen on %v", got, want)
	}
}

func exposed(t testing.TB, st stage) []int {
	t.Helper()
	var ports []int
	for _, e := range st.all("EXPOSE") {
		for _, f := range strings.Fields(e) {
			p, err := strconv.Atoi(strings.TrimSuffix(f, "/tcp"))
			if err != nil {
				t.Errorf("Dockerfile: EXPOSE %s: %v", f, err)
			}
			ports = append(ports, p)
		}
	}
	return sortedUnique(ports)
}

func sortedUnique(s []int) []int {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

var glintBuild struct {
	sync.Mutex
	path string
}

// glintBinary builds glint, with glint-executor beside it, with the
// Dockerfile's own `go build` line (for this machine's OS and architecture)
// once per test run.
func glintBinary(t testing.TB) string {
	t.Helper()
	glintBuild.Lock()
	defer glintBuild.Unlock()
	if glintBuild.path != "" {
		return glintBuild.path
	}
	env, args := goBuild(t, parseDockerfile(t))
	out := filepath.Join(binDir, "glint")
	args = slices.Clone(args)
	if i := slices.Index(args, "-o"); i >= 0 && i+1 < len(args) {
		args[i+1] = binDir + string(filepath.Separator)
	} else {
		args = append([]string{"-o", binDir + string(filepath.Separator)}, args...)
	}
	cmd := exec.Command("go", append([]string{"build"}, args...)...)
	cmd.Dir = tooltest.Root(t)
	cmd.Env = os.Environ()
	for k, v := range env {
		if strings.HasPrefix(v, "$") {
			continue // the target platform: here, this machine's
		}
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %v as the Dockerfile does: %v\n%s", args, err, b)
	}
	glintBuild.path = out
	return out
}

// distroless/static has no C library: glint and glint-executor must not need one.
func TestDockerfileBuildsStaticGlint(t *testing.T) {
	glint := glintBinary(t)
	for _, bin := range []string{glint, glint + child.ExecutorSuffix} {
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s built as the Dockerfile does has a dynamic loader (PT_INTERP)", filepath.Base(bin))
			}
		}
		if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
			t.Errorf("%s built as the Dockerfile does needs shared libraries %v (%v)", filepath.Base(bin), libs, err)
		}
		f.Close()
	}
}

// The Dockerfile's base images are its global ARGs, with pinned defaults,
// and docker-compose.yml passes .env's values of them, equal to those
// defaults, to both images it builds: make compose-test points them at local
// builds (no registry), while users build on the images the defaults name.
func TestDockerfileBaseImagesAreArgsComposePassesFromEnv(t *testing.T) {
	stages, args := parseDockerfileArgs(t)
	names := map[string]bool{}
	bases := map[string]bool{}
	for _, st := range stages {
		if !names[st.from] && st.from != "scratch" {
			name, ok := strings.CutPrefix(st.from, "${")
			name, ok2 := strings.CutSuffix(name, "}")
			if !ok || !ok2 || args[name] == "" {
				t.Errorf("Dockerfile: FROM %s, want ${ARG} with a global ARG's pinned default", st.from)
			} else {
				bases[name] = true
			}
		}
		if st.name != "" {
			names[st.name] = true
		}
	}
	if len(bases) != 2 {
		t.Errorf("Dockerfile's base image ARGs %v, want two (the Go toolchain and the runtime base)", bases)
	}
	p := loadCompose(t, "ha")
	for _, name := range []string{"master", "etcd"} {
		s := service(t, p, name)
		if s.Build == nil {
			t.Fatalf("service %s builds nothing", name)
		}
		for arg := range bases {
			got := s.Build.Args[arg]
			if got == nil || *got != args[arg] {
				t.Errorf("service %s: build arg %s = %v, want the Dockerfile's default %q (from .env)", name, arg, deref(got), args[arg])
			}
		}
		if len(s.Build.Args) != len(bases) {
			t.Errorf("service %s: build args %v, want exactly the base images %v", name, s.Build.Args, bases)
		}
	}
}
