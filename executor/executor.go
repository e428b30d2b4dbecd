// Package executor is the entry point of a Glint executor program: Main runs
// what `glint executor` runs, alone, with a set of applications. Built
// beside a binary that calls glint.Main, under that binary's name followed
// by child.ExecutorSuffix ("-executor") and with the same applications, it
// is what workers start for the executors of the applications that binary
// submits (child.ExecutorCommand): it links and initialises only what an
// executor needs, so each cold launch starts sooner.
//
//	func main() { os.Exit(executor.Main(myApp)) }
package executor

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/glint-cluster/glint/internal/process"
	"github.com/glint-cluster/glint/pkg/app"
)

// Main runs the executor command for apps and returns the process's exit
// status. Two applications with one name are an error (status 1).
func Main(apps ...*app.App) int {
	name := filepath.Base(os.Args[0])
	registry, err := app.NewRegistry(apps...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
	g := &process.Globals{Apps: registry, Stdout: os.Stdout, Stderr: os.Stderr}
	cmd := process.NewExecutorCommand(g)
	cmd.Use, cmd.Hidden = name, false
	return process.Execute(g.Root(cmd))
}
