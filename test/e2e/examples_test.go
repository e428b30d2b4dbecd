package e2e

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// TestYourOwnApplicationRunsOnARealCluster builds the examples module (its
// own go.mod, as a user's would be) and runs its binary as master, worker,
// executors and submit client: the README's "Run your own code".
func TestYourOwnApplicationRunsOnARealCluster(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "montecarlo")
	build := staticBuild(bin, "./montecarlo")
	build.Dir = filepath.Join("..", "..", "examples")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the example: %v\n%s", err, out)
	}
	master := startBinary(t, bin, "master", nil, "master", "--listen", "127.0.0.1:0")
	startBinary(t, bin, "worker", nil, "worker", "--master", master.url, "--listen", "127.0.0.1:0",
		"--cores", "2", "--memory", "1g", "--work-dir", t.TempDir())
	c := &testCluster{master: master}
	c.waitFor(t, "the worker alive", func(s masterJSON) bool { return s.alive() == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	submit := exec.CommandContext(ctx, bin, "submit", "--master", master.url, "--executor-memory", "256m",
		"--log-level", "warn", "montecarlo", "200000", "4")
	var out, errOut bytes.Buffer
	submit.Stdout, submit.Stderr = &out, &errOut
	if err := submit.Run(); err != nil {
		t.Fatalf("submit: %v\n%s%s", err, out.String(), errOut.String())
	}
	// Only the example binary has the task "montecarlo.count": its own
	// executors ran it.
	if !regexp.MustCompile(`Pi is roughly 3\.1[0-9]+ \(800000 points in 4 tasks`).MatchString(out.String()) {
		t.Errorf("output %q, want an estimate of pi", out.String())
	}
	s := c.waitFor(t, "the application finished", func(s masterJSON) bool { return len(s.CompletedApps) == 1 })
	if a := s.CompletedApps[0]; a.State != "FINISHED" || len(a.Executors) == 0 {
		t.Errorf("application %s with %d executors, want FINISHED on executors", a.State, len(a.Executors))
	}
}
