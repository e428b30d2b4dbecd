// Package tooltest builds and runs the project's tool binaries — Jaeger,
// Prometheus, promtool, from tools/go.mod and tools/jaeger/go.mod — for
// tests, on loopback ports, stopping them when the test ends.
package tooltest

import (
	"fmt"
	"github.com/glint-cluster/glint/internal/ports"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	mu   sync.Mutex
	bins = map[string]string{}
)

// Root returns the repository's root directory: the nearest directory above
// the test's working directory that holds tools/go.mod.
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "tools", "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no tools/go.mod above the test's directory")
		}
		dir = parent
	}
}

// Binary builds (or finds in Go's build cache) tool from the tools module
// modfile (relative to the root, e.g. "tools/jaeger/go.mod") with
// `go tool -n`, and returns the binary's path.
func Binary(t testing.TB, modfile, tool string) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	key := modfile + " " + tool
	if bin, ok := bins[key]; ok {
		return bin
	}
	root := Root(t)
	cmd := exec.Command("go", "tool", "-modfile="+filepath.Join(root, modfile), "-n", tool)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("build %s from %s: %v", tool, modfile, err)
	}
	bin := strings.TrimSpace(string(out))
	bins[key] = bin
	return bin
}

// FreePorts reserves n loopback ports for children that are told their port
// before they start (tool configs, the stack's addresses), until the test
// ends (internal/ports).
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	p, err := ports.Reserve(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Release)
	return p.List
}

// Process is a tool process a test started.
type Process struct {
	// Log is the file its output goes to.
	Log string
	// Pid is its process id.
	Pid int
}

// Start runs bin args... in its own process group until the test ends, and
// waits until ready (a URL) answers 200. Its output goes to a log file whose
// content is shown if it fails to start.
func Start(t testing.TB, name, ready, bin string, args ...string) *Process {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		if resp, err := http.Get(ready); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return &Process{Log: logPath, Pid: cmd.Process.Pid}
			}
		}
		select {
		case <-done:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("%s exited before it was ready:\n%s", name, b)
		default:
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			t.Fatalf("%s not ready within 60s:\n%s", name, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Eventually polls cond until it holds, failing the test after a generous
// deadline (30 s).
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// CgroupOf is the path of process pid's cgroup: its memory controller's on
// cgroup v1, its unified one on v2.
func CgroupOf(t testing.TB, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	unified := ""
	for line := range strings.Lines(string(b)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		switch {
		case len(parts) < 3:
		case parts[1] == "memory":
			return parts[2]
		case parts[1] == "":
			unified = parts[2]
		}
	}
	return unified
}
