package worker

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestLogsStepWritesHeaderToBoth(t *testing.T) {
	l := &launch{dir: t.TempDir(), argv: []string{"glint", "executor", "two words", "quote\"d"}}
	if err := (logsStep{}).Run(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	l.closeLogs()
	want := "Launch command: \"glint\" \"executor\" \"two words\" \"quote\\\"d\"\n" + strings.Repeat("=", 40) + "\n\n"
	for _, name := range []string{"stdout", "stderr"} {
		data, err := os.ReadFile(filepath.Join(l.dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if string(data) != want {
			t.Errorf("%s = %q, want %q", name, data, want)
		}
	}
}

func TestLogsStepHidesSecretsInTheHeaderOnly(t *testing.T) {
	argv := []string{"glint", "executor", "--conf", "spark.authenticate.secret=s3cr3t", "--conf=my.token=s3cr3t", "AWS_ACCESS_KEY=s3cr3t", "--conf", "spark.executor.memory=1g"}
	l := &launch{dir: t.TempDir(), argv: slices.Clone(argv)}
	if err := (logsStep{}).Run(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	l.closeLogs()
	want := `Launch command: "glint" "executor" "--conf" "spark.authenticate.secret=*********(redacted)" "--conf=my.token=*********(redacted)" "AWS_ACCESS_KEY=*********(redacted)" "--conf" "spark.executor.memory=1g"` + "\n"
	for _, name := range []string{"stdout", "stderr"} {
		data, err := os.ReadFile(filepath.Join(l.dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if header, _, _ := strings.Cut(string(data), strings.Repeat("=", 40)); header != want {
			t.Errorf("%s header = %q, want %q", name, header, want)
		}
	}
	if !slices.Equal(l.argv, argv) {
		t.Errorf("argv = %q after the logs step, want %q: the process runs the whole command", l.argv, argv)
	}
}

// The log files are in a directory the process's user owns, which the
// worker writes as root: what the process put in their place (a link to a
// file of the worker's, a FIFO that would hold the launch) is refused, and
// the file it leads to is left as it was.
func TestLogsStepOpensNoLinkNorFIFOItFindsInPlaceOfALog(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(t *testing.T, log, target string) error
	}{
		{"symbolic link", func(_ *testing.T, log, target string) error { return os.Symlink(target, log) }},
		{"hard link", func(_ *testing.T, log, target string) error { return os.Link(target, log) }},
		{"FIFO", func(_ *testing.T, log, _ string) error { return syscall.Mkfifo(log, 0o600) }},
	} {
		dir := t.TempDir()
		target := filepath.Join(t.TempDir(), "precious")
		if err := os.WriteFile(target, []byte("precious"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := tc.make(t, filepath.Join(dir, "stdout"), target); err != nil {
			t.Fatal(err)
		}
		l := &launch{dir: dir, argv: []string{"glint", "executor"}}
		if err := (logsStep{}).Run(context.Background(), l); err == nil {
			l.closeLogs()
			t.Errorf("%s in place of stdout: opened", tc.name)
		}
		if b, _ := os.ReadFile(target); string(b) != "precious" {
			t.Errorf("%s in place of stdout: its target holds %q", tc.name, b)
		}
	}
}
