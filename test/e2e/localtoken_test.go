package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// machineEnv is the environment of a glint process given no token, with a
// config directory of its own, and the path of the machine's cluster token
// in it.
func machineEnv(t *testing.T) (env []string, tokenPath string) {
	t.Helper()
	dir := t.TempDir()
	return []string{"GLINT_TOKEN_FILE=", "XDG_CONFIG_HOME=" + dir}, filepath.Join(dir, "glint", "cluster.token")
}

// readMachineToken reads the machine's cluster token at path, checking that
// its file and directory are their owner's alone.
func readMachineToken(t *testing.T, path string) string {
	t.Helper()
	for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700 | os.ModeDir} {
		info, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode() != want {
			t.Errorf("%s: mode %v, want %v", p, info.Mode(), want)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// A master on a loopback address without a token makes the machine's
// cluster token in the user's config directory, owner-only, and refuses
// calls without it; a second master, a worker and the clients on the
// machine read it by default, so nobody types a token.
func TestOnLoopbackWithoutATokenTheMasterMakesOneThatEveryCommandReads(t *testing.T) {
	t.Parallel()
	env, path := machineEnv(t)
	m := start(t, "master", env, "master", "--listen", "127.0.0.1:0")
	token := readMachineToken(t, path)
	if log := readFile(m.log); !strings.Contains(log, "made the cluster token") || !strings.Contains(log, path) {
		t.Errorf("the master does not say where it made the token:\n%s", log)
	}
	resp, err := http.Post(m.url+"/glint.master.v1.MasterService/GetClusterState", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GetClusterState without a token: %s, want 401 (unauthenticated)", resp.Status)
	}
	if _, stderr, err := glintWithEnv(t, env, "status", "--master", m.url); err != nil {
		t.Errorf("glint status without a token: %v\n%s", err, stderr)
	}

	second := start(t, "master-2", env, "master", "--listen", "127.0.0.1:0")
	if log := readFile(second.log); !strings.Contains(log, "read the cluster token") {
		t.Errorf("the second master does not say it read the token:\n%s", log)
	}
	getPageWith(t, nil, token, second.url+"/json").Body.Close()

	c := &testCluster{master: m, token: token}
	start(t, "worker", env, "worker", "--master", m.url, "--listen", "127.0.0.1:0", "--cores", "2", "--memory", "2g",
		"--work-dir", t.TempDir(), "--register-interval", "200ms")
	c.waitFor(t, "the worker alive", func(s masterJSON) bool { return s.alive() == 1 })
	stdout, stderr, err := glintWithEnv(t, env, "submit", "--master", m.url, "--executor-cores", "1", "pi", "4")
	if err != nil || !strings.Contains(stdout, "Pi is roughly") {
		t.Errorf("glint submit without a token: %v\n%s%s", err, stdout, stderr)
	}
	if got := readMachineToken(t, path); got != token {
		t.Errorf("the machine's token changed while the cluster ran")
	}
}

// The machine's token file, when others may read it, is refused with the
// chmod message by whoever reads it, and left as it is, not replaced.
func TestTheMachinesTokenFileOthersMayReadIsRefusedNotReplaced(t *testing.T) {
	t.Parallel()
	env, path := machineEnv(t)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(testToken+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"master", "--listen", "127.0.0.1:0"},
		{"worker", "--master", "http://127.0.0.1:1", "--listen", "127.0.0.1:0", "--work-dir", t.TempDir()},
		{"status", "--master", "http://127.0.0.1:1", "--retry-timeout", "0s"},
	} {
		_, stderr, err := glintWithEnv(t, env, args...)
		if exitCode(err) == 0 || !strings.Contains(stderr, "chmod 600 "+path) {
			t.Errorf("glint %s with the machine's token of mode 0644: exit %d, stderr %q; want a refusal saying chmod 600 %s", args[0], exitCode(err), stderr, path)
		}
	}
	info, err := os.Stat(path)
	if b, _ := os.ReadFile(path); err != nil || info.Mode() != 0o644 || strings.TrimSpace(string(b)) != testToken {
		t.Errorf("the refused file was changed: %v %v", info.Mode(), err)
	}
}

// Masters starting at once on a machine without its token end with one:
// one made it, the others read it, and all accept it.
func TestMastersStartingAtOnceMakeOneToken(t *testing.T) {
	t.Parallel()
	env, path := machineEnv(t)
	masters := make([]*proc, 3)
	for i := range masters {
		masters[i] = spawn(t, glintBin, fmt.Sprint("master-", i), env, "master", "--listen", "127.0.0.1:0")
	}
	for _, m := range masters {
		m.waitServing(t)
	}
	token := readMachineToken(t, path)
	made := 0
	for _, m := range masters {
		if strings.Contains(readFile(m.log), "made the cluster token") {
			made++
		}
		getPageWith(t, nil, token, m.url+"/json").Body.Close()
	}
	if made != 1 {
		t.Errorf("%d masters say they made the token, want 1", made)
	}
}
