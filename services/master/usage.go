package master

import (
	"fmt"
	"math"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/fault"
	"github.com/glint-cluster/glint/pkg/resources"
)

// maxUsageCPUSeconds bounds the CPU time a worker may report for one
// process: over 300 core-years, far beyond any real one, and small enough
// that sums of MaxCores of them stay exact in a float64.
const maxUsageCPUSeconds = 1e10

// usage is what an executor or driver uses, as its worker measured it
// (Heartbeat), or a sum of those.
type usage struct {
	cpuSeconds  float64
	memoryBytes int64
	peakBytes   int64
}

func (u *usage) add(v usage) {
	u.cpuSeconds += v.cpuSeconds
	u.memoryBytes += v.memoryBytes
	u.peakBytes += v.peakBytes
}

func (u usage) proto() *masterv1.Usage {
	return &masterv1.Usage{CpuSeconds: u.cpuSeconds, MemoryBytes: u.memoryBytes, MemoryPeakBytes: u.peakBytes}
}

// checkUsage refuses a heartbeat whose usage is not what a worker measures:
// more entries than a worker runs processes, an entry naming neither an
// executor nor a driver (or both), CPU that is not a finite number of
// seconds from 0 to maxUsageCPUSeconds, memory below 0 or above
// resources.MaxMemoryMiB, a peak below the current memory.
func checkUsage(worker string, list []*masterv1.ProcessUsage) error {
	if len(list) > resources.MaxCores {
		return fmt.Errorf("worker %s: %w: usage of %d processes, the limit is %d", worker, fault.ErrInvalidArgument, len(list), resources.MaxCores)
	}
	const maxBytes = resources.MaxMemoryMiB << 20
	for i, u := range list {
		bad := func(field, want string, v any) error {
			return fmt.Errorf("worker %s: %w: usage[%d].%s %v: want %s", worker, fault.ErrInvalidArgument, i, field, v, want)
		}
		cpu := u.GetCpuSeconds()
		switch {
		case (u.GetDriverId() == "") == (u.GetAppId() == ""):
			return bad("driver_id", "an executor's app_id or a driver's id, one of them", u.GetDriverId())
		case math.IsNaN(cpu) || cpu < 0 || cpu > maxUsageCPUSeconds:
			return bad("cpu_seconds", fmt.Sprintf("0 to %g", float64(maxUsageCPUSeconds)), cpu)
		case u.GetMemoryBytes() < 0 || u.GetMemoryBytes() > maxBytes:
			return bad("memory_bytes", fmt.Sprintf("0 to %d", int64(maxBytes)), u.GetMemoryBytes())
		case u.GetMemoryPeakBytes() < u.GetMemoryBytes() || u.GetMemoryPeakBytes() > maxBytes:
			return bad("memory_peak_bytes", fmt.Sprintf("memory_bytes to %d", int64(maxBytes)), u.GetMemoryPeakBytes())
		}
	}
	return nil
}

// usageLocked records the usage w reported for what the master placed on
// it; an entry for anything else (an executor that just ended, another
// worker's, one never placed) is ignored.
func usageLocked(w *workerInfo, list []*masterv1.ProcessUsage) {
	for _, p := range list {
		u := usage{cpuSeconds: p.GetCpuSeconds(), memoryBytes: p.GetMemoryBytes(), peakBytes: p.GetMemoryPeakBytes()}
		if id := p.GetDriverId(); id != "" {
			if d := w.drivers[id]; d != nil {
				d.used = u
			}
			continue
		}
		if e := w.executors[executorKey{p.GetAppId(), p.GetExecutorId()}]; e != nil {
			e.used = u
		}
	}
}

// usedLocked is what w's executors and drivers use, summed.
func (w *workerInfo) usedLocked() usage {
	var u usage
	for _, e := range w.executors {
		u.add(e.used)
	}
	for _, d := range w.drivers {
		u.add(d.used)
	}
	return u
}

// usageJSON is what an executor, driver, worker or application uses, in
// /json.
type usageJSON struct {
	CPUSeconds  float64 `json:"cpuseconds"`
	MemoryBytes int64   `json:"memorybytes"`
	PeakBytes   int64   `json:"memorypeakbytes"`
}

func usageOf(u *masterv1.Usage) usageJSON {
	return usageJSON{CPUSeconds: u.GetCpuSeconds(), MemoryBytes: u.GetMemoryBytes(), PeakBytes: u.GetMemoryPeakBytes()}
}
