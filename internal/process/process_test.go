package process

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/creack/pty"
	"github.com/spf13/cobra"
)

// signalsChildEnv makes the test binary the child of
// TestACommandsContextEndsOnSIGTERMOnlyOnceWatched: it runs Execute with the
// command named there, which says "ready" and waits for its context's end.
const signalsChildEnv = "GLINT_PROCESS_TEST_SIGNALS"

func TestMain(m *testing.M) {
	if kind := os.Getenv(signalsChildEnv); kind != "" {
		os.Exit(signalsChild(kind))
	}
	os.Exit(m.Run())
}

func signalsChild(kind string) int {
	g := &Globals{Stdout: os.Stdout, Stderr: os.Stderr}
	cmd := &cobra.Command{Use: "child", RunE: func(cmd *cobra.Command, _ []string) error {
		if kind == "late, then watched" {
			WatchSignals(cmd.Context())
		}
		fmt.Println("ready")
		<-cmd.Context().Done()
		fmt.Println(context.Cause(cmd.Context()))
		return nil
	}}
	if kind != "watched" {
		cmd.Annotations = map[string]string{lateSignals: ""}
	}
	return Execute(g.Root(cmd))
}

func TestACommandsContextEndsOnSIGTERMOnlyOnceWatched(t *testing.T) {
	for _, kind := range []string{"watched", "late", "late, then watched"} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), signalsChildEnv+"="+kind)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewScanner(out)
		if !lines.Scan() || lines.Text() != "ready" {
			t.Fatalf("%s: the child said %q, want ready", kind, lines.Text())
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		lines.Scan()
		cause := lines.Text()
		_, _ = io.Copy(io.Discard, out)
		err = cmd.Wait()
		var exit *exec.ExitError
		signalled := errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signaled()
		switch {
		case kind == "late" && !signalled:
			t.Errorf("%s: a command not watching signals, sent SIGTERM, ended with %v; want it ended by the signal", kind, err)
		case kind != "late" && (err != nil || cause != "terminated signal received"):
			t.Errorf("%s: a command watching signals, sent SIGTERM, ended with %v, its context's cause %q; want exit 0 and the signal as the cause", kind, err, cause)
		}
	}
}

// TestAClientLogsAtWarnOnATerminalAndAServiceAtInfo: the log level a
// command runs at, with stderr a terminal or not, --log-level given or not.
func TestAClientLogsAtWarnOnATerminalAndAServiceAtInfo(t *testing.T) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	defer tty.Close()
	for _, c := range []struct {
		service bool
		stderr  io.Writer
		args    []string
		want    string
	}{
		{false, tty, nil, "warn"},
		{false, tty, []string{"--log-level", "info"}, "info"},
		{false, io.Discard, nil, "info"},
		{true, tty, nil, "info"},
		{true, tty, []string{"--log-level", "error"}, "error"},
	} {
		g := &Globals{Stdout: io.Discard, Stderr: c.stderr}
		var level string
		cmd := &cobra.Command{Use: "cmd", Annotations: map[string]string{lateSignals: ""},
			RunE: func(*cobra.Command, []string) error { level = g.LogLevel; return nil }}
		if c.service {
			cmd.Annotations[ServiceCommand] = ""
		}
		root := g.Root(&cobra.Command{Use: "glint"})
		root.AddCommand(cmd)
		root.SetArgs(append([]string{"cmd"}, c.args...))
		if err := root.Execute(); err != nil {
			t.Fatal(err)
		}
		if level != c.want {
			t.Errorf("service %v, stderr a terminal %v, args %v: log level %s, want %s", c.service, c.stderr == tty, c.args, level, c.want)
		}
	}
}
