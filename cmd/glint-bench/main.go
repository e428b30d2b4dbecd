// Command glint-bench is make bench: it runs the row tests (TestBench* in
// the packages below, which skip unless run by it), prints their table in
// markdown, writes it with every figure as JSON, and can put the table into
// BENCHMARKS.md. With -quick every row is measured on a small scale, to prove
// the harness works (make test runs it so); its numbers are not to be quoted.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/glint-cluster/glint/internal/benchtable"
)

// packages hold the row tests, run one package at a time so no two rows
// share the machine.
var packages = []string{"./services/master/schedule", "./test/e2e"}

// Markers around the table in the -doc file.
const (
	tableStart = "<!-- bench table: written by make bench -->"
	tableEnd   = "<!-- end of bench table -->"
)

// results is what -out holds.
type results struct {
	When  time.Time         `json:"when"`
	Quick bool              `json:"quick"`
	Go    string            `json:"go"`
	CPUs  int               `json:"cpus"`
	Rows  []benchtable.Row  `json:"rows"`
	Notes map[string]string `json:"notes,omitempty"`
}

func main() {
	quick := flag.Bool("quick", false, "measure every row on a small scale (proves the harness works; numbers not to be quoted)")
	out := flag.String("out", "bench/results.json", "where to write the results as JSON")
	doc := flag.String("doc", "", "a markdown file whose table between the bench markers is replaced (BENCHMARKS.md)")
	flag.Parse()
	if err := run(*quick, *out, *doc); err != nil {
		fmt.Fprintln(os.Stderr, "glint-bench:", err)
		os.Exit(1)
	}
}

func run(quick bool, out, doc string) error {
	dir, err := os.MkdirTemp("", "glint-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	rowsFile := filepath.Join(dir, "rows.jsonl")
	env := append(os.Environ(), benchtable.EnvRows+"="+rowsFile)
	if quick {
		env = append(env, benchtable.EnvQuick+"=1")
	}
	for _, pkg := range packages {
		cmd := exec.Command("go", "test", "-count=1", "-run", "^TestBench", "-timeout", "40m", "-v", pkg)
		cmd.Env = env
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("rows in %s: %w", pkg, err)
		}
	}
	rows, err := benchtable.Read(rowsFile)
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		return errors.New("the row tests recorded no rows")
	}
	table := benchtable.Markdown(rows)
	fmt.Print(table)
	r := results{When: time.Now().UTC(), Quick: quick, Go: runtime.Version(), CPUs: runtime.NumCPU(), Rows: rows}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
		return err
	}
	if doc == "" {
		return nil
	}
	return replaceTable(doc, fmt.Sprintf("Measured %s on %d CPUs with %s%s.\n\n%s", r.When.Format("2006-01-02 15:04 MST"), r.CPUs, r.Go, map[bool]string{true: " (quick mode: not to be quoted)"}[quick], table))
}

// replaceTable puts table between the bench markers of the markdown file path.
func replaceTable(path, table string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(b)
	i, j := strings.Index(s, tableStart), strings.Index(s, tableEnd)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %q … %q markers", path, tableStart, tableEnd)
	}
	s = s[:i+len(tableStart)] + "\n" + table + s[j:]
	return os.WriteFile(path, []byte(s), 0o644)
}
