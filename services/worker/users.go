package worker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/glint-cluster/glint/pkg/contain"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// On a worker that runs each application as a user of its own
// (Config.ExecutorUsers), every executor of an application on it runs as
// one uid of the range, and each cluster-mode driver as another; the uid
// is its owner's while any process of it runs here, then freed. The
// process's work directory is its user's alone (0700), in directories the
// other users may pass through but not list (0711); when the owner's last
// process ends the directory is taken back (the worker's, 0700), so the
// application that gets the uid next cannot read it. The worker's own files
// — its token file, its TLS key, other applications' directories — must not
// be readable by others: openUsers checks its TLS key, rpc.ReadToken its
// token file.

// openUsers prepares the worker's users, nil when it runs its processes as
// its own user (which it says, and why, once).
func openUsers(cfg Config) (*contain.Users, error) {
	uid := os.Geteuid()
	if cfg.ExecutorUsers == (contain.UIDRange{}) {
		if uid == 0 {
			cfg.Logger.Warn("executors and drivers run as root, the worker's user: --executor-users is off")
		} else {
			cfg.Logger.Info("executors and drivers run as the worker's user: only a worker started as root can run each application as a user of its own (--executor-users)", "uid", uid)
		}
		return nil, nil
	}
	if uid != 0 {
		return nil, fmt.Errorf("--executor-users %s: the worker runs as uid %d; only root can start processes as other users", cfg.ExecutorUsers, uid)
	}
	if err := checkSecretFiles(cfg); err != nil {
		return nil, err
	}
	if err := os.Chmod(cfg.WorkDir, 0o711); err != nil {
		return nil, fmt.Errorf("work dir: %w", err)
	}
	if err := contain.OthersCan(cfg.WorkDir, contain.Execute); err != nil {
		return nil, fmt.Errorf("work dir: the executor users cannot reach it: %w", err)
	}
	if exe, err := os.Executable(); err == nil {
		if err := contain.OthersCan(exe, contain.Execute); err != nil {
			cfg.Logger.Warn("the executor users cannot execute this binary: a launch of it is refused", "err", err)
		}
	}
	users, err := contain.NewUsers(cfg.ExecutorUsers, contain.UIDLockFile)
	if err != nil {
		return nil, fmt.Errorf("--executor-users %s: %w", cfg.ExecutorUsers, err)
	}
	if err := reclaimDirs(cfg.WorkDir, cfg.ExecutorUsers); err != nil {
		return nil, err
	}
	cfg.Logger.Info("executors and drivers run as users of their own: a uid for each application and each driver", "uids", cfg.ExecutorUsers.String())
	return users, nil
}

// checkSecretFiles checks that the executor users cannot read the worker's
// TLS key, and can read every file of their own TLS identity. (A token file
// that others may read is refused anyway: rpc.ReadToken.)
func checkSecretFiles(cfg Config) error {
	if cfg.TLS == (rpc.TLSFiles{}) {
		return nil
	}
	if err := contain.OthersCannotRead(cfg.TLS.Key); err != nil {
		return fmt.Errorf("--tls-key-file: %w", err)
	}
	if cfg.ExecutorTLS.Cert == "" || cfg.ExecutorTLS.Key == "" {
		return errors.New("--executor-users with TLS: executors cannot read the worker's --tls-key-file; give them a certificate of their own (--executor-tls-cert-file, --executor-tls-key-file)")
	}
	for flag, f := range map[string]string{"--executor-tls-cert-file": cfg.ExecutorTLS.Cert, "--executor-tls-key-file": cfg.ExecutorTLS.Key, "--tls-ca-file": cfg.ExecutorTLS.CA} {
		if f == "" {
			continue
		}
		if err := contain.OthersCan(f, contain.Read); err != nil {
			return fmt.Errorf("%s: the executor users cannot read it: %w", flag, err)
		}
	}
	return nil
}

// childTLS is the TLS identity of the processes the worker launches: their
// own on a worker that runs them as users of their own, else the worker's.
func childTLS(cfg Config) rpc.TLSFiles {
	if cfg.ExecutorTLS.Cert != "" {
		return cfg.ExecutorTLS
	}
	return cfg.TLS
}

// giveDir makes l's work directory its user's alone, in a parent the other
// users may pass through (an application's directory); nothing on a worker
// that runs its processes as its own user.
func giveDir(l *launch) error {
	if l.uid == 0 {
		return nil
	}
	if err := setDir(filepath.Dir(l.dir), -1, 0o711); err != nil {
		return err
	}
	return setDir(l.dir, int(l.uid), 0o700)
}

// reclaimDir makes dir the worker's, and its alone.
func reclaimDir(dir string) error { return setDir(dir, os.Geteuid(), 0o700) }

// setDir gives the directory dir to uid (and the group of that number; -1:
// its owner stays) with mode, through the directory itself: never through
// a symbolic link that may have taken its place.
func setDir(dir string, uid int, mode os.FileMode) error {
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	defer syscall.Close(fd)
	if uid >= 0 {
		if err := syscall.Fchown(fd, uid, uid); err != nil {
			return &fs.PathError{Op: "chown", Path: dir, Err: err}
		}
	}
	if err := syscall.Fchmod(fd, uint32(mode)); err != nil {
		return &fs.PathError{Op: "chmod", Path: dir, Err: err}
	}
	return nil
}

// reclaimDirs takes back every work directory a uid of r still owns (what
// a worker killed by SIGKILL left): an application's executors' and a
// driver's.
func reclaimDirs(workDir string, r contain.UIDRange) error {
	for _, pattern := range []string{"*", "*/*"} {
		dirs, err := filepath.Glob(filepath.Join(workDir, pattern))
		if err != nil {
			return err
		}
		for _, dir := range dirs {
			fi, err := os.Lstat(dir)
			if err != nil || !fi.IsDir() {
				continue
			}
			if uid := fi.Sys().(*syscall.Stat_t).Uid; uid >= r.First && uid <= r.Last {
				if err := reclaimDir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("take back %s: %w", dir, err)
				}
			}
		}
	}
	return nil
}
