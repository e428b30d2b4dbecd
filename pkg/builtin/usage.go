package builtin

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"strconv"
	"syscall"
	"time"

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
			mib, err := parseSize("busy", args[1])
			if err != nil {
				return err
			}
			tasks, err := parseTasks("busy", args[2:])
			if err != nil {
				return err
			}
			input := binary.BigEndian.AppendUint64([]byte(nil), uint64(mib))
			input = append(input, args[0]...)
			inputs := repeat(input, tasks)
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
				b, err := touch("busy", input[:8])
				if err != nil {
					return nil, err
				}
				done := make(chan error, 1)
				go func() { done <- waitForFile(ctx, string(input[8:])) }()
				burn(func() bool {
					select {
					case err = <-done:
						return true
					default:
						return false
					}
				})
				runtime.KeepAlive(b)
				return nil, err
			},
		},
	}
}

// Alloc runs tasks that each allocate and touch SIZE of memory, then report
// the peak resident memory of their executor: in an executor whose memory
// limit is below SIZE, the limit ends the executor, and the message says so.
func Alloc() *app.App {
	return &app.App{
		Name:  "alloc",
		Usage: "alloc SIZE [TASKS]",
		Run: func(ctx context.Context, c app.Context, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return fmt.Errorf("alloc: want SIZE [TASKS]")
			}
			mib, err := parseSize("alloc", args[0])
			if err != nil {
				return err
			}
			tasks, err := parseTasks("alloc", args[1:])
			if err != nil {
				return err
			}
			inputs := repeat(binary.BigEndian.AppendUint64(nil, uint64(mib)), tasks)
			outputs, err := c.RunTasks(ctx, "alloc", inputs)
			if err != nil {
				return err
			}
			var peak uint64
			for _, o := range outputs {
				if len(o) != 8 {
					return fmt.Errorf("alloc: a task reported %d bytes, want its peak", len(o))
				}
				peak = max(peak, binary.BigEndian.Uint64(o))
			}
			fmt.Fprintf(c.Stdout(), "Allocated %s in %d tasks; peak %s in one executor\n", resources.FormatMiB(mib), tasks, resources.FormatBytes(int64(peak)))
			return nil
		},
		Tasks: map[string]app.TaskFunc{
			"alloc": func(_ context.Context, input []byte) ([]byte, error) {
				b, err := touch("alloc", input)
				if err != nil {
					return nil, err
				}
				var ru syscall.Rusage
				if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
					return nil, fmt.Errorf("alloc: its peak: %w", err)
				}
				runtime.KeepAlive(b)
				// Linux counts the peak (maxrss) in KiB.
				return binary.BigEndian.AppendUint64(nil, uint64(ru.Maxrss)<<10), nil
			},
		},
	}
}

// maxSpin bounds how long one spin task burns.
const maxSpin = time.Hour

// Spin runs tasks that each burn one core for SECONDS: an executor granted
// fewer cores than it runs tasks is held to its grant by the worker's CPU
// limit.
func Spin() *app.App {
	return &app.App{
		Name:  "spin",
		Usage: "spin SECONDS [TASKS]",
		Run: func(ctx context.Context, c app.Context, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return fmt.Errorf("spin: want SECONDS [TASKS]")
			}
			seconds, err := strconv.ParseFloat(args[0], 64)
			d := time.Duration(seconds * float64(time.Second))
			if err != nil || !(seconds > 0) || d > maxSpin {
				return fmt.Errorf("spin: SECONDS %q must be a number of seconds above 0 and at most %d", args[0], int(maxSpin.Seconds()))
			}
			tasks, err := parseTasks("spin", args[1:])
			if err != nil {
				return err
			}
			inputs := repeat(binary.BigEndian.AppendUint64(nil, uint64(d)), tasks)
			if _, err := c.RunTasks(ctx, "spin", inputs); err != nil {
				return err
			}
			fmt.Fprintf(c.Stdout(), "Spun %d tasks for %s each\n", tasks, d)
			return nil
		},
		Tasks: map[string]app.TaskFunc{
			"spin": func(ctx context.Context, input []byte) ([]byte, error) {
				if len(input) != 8 {
					return nil, fmt.Errorf("spin: input has %d bytes, want a duration", len(input))
				}
				d := time.Duration(binary.BigEndian.Uint64(input))
				if d <= 0 || d > maxSpin {
					return nil, fmt.Errorf("spin: duration %s out of range", d)
				}
				deadline := time.Now().Add(d)
				burn(func() bool { return ctx.Err() != nil || !time.Now().Before(deadline) })
				return nil, ctx.Err()
			},
		},
	}
}

// parseSize is an application's SIZE argument, in MiB: 1m to maxBusyMiB.
func parseSize(name, arg string) (int64, error) {
	mib, err := resources.ParseSize(arg)
	if err != nil || mib < 1 || mib > maxBusyMiB {
		return 0, fmt.Errorf("%s: SIZE %q must be a size from 1m to %s", name, arg, resources.FormatMiB(maxBusyMiB))
	}
	return mib, nil
}

// touch allocates the MiB that input (8 bytes, big-endian) says and writes
// each of its pages, so that they are resident.
func touch(name string, input []byte) ([]byte, error) {
	if len(input) != 8 {
		return nil, fmt.Errorf("%s: input has %d bytes, want a size", name, len(input))
	}
	mib := binary.BigEndian.Uint64(input)
	if mib < 1 || mib > maxBusyMiB {
		return nil, fmt.Errorf("%s: size %d MiB out of range", name, mib)
	}
	b := make([]byte, mib<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	return b, nil
}

// burn keeps one core busy until stop says so, asking it every few
// thousand steps.
func burn(stop func() bool) {
	for n := uint64(0); !stop(); {
		for range 1 << 16 {
			n = n*31 + 7
		}
	}
}
