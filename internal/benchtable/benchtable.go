// Package benchtable is how `make bench`'s rows travel from the tests that
// measure them to the table: each row test records its measurement as one
// JSON line in the file named by GLINT_BENCH_ROWS, and cmd/glint-bench, which
// runs those tests, reads the lines back and prints the table.
package benchtable

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// The environment cmd/glint-bench sets for the row tests.
const (
	// EnvRows names the file rows are appended to; without it the row tests skip.
	EnvRows = "GLINT_BENCH_ROWS"
	// EnvQuick, set to 1, asks for the quick mode: every row measured on a
	// small scale, to prove the harness works, not to be quoted.
	EnvQuick = "GLINT_BENCH_QUICK"
)

// Row is one line of the table: a measurement, the figures it was made of,
// and the target it is held against.
type Row struct {
	// ID orders the table ("2", "5b").
	ID string `json:"id"`
	// What is measured, in a few words.
	What string `json:"what"`
	// Result is the headline, as it reads in the table ("p50 31.2 ms, 1.7× floor").
	Result string `json:"result"`
	// Target is the goal ("≤ 2.0× floor"); empty when the row has none.
	Target string `json:"target,omitempty"`
	// Met says whether Result reaches Target; nil when there is none.
	Met *bool `json:"met,omitempty"`
	// Figures are the numbers behind Result, by name with their unit.
	Figures map[string]float64 `json:"figures"`
}

// Start skips t unless the harness runs it (EnvRows set), and says whether
// the run is the quick one.
func Start(t testing.TB) (quick bool) {
	t.Helper()
	if os.Getenv(EnvRows) == "" {
		t.Skipf("a row of make bench: run by cmd/glint-bench (%s unset)", EnvRows)
	}
	return os.Getenv(EnvQuick) == "1"
}

var mu sync.Mutex

// Record appends r to the rows file and logs it.
func Record(t testing.TB, r Row) {
	t.Helper()
	line, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("row %s: %s: %s (target %s)", r.ID, r.What, r.Result, r.Target)
	mu.Lock()
	defer mu.Unlock()
	f, err := os.OpenFile(os.Getenv(EnvRows), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(append(line, '\n')); err != nil {
		t.Fatal(err)
	}
}

// Check returns whether got meets a target of at most (atMost) or at least max.
func Check(got, bound float64, atMost bool) *bool {
	met := got >= bound
	if atMost {
		met = got <= bound
	}
	return &met
}

// Read parses a rows file, ordered by ID.
func Read(path string) ([]Row, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rows []Row
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var r Row
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, fmt.Errorf("row %d: %w", i+1, err)
		}
		rows = append(rows, r)
	}
	sort.SliceStable(rows, func(i, j int) bool { return rowLess(rows[i].ID, rows[j].ID) })
	return rows, nil
}

// rowLess orders "2" < "2b" < "10" (number first, then suffix).
func rowLess(a, b string) bool {
	na, sa := splitID(a)
	nb, sb := splitID(b)
	if na != nb {
		return na < nb
	}
	return sa < sb
}

func splitID(id string) (int, string) {
	n := 0
	i := 0
	for ; i < len(id) && id[i] >= '0' && id[i] <= '9'; i++ {
		n = n*10 + int(id[i]-'0')
	}
	return n, id[i:]
}

// Markdown renders rows as the table BENCHMARKS.md holds.
func Markdown(rows []Row) string {
	var b strings.Builder
	b.WriteString("| # | measure | result | target | met |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		met := ""
		if r.Met != nil {
			met = "no"
			if *r.Met {
				met = "yes"
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", r.ID, r.What, r.Result, r.Target, met)
	}
	return b.String()
}

// Percentile returns the p-th percentile (0–100) of ds, nearest rank.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

// Ms is d in milliseconds.
func Ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
