// Command glint runs every Glint process — master, worker, executor, driver —
// and the client commands submit, status, kill, demo, trace and health, with
// the built-in applications pi, wordcount, sleep, hold, busy, alloc and spin.
package main

import (
	"os"

	"github.com/glint-cluster/glint"
	"github.com/glint-cluster/glint/pkg/builtin"
)

func main() {
	os.Exit(glint.Main(builtin.Apps()...))
}
