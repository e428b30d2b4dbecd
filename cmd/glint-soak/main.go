// Command glint-soak is make soak, Glint's chaos soak: it builds glint,
// glint-executor and (for HA) etcd once, and for each mode runs a real
// cluster on loopback while it submits applications with known answers and
// kills and pauses its processes on a seeded schedule (internal/soak). It
// prints a summary per mode and exits 1 if any mode found a violation or a
// failure that was not the job's own.
//
// Settings come from the environment: SOAK_MINUTES (per mode, default 10),
// SOAK_SEED (default random; printed, so a run can be repeated), SOAK_MODE
// (file, ha or both; default both), SOAK_KEEP (set: keep the run's files).
package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/glint-cluster/glint/internal/soak"
)

func main() {
	os.Exit(run())
}

// settings are a soak's environment variables, parsed.
type settings struct {
	duration time.Duration
	seed     uint64
	modes    []soak.Mode
	keep     bool
}

// parseSettings reads the SOAK_* variables through getenv.
func parseSettings(getenv func(string) string) (settings, error) {
	s := settings{duration: 10 * time.Minute, seed: rand.Uint64() >> 1, modes: []soak.Mode{soak.ModeFile, soak.ModeHA}, keep: getenv("SOAK_KEEP") != ""}
	if v := getenv("SOAK_MINUTES"); v != "" {
		m, err := strconv.ParseFloat(v, 64)
		if err != nil || m <= 0 || m > 24*60 {
			return s, fmt.Errorf("SOAK_MINUTES=%q: want a number of minutes above 0, at most a day", v)
		}
		s.duration = time.Duration(m * float64(time.Minute))
	}
	if v := getenv("SOAK_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return s, fmt.Errorf("SOAK_SEED=%q: want a whole number", v)
		}
		s.seed = seed
	}
	switch v := getenv("SOAK_MODE"); v {
	case "", "both":
	case string(soak.ModeFile), string(soak.ModeHA):
		s.modes = []soak.Mode{soak.Mode(v)}
	default:
		return s, fmt.Errorf("SOAK_MODE=%q: want file, ha or both", v)
	}
	return s, nil
}

func run() int {
	s, err := parseSettings(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "glint-soak:", err)
		return 2
	}
	mode := "both"
	if len(s.modes) == 1 {
		mode = string(s.modes[0])
	}
	fmt.Fprintf(os.Stderr, "glint-soak: to repeat this run: SOAK_SEED=%d SOAK_MODE=%s SOAK_MINUTES=%g\n", s.seed, mode, s.duration.Minutes())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := os.MkdirTemp("", "glint-soak-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "glint-soak:", err)
		return 2
	}
	if s.keep {
		fmt.Fprintf(os.Stderr, "glint-soak: keeping the run's files in %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	bins, err := build(ctx, filepath.Join(dir, "bin"), s.modes)
	if err != nil {
		fmt.Fprintln(os.Stderr, "glint-soak:", err)
		return 2
	}

	failed := false
	var tables []string
	for _, mode := range s.modes {
		modeDir := filepath.Join(dir, string(mode))
		if err := os.MkdirAll(modeDir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "glint-soak:", err)
			return 2
		}
		// Bounded: past its time, every deadline and a teardown, a run is
		// cut short as by SIGINT.
		limit := s.duration + soak.NewTiming(s.duration).Deadline + 3*time.Minute
		modeCtx, cancel := context.WithTimeout(ctx, limit)
		sum := soak.Run(modeCtx, soak.Config{Mode: mode, Seed: s.seed, Duration: s.duration, Bins: bins, Dir: modeDir, Progress: os.Stderr})
		cancel()
		tables = append(tables, sum.Table())
		fmt.Print(sum.Table())
		failed = failed || !sum.Passed()
		if ctx.Err() != nil {
			break
		}
	}
	if len(tables) > 1 {
		fmt.Println()
		for _, t := range tables {
			fmt.Println(strings.SplitN(t, "\n", 2)[0])
		}
	}
	if failed {
		if !s.keep {
			fmt.Printf("glint-soak: SOAK_SEED=%d SOAK_KEEP=1 repeats the schedule and keeps every process's log and work dir\n", s.seed)
		}
		return 1
	}
	return 0
}

// build builds glint and glint-executor (and etcd when a mode needs it)
// into dir as the Dockerfile does: static, from the module's root.
func build(ctx context.Context, dir string, modes []soak.Mode) (*soak.Binaries, error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return nil, err
	}
	builds := [][]string{{"-o", dir + string(filepath.Separator), "./cmd/glint", "./cmd/glint-executor"}}
	for _, m := range modes {
		if m == soak.ModeHA {
			builds = append(builds, []string{"-o", filepath.Join(dir, "etcd"), "go.etcd.io/etcd/server/v3"})
		}
	}
	for _, args := range builds {
		cmd := exec.CommandContext(ctx, "go", append([]string{"build"}, args...)...)
		cmd.Dir, cmd.Stdout, cmd.Stderr = root, os.Stderr, os.Stderr
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("go build %s: %w", strings.Join(args[2:], " "), err)
		}
	}
	return soak.NewBinaries(dir), nil
}

// moduleRoot is the directory of the main module's go.mod.
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("find the module (run from the repository): %v", err)
	}
	return filepath.Dir(gomod), nil
}
