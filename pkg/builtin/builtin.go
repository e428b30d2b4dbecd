// Package builtin holds Glint's built-in applications: pi (SparkPi), wordcount,
// sleep, hold, busy, alloc and spin.
package builtin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/glint-cluster/glint/pkg/app"
)

// Apps returns the built-in applications.
func Apps() []*app.App {
	return []*app.App{Pi(), WordCount(), Sleep(), Hold(), Busy(), Alloc(), Spin()}
}

// samplesPerSlice is SparkPi's 100000 points per slice.
const samplesPerSlice = 100_000

// Pi estimates π by throwing random points at the unit square, as SparkPi does.
func Pi() *app.App {
	return &app.App{
		Name:  "pi",
		Usage: "pi [SLICES]",
		Run: func(ctx context.Context, c app.Context, args []string) error {
			slices := 2
			if len(args) > 1 {
				return fmt.Errorf("pi: want at most one argument, SLICES")
			}
			if len(args) == 1 {
				n, err := strconv.Atoi(args[0])
				if err != nil || n < 1 || n > 100_000 {
					return fmt.Errorf("pi: SLICES %q must be an integer from 1 to 100000", args[0])
				}
				slices = n
			}
			inputs := make([][]byte, slices)
			for i := range inputs {
				inputs[i] = binary.BigEndian.AppendUint64(nil, uint64(i))
			}
			outputs, err := c.RunTasks(ctx, "sample", inputs)
			if err != nil {
				return err
			}
			var inside uint64
			for _, out := range outputs {
				if len(out) != 8 {
					return fmt.Errorf("pi: task returned %d bytes, want 8", len(out))
				}
				inside += binary.BigEndian.Uint64(out)
			}
			total := float64(slices * samplesPerSlice)
			fmt.Fprintf(c.Stdout(), "Pi is roughly %f\n", 4*float64(inside)/total)
			return nil
		},
		Tasks: map[string]app.TaskFunc{
			"sample": func(ctx context.Context, input []byte) ([]byte, error) {
				if len(input) != 8 {
					return nil, fmt.Errorf("sample: input has %d bytes, want 8", len(input))
				}
				rng := rand.New(rand.NewPCG(binary.BigEndian.Uint64(input), 0x9e3779b97f4a7c15))
				var inside uint64
				for i := range samplesPerSlice {
					if i%10_000 == 0 && ctx.Err() != nil {
						return nil, ctx.Err()
					}
					x, y := rng.Float64()*2-1, rng.Float64()*2-1
					if x*x+y*y <= 1 {
						inside++
					}
				}
				return binary.BigEndian.AppendUint64(nil, inside), nil
			},
		},
	}
}

// wordcountPartitions is how many tasks wordcount splits its file into.
const wordcountPartitions = 4

// WordCount counts the words of a file and prints the most frequent ones.
func WordCount() *app.App {
	return &app.App{
		Name:  "wordcount",
		Usage: "wordcount FILE",
		Run: func(ctx context.Context, c app.Context, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("wordcount: want exactly one argument, FILE")
			}
			data, err := os.ReadFile(args[0])
			if err != nil {
				return fmt.Errorf("wordcount: %w", err)
			}
			outputs, err := c.RunTasks(ctx, "count", splitLines(data, wordcountPartitions))
			if err != nil {
				return err
			}
			totals := map[string]int{}
			for _, out := range outputs {
				var counts map[string]int
				if err := json.Unmarshal(out, &counts); err != nil {
					return fmt.Errorf("wordcount: task output: %w", err)
				}
				for w, n := range counts {
					totals[w] += n
				}
			}
			words := make([]string, 0, len(totals))
			for w := range totals {
				words = append(words, w)
			}
			sort.Slice(words, func(i, j int) bool {
				if totals[words[i]] != totals[words[j]] {
					return totals[words[i]] > totals[words[j]]
				}
				return words[i] < words[j]
			})
			for _, w := range words[:min(10, len(words))] {
				fmt.Fprintf(c.Stdout(), "%s: %d\n", w, totals[w])
			}
			return nil
		},
		Tasks: map[string]app.TaskFunc{
			"count": func(ctx context.Context, input []byte) ([]byte, error) {
				counts := map[string]int{}
				sc := bufio.NewScanner(bytes.NewReader(input))
				sc.Buffer(make([]byte, 64<<10), 16<<20)
				sc.Split(bufio.ScanWords)
				for sc.Scan() {
					w := strings.ToLower(strings.TrimFunc(sc.Text(), func(r rune) bool {
						return !unicode.IsLetter(r) && !unicode.IsNumber(r)
					}))
					if w != "" {
						counts[w]++
					}
				}
				if err := sc.Err(); err != nil {
					return nil, err
				}
				return json.Marshal(counts)
			},
		},
	}
}

// splitLines cuts data into at most n pieces at line boundaries.
func splitLines(data []byte, n int) [][]byte {
	var parts [][]byte
	size := len(data)/n + 1
	for len(data) > 0 {
		end := min(size, len(data))
		if i := bytes.IndexByte(data[end:], '\n'); i >= 0 {
			end += i + 1
		} else {
			end = len(data)
		}
		parts = append(parts, data[:end])
		data = data[end:]
	}
	if len(parts) == 0 {
		parts = append(parts, nil)
	}
	return parts
}

// Sleep runs tasks that sleep; it keeps executors busy for a known time.
func Sleep() *app.App {
	return &app.App{
		Name:  "sleep",
		Usage: "sleep DURATION [TASKS]",
		Run: func(ctx context.Context, c app.Context, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return fmt.Errorf("sleep: want DURATION [TASKS]")
			}
			d, err := time.ParseDuration(args[0])
			if err != nil || d < 0 {
				return fmt.Errorf("sleep: DURATION %q must be a non-negative duration such as 5s", args[0])
			}
			tasks, err := parseTasks("sleep", args[1:])
			if err != nil {
				return err
			}
			inputs := repeat([]byte(d.String()), tasks)
			if _, err := c.RunTasks(ctx, "sleep", inputs); err != nil {
				return err
			}
			fmt.Fprintf(c.Stdout(), "Slept %s in %d tasks\n", d, tasks)
			return nil
		},
		Tasks: map[string]app.TaskFunc{
			"sleep": func(ctx context.Context, input []byte) ([]byte, error) {
				d, err := time.ParseDuration(string(input))
				if err != nil {
					return nil, fmt.Errorf("sleep: %w", err)
				}
				t := time.NewTimer(d)
				defer t.Stop()
				select {
				case <-t.C:
					return nil, nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			},
		},
	}
}

// holdPoll is how often a hold task looks for its file.
const holdPoll = 10 * time.Millisecond

// Hold runs tasks that last until a file exists: executors stay busy exactly
// as long as whoever holds them wants (a demo, or a test that must see an
// application running), and are released by creating FILE on their host.
// With THEN, the application goes on, its executors idle, until THEN exists
// on the driver's host (a test of what happens to idle executors).
func Hold() *app.App {
	return &app.App{
		Name:  "hold",
		Usage: "hold FILE [TASKS [THEN]]",
		Run: func(ctx context.Context, c app.Context, args []string) error {
			if len(args) < 1 || len(args) > 3 || args[0] == "" {
				return fmt.Errorf("hold: want FILE [TASKS [THEN]]")
			}
			tasks, err := parseTasks("hold", args[1:min(2, len(args))])
			if err != nil {
				return err
			}
			inputs := repeat([]byte(args[0]), tasks)
			if _, err := c.RunTasks(ctx, "hold", inputs); err != nil {
				return err
			}
			fmt.Fprintf(c.Stdout(), "Held %d tasks until %s existed\n", tasks, args[0])
			if len(args) == 3 {
				if err := waitForFile(ctx, args[2]); err != nil {
					return err
				}
			}
			return nil
		},
		Tasks: map[string]app.TaskFunc{
			"hold": func(ctx context.Context, input []byte) ([]byte, error) {
				return nil, waitForFile(ctx, string(input))
			},
		},
	}
}

// maxTasks bounds the tasks of one built-in application's job.
const maxTasks = 10_000

// parseTasks is an application's optional TASKS argument, the first of
// args: 1 when there is none.
func parseTasks(name string, args []string) (int, error) {
	if len(args) == 0 {
		return 1, nil
	}
	tasks, err := strconv.Atoi(args[0])
	if err != nil || tasks < 1 || tasks > maxTasks {
		return 0, fmt.Errorf("%s: TASKS %q must be an integer from 1 to %d", name, args[0], maxTasks)
	}
	return tasks, nil
}

// repeat is n tasks' inputs, each input.
func repeat(input []byte, n int) [][]byte {
	inputs := make([][]byte, n)
	for i := range inputs {
		inputs[i] = input
	}
	return inputs
}

// waitForFile returns once path exists, or with ctx's error.
func waitForFile(ctx context.Context, path string) error {
	t := time.NewTicker(holdPoll)
	defer t.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
