package worker

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
