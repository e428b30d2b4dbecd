package worker

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
)

// readySpare waits until the worker's spare is made and returns its directory.
func readySpare(t *testing.T, s *Server) string {
	t.Helper()
	var dir string
	tooltest.Eventually(t, "a spare work dir", func() bool {
		s.spare.mu.Lock()
		defer s.spare.mu.Unlock()
		if s.spare.ready != nil {
			dir = s.spare.ready.dir
		}
		return dir != ""
	})
	return dir
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

func TestALaunchMovesTheSpareWorkDirIntoPlaceAndTheWorkerMakesTheNext(t *testing.T) {
	c := startCluster(t, clusterConfig{})
	spare := readySpare(t, c.worker.Server)
	made := inode(t, spare)
	appID := c.registerApp(t, executorCommand(t, "hold", 0), 1)
	c.waitMasterExecutor(t, appID, 0, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)
	dir := filepath.Join(c.worker.cfg.WorkDir, appID, "0")
	if got := inode(t, dir); got != made {
		t.Errorf("the executor's work dir is inode %d, the spare was %d: it was not moved into place", got, made)
	}
	waitFileContains(t, filepath.Join(dir, "stderr"), "Launch command:", "child hold stderr")
	if next := readySpare(t, c.worker.Server); next == spare {
		t.Errorf("the next spare is the one taken, %s", next)
	}
	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c.worker.waitFinishedExecutor(t, appID, 0)
	if err := c.worker.stop(); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(c.worker.cfg.WorkDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), spareDirPrefix) {
			t.Errorf("the stopped worker left its spare %s", e.Name())
		}
	}
}

func TestTheSpareIsNotTakenForAWorkDirThatExists(t *testing.T) {
	workDir := t.TempDir()
	d, err := makeLaunchDir(workDir)
	if err != nil {
		t.Fatal(err)
	}
	sp := &spare{workDir: workDir, ready: &d}
	defer sp.close()
	if got := sp.take(workDir); got != nil {
		t.Errorf("took the spare for %s, which exists (a restarted driver's)", workDir)
	}
	if got := sp.take(filepath.Join(workDir, "app-20260101000000-0000", "0")); got != &d {
		t.Errorf("took %v for a new work dir, want the spare", got)
	}
}

func TestAnApplicationsFirstWorkDirHereIsTheSparesAndItsNextIsMovedInAlone(t *testing.T) {
	workDir := t.TempDir()
	app := filepath.Join(workDir, "app-20260101000000-0000")
	first, err := makeLaunchDir(workDir)
	if err != nil {
		t.Fatal(err)
	}
	root, run := inode(t, first.root), inode(t, first.dir)
	stdout, stderr, ok := first.place(filepath.Join(app, "0"))
	if !ok {
		t.Fatal("the spare was not placed for the application's first process")
	}
	stdout.Close()
	stderr.Close()
	if got := inode(t, app); got != root {
		t.Errorf("the application's dir is inode %d, the spare's own dir was %d: the launch made a directory", got, root)
	}
	if got := inode(t, filepath.Join(app, "0")); got != run {
		t.Errorf("the process's dir is inode %d, the spare's was %d", got, run)
	}
	next, err := makeLaunchDir(workDir)
	if err != nil {
		t.Fatal(err)
	}
	run = inode(t, next.dir)
	nextRoot := next.root
	stdout, stderr, ok = next.place(filepath.Join(app, "1"))
	if !ok {
		t.Fatal("the spare was not placed for the application's second process")
	}
	stdout.Close()
	stderr.Close()
	if got := inode(t, filepath.Join(app, "1")); got != run {
		t.Errorf("the second process's dir is inode %d, the spare's was %d", got, run)
	}
	if _, err := os.Stat(filepath.Join(app, "0", "stdout")); err != nil {
		t.Errorf("the first process's dir lost its log: %v", err)
	}
	if _, err := os.Stat(nextRoot); !os.IsNotExist(err) {
		t.Errorf("the spare's own dir %s is left after its dir moved into an existing application's (%v)", nextRoot, err)
	}
}
