package schedule

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func BenchmarkSchedule(b *testing.B) {
	for _, n := range []int{10, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			s := benchSnapshot(n)
			rng := rand.New(rand.NewPCG(1, 2))
			b.ReportAllocs()
			for b.Loop() {
				Schedule(s, rng)
			}
		})
	}
}

// benchSnapshot is a busy cluster of n workers with 16 cores and 64 GiB each,
// three in four of them partly used, with 20 waiting applications and 3
// waiting drivers.
func benchSnapshot(n int) Snapshot {
	s := Snapshot{SpreadOut: true}
	for i := range n {
		used := int32(i%4) * 4 // 0, 4, 8 or 12 cores, with 4 GiB each
		s.Workers = append(s.Workers, WorkerSlot{
			ID:            fmt.Sprintf("worker-%d", i),
			Cores:         16,
			MemoryMiB:     64 << 10,
			CoresFree:     16 - used,
			MemoryFreeMiB: (64 - 4*int64(used)) << 10,
		})
	}
	for i := range 20 {
		a := AppDemand{
			ID:                   fmt.Sprintf("app-%d", i),
			CoresLeft:            int32(8 * (1 + i%5)), // spark.cores.max 8…40
			CoresPerExecutor:     int32(i%3) * 2,       // unset, 2 or 4
			MemoryPerExecutorMiB: int64(1+i%4) << 10,   // 1…4 GiB
			ExecutorsLeft:        math.MaxInt,
		}
		if i%5 == 3 {
			a.ExecutorsLeft = 4 // dynamic allocation's target
		}
		if i == 19 {
			a.CoresLeft = math.MaxInt32 // the last app takes what is left
		}
		s.Apps = append(s.Apps, a)
	}
	for i := range 3 {
		s.Drivers = append(s.Drivers, DriverDemand{ID: fmt.Sprintf("driver-%d", i), Cores: int32(1 + i), MemoryMiB: int64(1+i) << 10})
	}
	return s
}
