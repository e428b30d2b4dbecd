package soak

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Binaries are the soak's own builds of glint, glint-executor and etcd:
// every process running one of them was started by the soak or by the
// cluster it runs.
type Binaries struct {
	Glint, Executor, Etcd string
	files                 []os.FileInfo
	paths                 []string
}

// NewBinaries names the binaries in dir.
func NewBinaries(dir string) *Binaries {
	b := &Binaries{Glint: filepath.Join(dir, "glint"), Executor: filepath.Join(dir, "glint-executor"), Etcd: filepath.Join(dir, "etcd")}
	for _, p := range []string{b.Glint, b.Executor, b.Etcd} {
		if fi, err := os.Stat(p); err == nil {
			b.files = append(b.files, fi)
			b.paths = append(b.paths, p)
		}
	}
	return b
}

// which returns the binary the process at /proc/pid runs, or "".
func (b *Binaries) which(pid string) string {
	fi, err := os.Stat(filepath.Join("/proc", pid, "exe"))
	if err != nil {
		return ""
	}
	for i, f := range b.files {
		if os.SameFile(fi, f) {
			return b.paths[i]
		}
	}
	return ""
}

// Scan lists the live (not zombie) processes of the binaries, with the
// GLINT_* variables of each one's environment that say what it runs for.
func (b *Binaries) Scan() []Proc {
	entries, _ := os.ReadDir("/proc")
	var out []Proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		bin := b.which(e.Name())
		if bin == "" {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil || isZombie(stat) {
			continue
		}
		p := Proc{PID: pid, Bin: bin}
		env, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		for kv := range bytes.SplitSeq(env, []byte{0}) {
			k, v, ok := strings.Cut(string(kv), "=")
			if !ok {
				continue
			}
			switch k {
			case "GLINT_APP_ID":
				p.AppID = v
			case "GLINT_EXECUTOR_ID":
				p.ExecutorID = v
			case "GLINT_DRIVER_ID":
				p.DriverID = v
			case "GLINT_WORKER_PID":
				p.WorkerPID, _ = strconv.Atoi(v)
			}
		}
		out = append(out, p)
	}
	return out
}

// isZombie reads a /proc/PID/stat: the state follows the command's ")".
func isZombie(stat []byte) bool {
	i := bytes.LastIndexByte(stat, ')')
	return i > 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}
