package worker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/glint-cluster/glint/pkg/ids"
)

// Defaults of the work-dir cleanup (Spark's spark.worker.cleanup.interval
// and spark.worker.cleanup.appDataTtl).
const (
	defaultCleanupInterval = 30 * time.Minute
	defaultCleanupTTL      = 7 * 24 * time.Hour
)

// removingPrefix marks a directory the cleanup took out of use and is
// removing; one left by a worker that stopped half-way is removed next time.
const removingPrefix = ".removing-"

// cleanupLoop runs cleanWorkDir every CleanupInterval until ctx ends.
func (s *Server) cleanupLoop(ctx context.Context) {
	if s.cfg.CleanupInterval < 0 {
		return
	}
	t := time.NewTicker(s.cfg.CleanupInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.cleanWorkDir(s.cfg.Now()); err != nil {
				s.log.Warn("clean work dir", "dir", s.cfg.WorkDir, "err", err)
			}
		}
	}
}

// cleanWorkDir is Spark's WorkDirCleanup: it removes the directories of
// applications and drivers that do not run on this worker and hold no file
// modified within CleanupTTL of now. Only entries named by a valid
// application or driver id are considered, symbolic links are never
// followed, and everything is done inside the work dir (os.Root), so no name
// or link in it can make the worker remove anything outside it.
func (s *Server) cleanWorkDir(now time.Time) error {
	root, entries, err := openWorkDir(s.cfg.WorkDir)
	if err != nil {
		return err
	}
	defer root.Close()
	cutoff := now.Add(-s.cfg.CleanupTTL)
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, removingPrefix) && ownDir(strings.TrimPrefix(name, removingPrefix)) {
			errs = append(errs, root.RemoveAll(name))
			continue
		}
		if !e.IsDir() || !ownDir(name) {
			continue
		}
		fresh, err := modifiedSince(root, name, cutoff)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if fresh {
			continue
		}
		if taken, err := s.takeOutOfUse(root, name); !taken {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, root.RemoveAll(removingPrefix+name))
		s.metrics.workDirsRemoved.Inc()
		s.log.Info("removed the work dir of a finished application or driver", "dir", name, "ttl", s.cfg.CleanupTTL.String())
	}
	return errors.Join(errs...)
}

// openWorkDir opens workDir as an os.Root, through which nothing done leaves
// it, and lists its entries; the caller closes the root.
func openWorkDir(workDir string) (*os.Root, []fs.DirEntry, error) {
	root, err := os.OpenRoot(workDir)
	if err != nil {
		return nil, nil, err
	}
	entries, err := fs.ReadDir(root.FS(), ".")
	if err != nil {
		root.Close()
		return nil, nil, err
	}
	return root, entries, nil
}

// ownDir says whether name is what the worker names a directory: an
// application's or a driver's id.
func ownDir(name string) bool {
	return ids.ValidateApp(name) == nil || ids.ValidateDriver(name) == nil
}

// hasWorkOfLocked says whether an executor of application id, or driver id,
// runs here.
func (s *Server) hasWorkOfLocked(id string) bool {
	if _, ok := s.drivers[id]; ok {
		return true
	}
	for key := range s.executors {
		if key.app == id {
			return true
		}
	}
	return false
}

// takeOutOfUse renames dir out of the way unless something of it started
// running meanwhile, and says whether it did; a launch after that makes a
// new directory.
func (s *Server) takeOutOfUse(root *os.Root, dir string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hasWorkOfLocked(dir) {
		return false, nil
	}
	if err := root.Rename(dir, removingPrefix+dir); err != nil {
		return false, fmt.Errorf("clean %s: %w", dir, err)
	}
	return true, nil
}

// modifiedSince says whether anything under dir (not dir itself) was
// modified after cutoff. Links are looked at, never followed.
func modifiedSince(root *os.Root, dir string, cutoff time.Time) (bool, error) {
	fresh := false
	err := fs.WalkDir(root.FS(), dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == dir {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.ModTime().After(cutoff) {
			fresh = true
			return fs.SkipAll
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("clean %s: %w", dir, err)
	}
	return fresh, nil
}
