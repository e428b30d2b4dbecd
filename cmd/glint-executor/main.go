// Command glint-executor is `glint executor` alone, with the built-in
// applications pi, wordcount, sleep, hold and busy: beside glint, it is what
// workers start for the executors of the applications glint submits, and,
// linking only what an executor needs, it starts faster than glint.
package main

import (
	"os"

	"github.com/glint-cluster/glint/executor"
	"github.com/glint-cluster/glint/pkg/builtin"
)

func main() {
	os.Exit(executor.Main(builtin.Apps()...))
}
