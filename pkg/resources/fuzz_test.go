package resources

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/glint-cluster/glint/pkg/fault"
)

// FuzzParseSize: a size parses to at least 1 MiB, or fails as an invalid
// argument; a parsed size written in MiB parses back to itself.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"512m", "2g", "1t", "512MiB", "1024", "2048k", " 64m ", "0", "-1g", "9223372036854775807t", "1e3", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		mib, err := ParseSize(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidSize) || !errors.Is(err, fault.ErrInvalidArgument) {
				t.Fatalf("ParseSize(%q): error %v is not ErrInvalidSize", s, err)
			}
			return
		}
		if mib < 1 {
			t.Fatalf("ParseSize(%q) = %d MiB", s, mib)
		}
		if back, err := ParseSize(strconv.FormatInt(mib, 10) + "m"); err != nil || back != mib {
			t.Fatalf("ParseSize(%q) = %d, but %d MiB parses to %d, %v", s, mib, mib, back, err)
		}
	})
}

// FuzzCheckCommand: a command passes or fails as an invalid argument, and a
// passing one is within every limit.
func FuzzCheckCommand(f *testing.F) {
	f.Add("/bin/glint", 3, "--conf", "K", "v")
	f.Add("", MaxArgs+1, "--conf", strings.Repeat("k", MaxEnvNameBytes+1), "v")
	f.Fuzz(func(t *testing.T, arg0 string, n int, arg, key, value string) {
		n = min(max(n, 0), 2*MaxArgs)
		args := append([]string{arg0}, make([]string, n)...)
		for i := 1; i < len(args); i++ {
			args[i] = arg
		}
		err := CheckCommand(args, map[string]string{key: value})
		if err != nil {
			if !errors.Is(err, fault.ErrInvalidArgument) || len(err.Error()) > 1024 {
				t.Fatalf("error %.200q: not a brief invalid argument", err)
			}
			return
		}
		total := len(key) + len(value)
		for _, a := range args {
			total += len(a)
		}
		if len(args) > MaxArgs || total > MaxCommandBytes || len(key) > MaxEnvNameBytes || len(value) > MaxArgBytes {
			t.Fatalf("accepted %d args, %d bytes", len(args), total)
		}
	})
}
