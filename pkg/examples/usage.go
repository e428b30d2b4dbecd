package examples

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"

	"github.com/glint-cluster/glint/pkg/app"
	"github.com/glint-cluster/glint/pkg/resources"
)

// maxBusyMiB bounds what one busy task touches.
const maxBusyMiB = 64 << 10

// Busy keeps its executors busy until a file exists: each task touches
// SIZE of memory, holds it, and spins one core. It is what the measured
// usage of executors (the worker's /metrics, `glint status`) is seen on.
func Busy() *app.App {
	return &app.App{
		Name:  "busy",
		Usage: "busy FILE SIZE [TASKS]",
		Run: func(ctx context.Context, c app.Context, args []string) error {
			if len(args) < 2 || len(args) > 3 || args[0] == "" {
				return fmt.Errorf("busy: want FILE SIZE [TASKS]")
			}
			mib, err := resources.ParseSize(args[1])
			if err != nil || mib < 1 || mib > maxBusyMiB {
				return fmt.Errorf("busy: SIZE %q must be a size from 1m to %s", args[1], resources.FormatMiB(maxBusyMiB))
			}
			tasks := 1
			if len(args) == 3 {
				if _, err := fmt.Sscan(args[2], &tasks); err != nil || tasks < 1 || tasks > 10_000 {
					return fmt.Errorf("busy: TASKS %q must be an integer from 1 to 10000", args[2])
				}
			}
			input := binary.BigEndian.AppendUint64([]byte(nil), uint64(mib))
			input = append(input, args[0]...)
			inputs := make([][]byte, tasks)
			for i := range inputs {
				inputs[i] = input
			}
			if _, err := c.RunTasks(ctx, "busy", inputs); err != nil {
				return err
			}
			fmt.Fprintf(c.Stdout(), "Busy %d tasks of %s each until %s existed\n", tasks, resources.FormatMiB(mib), args[0])
			return nil
		},
		Tasks: map[string]app.TaskFunc{
			"busy": func(ctx context.Context, input []byte) ([]byte, error) {
				if len(input) < 9 {
					return nil, fmt.Errorf("busy: input has %d bytes, want a size and a file", len(input))
				}
				mib := binary.BigEndian.Uint64(input)
				if mib < 1 || mib > maxBusyMiB {
					return nil, fmt.Errorf("busy: size %d MiB out of range", mib)
				}
				b := make([]byte, mib<<20)
				for i := 0; i < len(b); i += 4096 {
					b[i] = 1
				}
				done := make(chan error, 1)
				go func() { done <- waitForFile(ctx, string(input[8:])) }()
				for n := uint64(0); ; n++ {
					select {
					case err := <-done:
						runtime.KeepAlive(b)
						return nil, err
					default:
					}
					for range 1 << 16 {
						n = n*31 + 7
					}
				}
			},
		},
	}
}
