// Package resources parses and formats the cores and memory sizes Glint schedules,
// in Spark's forms: "512m", "2g", "1t", "512MiB", and plain numbers meaning MiB.
package resources

import (
	"bufio"
	"fmt"
	"github.com/glint-cluster/glint/pkg/fault"
	"os"
	"strconv"
	"strings"
)

// ErrInvalidSize is returned (wrapped) for a size that cannot be parsed or is
// not positive; it is a fault.ErrInvalidArgument.
var ErrInvalidSize = fault.New(fault.ErrInvalidArgument, "invalid size")

// unit multipliers in KiB, so that "512k" rounds to whole MiB like Spark's memoryStringToMb.
var unitKiB = map[string]int64{
	"k": 1, "kb": 1, "kib": 1,
	"m": 1 << 10, "mb": 1 << 10, "mib": 1 << 10, "": 1 << 10,
	"g": 1 << 20, "gb": 1 << 20, "gib": 1 << 20,
	"t": 1 << 30, "tb": 1 << 30, "tib": 1 << 30,
}

// ParseSize returns the size s names in MiB. A number without a unit is MiB.
// Sizes must be at least 1 MiB.
func ParseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	mult, ok := unitKiB[strings.TrimSpace(t[i:])]
	if i == 0 || !ok {
		return 0, fmt.Errorf("size %q: %w: want a number with an optional unit k, m, g, t (512m, 2g, 512MiB)", s, ErrInvalidSize)
	}
	n, err := strconv.ParseInt(t[:i], 10, 64)
	if err != nil || n > (1<<62)/mult {
		return 0, fmt.Errorf("size %q: %w: too large", s, ErrInvalidSize)
	}
	mib := n * mult / (1 << 10)
	if mib < 1 {
		return 0, fmt.Errorf("size %q: %w: must be at least 1 MiB", s, ErrInvalidSize)
	}
	return mib, nil
}

// FormatMiB renders a size in MiB the way Spark's UI does: "512.0 MiB", "2.0 GiB".
// It formats with strconv, not fmt, so that its allocations are the same on
// every call, -race or not (fmt's sync.Pool drops buffers at random under
// -race), and tests can count the allocations of what uses it.
func FormatMiB(mib int64) string {
	switch {
	case mib >= 1<<20:
		return strconv.FormatFloat(float64(mib)/(1<<20), 'f', 1, 64) + " TiB"
	case mib >= 1<<10:
		return strconv.FormatFloat(float64(mib)/(1<<10), 'f', 1, 64) + " GiB"
	default:
		return strconv.FormatInt(mib, 10) + ".0 MiB"
	}
}

// DefaultWorkerMemoryMiB is Spark's default worker memory: the machine's total
// memory minus 1 GiB, but at least 512 MiB.
func DefaultWorkerMemoryMiB() (int64, error) {
	total, err := totalMemoryMiB("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	return max(total-1024, 512), nil
}

func totalMemoryMiB(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("read total memory: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kib, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("read total memory: %w", err)
			}
			return kib >> 10, nil
		}
	}
	return 0, fmt.Errorf("read total memory: no MemTotal in %s", path)
}

// Usage is a worker's cores and memory (MiB), total, used and free, under
// the field names of Spark's /json; the master's and the worker's /json both
// embed it.
type Usage struct {
	Cores      int32 `json:"cores"`
	CoresUsed  int32 `json:"coresused"`
	CoresFree  int32 `json:"coresfree"`
	Memory     int64 `json:"memory"`
	MemoryUsed int64 `json:"memoryused"`
	MemoryFree int64 `json:"memoryfree"`
}

// NewUsage returns the usage of cores and memory MiB of which coresUsed and
// memoryUsed are in use.
func NewUsage(cores, coresUsed int32, memory, memoryUsed int64) Usage {
	return Usage{
		Cores: cores, CoresUsed: coresUsed, CoresFree: cores - coresUsed,
		Memory: memory, MemoryUsed: memoryUsed, MemoryFree: memory - memoryUsed,
	}
}
