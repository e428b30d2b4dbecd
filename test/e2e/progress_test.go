package e2e

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/creack/pty"
)

func TestSubmitWaitShowsALiveLineOnATerminalAndPlainLinesElsewhere(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1)
	// Both executors register before the tasks start, so the last line is
	// known: 2/2 registered, 20/20 done.
	args := []string{"submit", "--wait", "--master", c.master.url, "--executor-cores", "1", "--total-executor-cores", "2",
		"--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0", "--conf", waitForAll,
		"--executor-memory", "256m", "pi", "20"}

	// On a terminal: one line redrawn in place, ended by a newline, the
	// application's output on lines of its own above it, and no log line
	// (a client logs at warn there unless --log-level says otherwise).
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	cmd := exec.Command(glintBin, args...)
	cmd.Stdout, cmd.Stderr = tty, tty
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	var term bytes.Buffer
	_, err = io.Copy(&term, ptmx) // ends with EIO once the process closed its side
	if err != nil && !errors.Is(err, syscall.EIO) {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("submit: %v\n%s", err, term.String())
	}
	out := term.String()
	if !strings.Contains(out, "\r\x1b[K") || !strings.Contains(out, "executors registered 2/2, tasks 20/20, elapsed ") || !strings.HasSuffix(out, "\r\n") {
		t.Errorf("terminal shows %q; want a line redrawn in place ending with executors registered 2/2, tasks 20/20", out)
	}
	if !regexp.MustCompile(`(^|\n|\x1b\[K)Pi is roughly `).MatchString(out) {
		t.Errorf("terminal shows %q; want the pi estimate at the start of a line", out)
	}
	if strings.Contains(out, `"level":"INFO"`) {
		t.Errorf("terminal shows %q; want no INFO log lines", out)
	}

	// Elsewhere: plain lines, the last one the final state (the logs at
	// warn, which a healthy run has none of).
	stdoutText, stderr, err := runGlint(t, slices.Insert(args, len(args)-2, "--log-level", "warn")...)
	if err != nil {
		t.Fatalf("submit: %v\n%s", err, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	if strings.Contains(stderr, "\r") || !strings.HasPrefix(lines[len(lines)-1], "executors registered 2/2, tasks 20/20, elapsed ") {
		t.Errorf("stderr %q; want plain lines ending with executors registered 2/2, tasks 20/20", stderr)
	}
	if !piResult.MatchString(stdoutText) {
		t.Errorf("stdout %q has no pi estimate", stdoutText)
	}
}

func TestClientsSayWhatToDoWhenNoMasterAnswers(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "http://" + ln.Addr().String()
	ln.Close()
	for _, args := range [][]string{
		{"status", "--master", addr, "--retry-timeout", "1s"},
		{"kill", "--master", addr, "--retry-timeout", "1s", "app-20260101000000-0000"},
		{"submit", "--master", addr, "--log-level", "error", "--retry-timeout", "1s", "pi", "2"},
		{"submit", "--master", addr, "--deploy-mode", "cluster", "--retry-timeout", "1s", "pi", "2"},
	} {
		_, stderr, err := runGlint(t, args...)
		if exitCode(err) == 0 || !strings.Contains(stderr, "is a master running at "+addr+"? start one with `glint master`") || !strings.Contains(stderr, "connection refused") {
			t.Errorf("glint %s: exit %d, stderr %q; want what was tried and what to do", strings.Join(args, " "), exitCode(err), stderr)
		}
	}
}
