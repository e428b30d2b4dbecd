package resources

import (
	"fmt"
	"strings"

	"github.com/glint-cluster/glint/pkg/fault"
)

// Limits on what one request may ask for. The master checks them when it
// admits a worker, an application or a driver, and the worker again when it
// is told to launch, so what the master accepts a worker accepts too.
const (
	// MaxCores is the most cores a worker may offer, or an executor or a
	// driver ask for.
	MaxCores = 4096
	// MaxMemoryMiB is the most memory a worker may offer, or an executor or a
	// driver ask for: 64 TiB.
	MaxMemoryMiB = 64 << 20
	// MaxNameBytes is the longest application or driver name.
	MaxNameBytes = 256
	// MaxHostBytes is the longest host name (DNS allows 253 characters).
	MaxHostBytes = 253
	// MaxURLBytes is the longest URL a peer may give for itself.
	MaxURLBytes = 2048
	// MaxArgs is the most arguments a command may have, MaxArgBytes the
	// longest one, and MaxConfEntries the most "--conf" among them.
	MaxArgs        = 1024
	MaxArgBytes    = 64 << 10
	MaxConfEntries = 256
	// MaxEnv is the most environment variables a command may set,
	// MaxEnvNameBytes and MaxArgBytes bound each name and value.
	MaxEnv          = 256
	MaxEnvNameBytes = 256
	// MaxCommandBytes bounds a command's arguments and environment together
	// (Linux allows 2 MiB for both at exec).
	MaxCommandBytes = 256 << 10
	// MaxUnackedFinals is the most final states of its executors and drivers
	// a worker keeps until a master acknowledges them, and so the most one
	// registration or heartbeat may carry.
	MaxUnackedFinals = 1024
)

// CheckCores checks that field, a number of cores, is 1 to MaxCores.
func CheckCores(field string, cores int64) error {
	if cores < 1 || cores > MaxCores {
		return fmt.Errorf("%s %d: %w: must be 1 to %d", field, cores, fault.ErrInvalidArgument, MaxCores)
	}
	return nil
}

// CheckMemoryMiB checks that field, a memory size in MiB, is 1 to MaxMemoryMiB.
func CheckMemoryMiB(field string, mib int64) error {
	if mib < 1 || mib > MaxMemoryMiB {
		return fmt.Errorf("%s %d MiB: %w: must be 1 MiB to %s", field, mib, fault.ErrInvalidArgument, FormatMiB(MaxMemoryMiB))
	}
	return nil
}

// CheckLength checks that field, a string, has at most limit bytes.
func CheckLength(field, s string, limit int) error {
	if len(s) > limit {
		return fmt.Errorf("%s: %w: %d bytes, the limit is %d", field, fault.ErrInvalidArgument, len(s), limit)
	}
	return nil
}

// CheckCommand checks a command's arguments and environment against MaxArgs,
// MaxArgBytes, MaxConfEntries, MaxEnv, MaxEnvNameBytes and MaxCommandBytes.
func CheckCommand(args []string, env map[string]string) error {
	if len(args) > MaxArgs {
		return fmt.Errorf("command: %w: %d arguments, the limit is %d", fault.ErrInvalidArgument, len(args), MaxArgs)
	}
	if len(env) > MaxEnv {
		return fmt.Errorf("command: %w: %d environment variables, the limit is %d", fault.ErrInvalidArgument, len(env), MaxEnv)
	}
	total, conf := 0, 0
	for i, a := range args {
		if err := CheckLength(fmt.Sprintf("command argument %d", i), a, MaxArgBytes); err != nil {
			return err
		}
		if strings.ContainsRune(a, 0) {
			return fmt.Errorf("command argument %d: %w: it holds a NUL byte", i, fault.ErrInvalidArgument)
		}
		if a == "--conf" || strings.HasPrefix(a, "--conf=") {
			conf++
		}
		total += len(a)
	}
	if conf > MaxConfEntries {
		return fmt.Errorf("command: %w: %d --conf entries, the limit is %d", fault.ErrInvalidArgument, conf, MaxConfEntries)
	}
	for k, v := range env {
		if err := CheckLength("command environment variable name", k, MaxEnvNameBytes); err != nil {
			return err
		}
		if k == "" || strings.ContainsAny(k, "=\x00") {
			// The name is not quoted: a malformed one may hold a secret.
			return fmt.Errorf("command environment: %w: a variable's name is empty or holds '=' or a NUL byte", fault.ErrInvalidArgument)
		}
		name := fmt.Sprintf("command environment variable %.64q", k)
		if err := CheckLength(name, v, MaxArgBytes); err != nil {
			return err
		}
		if strings.ContainsRune(v, 0) {
			return fmt.Errorf("%s: %w: its value holds a NUL byte", name, fault.ErrInvalidArgument)
		}
		total += len(k) + len(v)
	}
	if total > MaxCommandBytes {
		return fmt.Errorf("command: %w: %d bytes of arguments and environment, the limit is %d", fault.ErrInvalidArgument, total, MaxCommandBytes)
	}
	return nil
}

// CheckConf checks an application's properties as its driver describes
// them: at most MaxConfEntries, each name at most MaxNameBytes and each value
// at most MaxArgBytes, MaxCommandBytes in all.
func CheckConf(conf map[string]string) error {
	if len(conf) > MaxConfEntries {
		return fmt.Errorf("conf: %w: %d properties, the limit is %d", fault.ErrInvalidArgument, len(conf), MaxConfEntries)
	}
	total := 0
	for k, v := range conf {
		if k == "" || len(k) > MaxNameBytes || len(v) > MaxArgBytes {
			// The name is not quoted: a malformed one may hold a secret.
			return fmt.Errorf("conf: %w: a property's name is empty or over %d bytes, or its value over %d", fault.ErrInvalidArgument, MaxNameBytes, MaxArgBytes)
		}
		total += len(k) + len(v)
	}
	if total > MaxCommandBytes {
		return fmt.Errorf("conf: %w: %d bytes, the limit is %d", fault.ErrInvalidArgument, total, MaxCommandBytes)
	}
	return nil
}
