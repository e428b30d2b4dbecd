// Package glint is the entry point of a Glint binary: Main runs the glint
// command line (master, worker, executor, driver, submit, status, kill, demo,
// trace, health) with a set of applications. Command glint calls it with the
// built-in applications; a user's own binary calls it with its own, and so
// acts as driver and executor of them:
//
//	func main() { os.Exit(glint.Main(myApp)) }
package glint

import (
	"fmt"
	"os"

	"github.com/glint-cluster/glint/internal/cli"
	"github.com/glint-cluster/glint/pkg/app"
)

// Main runs the glint command line for apps and returns the process's exit
// status. Two applications with one name are an error (status 1).
func Main(apps ...*app.App) int {
	registry, err := app.NewRegistry(apps...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "glint: %v\n", err)
		return 1
	}
	return cli.Main(registry)
}
