package driver_test

import (
	"context"
	"testing"
)

// BenchmarkDispatch runs no-op tasks on four one-core executors served in
// this process over loopback: the driver's and the executors' dispatch path
// without process scheduling (make bench's row 4 runs them as processes).
func BenchmarkDispatch(b *testing.B) {
	a := echoApp(func(_ context.Context, in []byte) ([]byte, error) { return in, nil })
	d := startDriver(b, a, nil)
	for id := range int32(4) {
		startExecutor(b, d, a, id, 1)
	}
	in := inputs(1000)
	for b.Loop() {
		if _, err := d.RunTasks(context.Background(), "task", in); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(in))/b.Elapsed().Seconds(), "tasks/s")
}
