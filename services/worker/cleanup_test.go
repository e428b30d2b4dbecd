package worker

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
)

// writeFile writes path (and its parents) and sets its times to mtime.
func writeFile(t *testing.T, path string, mtime time.Time) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("log\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

func TestCleanupRemovesOnlyOldDirectoriesOfFinishedAppsAndDrivers(t *testing.T) {
	c := startCluster(t, clusterConfig{worker: Config{CleanupInterval: -1}})
	running := c.registerApp(t, executorCommand(t, "hold", 0), 1)
	c.waitMasterExecutor(t, running, 0, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)
	work := c.worker.cfg.WorkDir
	outside := t.TempDir()
	// Everything is made now; the cleanup runs "8 days later", when only
	// what is set to an hour before is recent.
	old := time.Now()
	now := old.Add(8 * 24 * time.Hour)
	recent := now.Add(-time.Hour)
	writeFile(t, filepath.Join(outside, "precious"), old)

	writeFile(t, filepath.Join(work, "app-20250101000000-0001", "0", "stderr"), old)
	writeFile(t, filepath.Join(work, "app-20250101000000-0002", "0", "stderr"), old)
	writeFile(t, filepath.Join(work, "app-20250101000000-0002", "1", "stderr"), recent)
	writeFile(t, filepath.Join(work, "driver-20250101000000-0003", "stdout"), old)
	writeFile(t, filepath.Join(work, "notes", "todo"), old)
	writeFile(t, filepath.Join(work, ".removing-app-20250101000000-0006", "0", "stdout"), recent)
	// Links are never followed: not a linked directory named like an app,
	// not a link inside an old app's directory.
	if err := os.Symlink(outside, filepath.Join(work, "app-20250101000000-0004")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(work, "app-20250101000000-0005", "0", "stdout"), old)
	link := filepath.Join(work, "app-20250101000000-0005", "0", "out")
	if err := os.Symlink(filepath.Join(outside, "precious"), link); err != nil {
		t.Fatal(err)
	}
	// The running app's files are old too: it is kept because it runs.

	if err := c.worker.cleanWorkDir(now); err != nil {
		t.Fatal(err)
	}
	for name, kept := range map[string]bool{
		"app-20250101000000-0001":           false,
		"app-20250101000000-0002":           true,
		"driver-20250101000000-0003":        false,
		"notes":                             true,
		"app-20250101000000-0004":           true,
		"app-20250101000000-0005":           false,
		".removing-app-20250101000000-0006": false,
		running:                             true,
	} {
		if _, err := os.Lstat(filepath.Join(work, name)); (err == nil) != kept {
			t.Errorf("%s: kept=%v, want kept=%v", name, err == nil, kept)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "precious")); err != nil {
		t.Errorf("a file outside the work dir was removed: %v", err)
	}
}
