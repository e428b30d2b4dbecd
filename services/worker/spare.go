package worker

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// spareDirPrefix names the work directories made ahead of their launch (the
// worker's spare, each prestarted process's); a worker removes those an
// earlier run left when it starts.
const spareDirPrefix = ".spare-"

// launchDir is a work directory made ahead of its launch: dir, holding its
// log files stdout and stderr (open), in a directory of its own, root, in
// the worker's work dir. The workdir step of the launch that takes it moves
// it into place (place), so that the launch makes neither directory nor
// files before its process starts: root becomes the directory of a new
// application (the launch's parent), and dir, in it, the launch's. Making a
// directory is what costs on ext4 (it allocates an inode); a rename costs
// far less.
type launchDir struct {
	root, dir      string
	stdout, stderr *os.File
}

// makeLaunchDir makes a launchDir in workDir.
func makeLaunchDir(workDir string) (launchDir, error) {
	root, err := os.MkdirTemp(workDir, spareDirPrefix)
	if err != nil {
		return launchDir{}, fmt.Errorf("work dir made ahead: %w", err)
	}
	d := launchDir{root: root, dir: filepath.Join(root, "run")}
	if err := os.Mkdir(d.dir, 0o750); err != nil {
		d.removeDir()
		return launchDir{}, fmt.Errorf("work dir made ahead: %w", err)
	}
	if d.stdout, d.stderr, err = openLogs(d.dir); err != nil {
		d.removeDir()
		return launchDir{}, err
	}
	return d, nil
}

// place moves d to dir, its launch's work directory, and returns its log
// files; false, with d removed, if it cannot (dir exists and is not empty:
// a process of that id ran here before), and the launch makes its own. Its
// root becomes dir's parent if that does not exist yet (an application's
// first process on this worker); else dir moves there alone and root is
// removed.
func (d *launchDir) place(dir string) (stdout, stderr *os.File, ok bool) {
	parent := filepath.Dir(dir)
	var err error
	if os.Rename(d.root, parent) == nil {
		d.root, d.dir = "", filepath.Join(parent, filepath.Base(d.dir))
		err = os.Rename(d.dir, dir)
	} else if err = os.MkdirAll(parent, 0o750); err == nil {
		err = os.Rename(d.dir, dir)
	}
	if err != nil {
		d.removeDir()
		return nil, nil, false
	}
	if d.root != "" {
		// Empty now; a worker that stops before removing it removes it
		// when it starts again (removeStaleDirs).
		_ = os.Remove(d.root)
	}
	stdout, stderr = d.stdout, d.stderr
	d.root, d.dir, d.stdout, d.stderr = "", "", nil, nil
	return stdout, stderr, true
}

// removeDir closes and removes d, unless its launch took it.
func (d *launchDir) removeDir() {
	for _, f := range []*os.File{d.stdout, d.stderr} {
		if f != nil {
			f.Close()
		}
	}
	switch {
	case d.root != "":
		_ = os.RemoveAll(d.root)
	case d.dir != "":
		_ = os.RemoveAll(d.dir)
	}
	d.root, d.dir, d.stdout, d.stderr = "", "", nil, nil
}

// removeStaleDirs removes the directories made ahead of their launch that a
// worker which stopped before using them left in workDir.
func removeStaleDirs(workDir string) error {
	root, entries, err := openWorkDir(workDir)
	if err != nil {
		return err
	}
	defer root.Close()
	var errs []error
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), spareDirPrefix) {
			errs = append(errs, root.RemoveAll(e.Name()))
		}
	}
	return errors.Join(errs...)
}

// spare keeps one launchDir ready for the next launch that starts a process:
// making the application's directory, the process's and two files is four
// file-system operations, slow on a loaded machine, where moving them into
// place is two renames. A launch takes it (take); the next is
// made once that launch's process started (fill). Methods of a nil *spare do
// nothing: every launch makes its own.
type spare struct {
	workDir string
	log     *slog.Logger

	mu     sync.Mutex
	ready  *launchDir
	making bool
	closed bool
	wg     sync.WaitGroup
}

// take returns the spare for a launch whose work directory dir does not
// exist yet, nil when none is ready or dir exists (a restarted driver's).
func (sp *spare) take(dir string) *launchDir {
	if sp == nil {
		return nil
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.ready == nil {
		return nil
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	d := sp.ready
	sp.ready = nil
	return d
}

// fill makes the next spare in the background, unless one is ready or being
// made.
func (sp *spare) fill() {
	if sp == nil {
		return
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.closed || sp.ready != nil || sp.making {
		return
	}
	sp.making = true
	sp.wg.Go(func() {
		d, err := makeLaunchDir(sp.workDir)
		sp.mu.Lock()
		defer sp.mu.Unlock()
		sp.making = false
		switch {
		case err != nil:
			sp.log.Warn("make a spare work dir", "err", err)
		case sp.closed:
			d.removeDir()
		default:
			sp.ready = &d
		}
	})
}

// close removes the spare, and one being made once it is.
func (sp *spare) close() {
	if sp == nil {
		return
	}
	sp.mu.Lock()
	sp.closed = true
	d := sp.ready
	sp.ready = nil
	sp.mu.Unlock()
	sp.wg.Wait()
	if d != nil {
		d.removeDir()
	}
}
