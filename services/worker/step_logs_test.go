package worker

import (
	"context"
	"os"
	"path/filepath"
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
