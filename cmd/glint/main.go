// Command glint runs every Glint process — master, worker, executor, driver —
// and the client commands submit, status, kill and demo, with the built-in
// applications pi, wordcount and sleep.
package main

import (
	"fmt"
	"os"

	"github.com/glint-cluster/glint/pkg/app"
	"github.com/glint-cluster/glint/pkg/cli"
	"github.com/glint-cluster/glint/pkg/examples"
)

func main() {
	apps, err := app.NewRegistry(examples.Apps()...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "glint: %v\n", err)
		os.Exit(1)
	}
	os.Exit(cli.Main(apps))
}
