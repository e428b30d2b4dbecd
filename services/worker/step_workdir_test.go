package worker

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

func TestWorkdirStepCreatesNestedDir(t *testing.T) {
	l := &launch{dir: filepath.Join(t.TempDir(), testAppID, "3")}
	if err := (workdirStep{}).Run(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(l.dir); err != nil || !fi.IsDir() {
		t.Fatalf("%s not created: %v", l.dir, err)
	}
	// Running it again (a restarted driver) is fine.
	if err := (workdirStep{}).Run(context.Background(), l); err != nil {
		t.Fatal(err)
	}
}
