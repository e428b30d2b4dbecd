// Command generate writes Glint's Grafana dashboards, as built by package
// dashboards, to glint-cluster.json and glint-launch.json in a directory:
//
//	go run ./dashboards/generate -dir dashboards
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/glint-cluster/glint/dashboards"
)

func main() {
	dir := flag.String("dir", "", "directory to write the dashboards' JSON files to (required)")
	flag.Parse()
	if *dir == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: generate -dir DIR")
		os.Exit(2)
	}
	if err := generate(*dir); err != nil {
		fmt.Fprintln(os.Stderr, "generate:", err)
		os.Exit(1)
	}
}

// generate writes every dashboard's JSON file into dir.
func generate(dir string) error {
	files, err := dashboards.Files()
	if err != nil {
		return err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, files[name], 0o644); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		fmt.Println("wrote", path)
	}
	return nil
}
