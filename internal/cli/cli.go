// Package cli is the glint command line: master, worker, executor, driver,
// submit, status, kill, demo, trace and health, wired to the services. It
// sits above services/; binaries reach it through glint.Main.
package cli

import (
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/glint-cluster/glint/internal/process"
	"github.com/glint-cluster/glint/pkg/app"
	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/telemetry/otlp"
)

// Main runs the glint command line for the applications in apps and returns
// the process exit status.
func Main(apps *app.Registry) int {
	return process.Execute(newRoot(apps, os.Args[1:], os.Stdout, os.Stderr))
}

// globals are the flags every subcommand has.
type globals struct {
	*process.Globals
}

// commands make glint's subcommands, by name.
var commands = map[string]func(*globals) *cobra.Command{
	"master": newMasterCommand, "worker": newWorkerCommand, child.ExecutorSubcommand: newExecutorCommand,
	"driver": newDriverCommand, "submit": newSubmitCommand, "status": newStatusCommand,
	"kill": newKillCommand, "decommission": newDecommissionCommand, "demo": newDemoCommand,
	"trace": newTraceCommand, "health": newHealthCommand, "token": newTokenCommand,
}

// newExecutorCommand is `glint executor` (internal/process, which
// glint-executor is alone).
func newExecutorCommand(g *globals) *cobra.Command { return process.NewExecutorCommand(g.Globals) }

// newRoot returns the glint command for args. When args begin with a
// subcommand's name only that one is made: making the other subcommands'
// flags would add to every executor's start, and the page faults of their
// code more still.
func newRoot(apps *app.Registry, args []string, stdout, stderr io.Writer) *cobra.Command {
	g := &globals{&process.Globals{Apps: apps, Stdout: stdout, Stderr: stderr, Export: otlp.Exporter}}
	root := g.Root(&cobra.Command{
		Use:   "glint",
		Short: "Glint: an observable re-creation of Spark's standalone cluster manager",
	})
	if len(args) > 0 {
		if mk, ok := commands[args[0]]; ok {
			root.AddCommand(mk(g))
			return root
		}
	}
	for _, mk := range commands {
		root.AddCommand(mk(g))
	}
	return root
}

// listenHost is the host part of a listen address, or "" when unspecified.
func listenHost(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return ""
	}
	return host
}

// parseConf turns repeated --conf k=v into a map.
func parseConf(pairs []string) (map[string]string, error) {
	conf := map[string]string{}
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			return nil, fmt.Errorf("--conf %q: want KEY=VALUE", p)
		}
		if strings.TrimSpace(k) == "" {
			// The value is not quoted: it may be a secret.
			return nil, fmt.Errorf("--conf: want KEY=VALUE, the key is empty")
		}
		conf[strings.TrimSpace(k)] = v
	}
	return conf, nil
}
