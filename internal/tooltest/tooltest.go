// Package tooltest holds what the tests of several packages share. It builds
// and runs the project's tool binaries — Jaeger, Prometheus, promtool, from
// tools/go.mod and tools/jaeger/go.mod — for tests, on loopback ports,
// stopping them when the test ends; it waits for conditions (Eventually,
// Poll), reads a process's /proc files (its state, its status's sizes, its
// cgroup) and reads YAML files.
//
// It imports no package of the project but internal/ports, so that any
// package's own tests can use it.
package tooltest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/glint-cluster/glint/internal/ports"
	"go.yaml.in/yaml/v3"
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

// Poll calls cond every interval until it holds, for at most limit, and
// says whether it held: the loop under Eventually, for a wait that says
// itself what it saw when it fails, or that keeps what cond saw last.
func Poll(limit, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
	return true
}

// Eventually polls cond every 10 ms until it holds, failing the test after a
// generous deadline (30 s).
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	EventuallyWithin(t, 30*time.Second, what, cond)
}

// EventuallyWithin is Eventually with a deadline of limit.
func EventuallyWithin(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(limit, 10*time.Millisecond, cond) {
		t.Fatalf("timed out waiting for %s (%v)", what, limit)
	}
}

// Get is the body of GET url; a failed request or read fails t.
func Get(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// ProcStat is process pid's /proc/PID/stat from its third field, the state,
// on: fields[0] is the state, fields[1] the parent's pid, fields[11:15] the
// CPU times (utime, stime, cutime, cstime). The command name, the second
// field, is in parentheses and may hold spaces and parentheses itself, so
// the fields are counted from its last ')'.
func ProcStat(pid int) ([]string, error) {
	path := fmt.Sprintf("/proc/%d/stat", pid)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("%s: no command name in %q", path, b)
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) == 0 {
		return nil, fmt.Errorf("%s: no state in %q", path, b)
	}
	return fields, nil
}

// ProcState is process pid's state letter (R, S, T, Z, …) from its
// /proc/PID/stat; an error if the process is gone (reaped).
func ProcState(pid int) (byte, error) {
	fields, err := ProcStat(pid)
	if err != nil {
		return 0, err
	}
	return fields[0][0], nil
}

// Alive says process pid runs: it exists and is no zombie (one that exited
// and waits to be reaped).
func Alive(pid int) bool {
	state, err := ProcState(pid)
	return err == nil && state != 'Z'
}

// ProcStatus is the value of a field of process pid's /proc/PID/status, its
// words separated by single spaces ("Uid": "1000 1000 1000 1000").
func ProcStatus(t testing.TB, pid int, field string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.Join(strings.Fields(rest), " ")
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return ""
}

// ProcStatusKiB is a size field (VmRSS, VmHWM, RssAnon) of process pid's
// /proc/PID/status in KiB.
func ProcStatusKiB(t testing.TB, pid int, field string) int {
	t.Helper()
	kib, err := strconv.Atoi(strings.TrimSuffix(ProcStatus(t, pid, field), " kB"))
	if err != nil {
		t.Fatal(err)
	}
	return kib
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

// ReadYAML reads the YAML file at path into v.
func ReadYAML(t testing.TB, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
