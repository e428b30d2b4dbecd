// Command montecarlo is a Glint application of its own, built the way you
// would build yours: it registers the application "montecarlo" with Glint's
// app API (pkg/app) and hands it to glint.Main, so the one binary is the
// master, the worker, the executors, the driver and the submit client:
//
//	montecarlo master --listen 127.0.0.1:7077 &
//	montecarlo worker --master http://127.0.0.1:7077 --listen 127.0.0.1:7078 &
//	montecarlo submit --master http://127.0.0.1:7077 montecarlo 1000000 8
//
// montecarlo SAMPLES TASKS estimates π from SAMPLES random points in each of
// TASKS tasks: each task counts the points of the unit square that fall in
// the quarter circle, and the driver adds the counts up.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"

	"github.com/glint-cluster/glint"
	"github.com/glint-cluster/glint/pkg/app"
)

func main() {
	os.Exit(glint.Main(monteCarlo()))
}

// monteCarlo is the application: its driver function (Run) and its one task
// function (Tasks["count"]).
func monteCarlo() *app.App {
	return &app.App{
		Name:  "montecarlo",
		Usage: "montecarlo [SAMPLES [TASKS]]",
		Run:   estimate,
		Tasks: map[string]app.TaskFunc{"count": count},
	}
}

// estimate is the driver function: it runs TASKS "count" tasks, each with
// its own seed and SAMPLES points, and prints the estimate.
func estimate(ctx context.Context, c app.Context, args []string) error {
	samples, tasks := 100_000, 4
	for i, dst := range []*int{&samples, &tasks} {
		if i >= len(args) {
			break
		}
		n, err := strconv.Atoi(args[i])
		if err != nil || n < 1 || n > 100_000_000 {
			return fmt.Errorf("montecarlo: %q must be a whole number from 1 to 100000000", args[i])
		}
		*dst = n
	}
	inputs := make([][]byte, tasks)
	for i := range inputs {
		inputs[i] = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(i)), uint64(samples))
	}
	outputs, err := c.RunTasks(ctx, "count", inputs)
	if err != nil {
		return err
	}
	var inside uint64
	for _, out := range outputs {
		inside += binary.BigEndian.Uint64(out)
	}
	pi := 4 * float64(inside) / float64(uint64(samples)*uint64(tasks))
	fmt.Fprintf(c.Stdout(), "Pi is roughly %.5f (%d points in %d tasks of application %s)\n", pi, samples*tasks, tasks, c.AppID())
	return nil
}

// count is the task function: its input is a seed and a number of points,
// its output how many of the points fell inside the quarter circle.
func count(ctx context.Context, input []byte) ([]byte, error) {
	if len(input) != 16 {
		return nil, errors.New("count: want a seed and a number of samples")
	}
	seed, samples := binary.BigEndian.Uint64(input), binary.BigEndian.Uint64(input[8:])
	rng := rand.New(rand.NewPCG(seed, 0x6c696e74))
	var inside uint64
	for i := range samples {
		if i%65536 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		x, y := rng.Float64(), rng.Float64()
		if x*x+y*y <= 1 {
			inside++
		}
	}
	return binary.BigEndian.AppendUint64(nil, inside), nil
}
