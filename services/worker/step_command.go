package worker

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/fault"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/resources"
)

// commandStep turns the command template into the process's argument vector
// and environment: template variables ({{EXECUTOR_ID}}, {{HOSTNAME}},
// {{CORES}}, {{APP_ID}}, {{WORKER_URL}}; {{DRIVER_ID}} for drivers) are
// substituted argument by argument — never through a shell.
type commandStep struct{}

// Name is "command".
func (commandStep) Name() string { return lifecycle.StepCommand }

// Run fills in l.argv and l.environ: the worker's environment, then the
// launch's defaults, then the command's environment, then the GLINT_*
// variables, a later value replacing an earlier one.
func (commandStep) Run(_ context.Context, l *launch) error {
	argv := child.Substitute(l.template.GetArgs(), l.vars)
	cmdEnv := make([]string, 0, len(l.template.GetEnv()))
	for _, k := range slices.Sorted(maps.Keys(l.template.GetEnv())) {
		cmdEnv = append(cmdEnv, k+"="+l.template.GetEnv()[k])
	}
	l.argv = argv
	l.environ = mergeEnv(os.Environ(), l.defaults, cmdEnv, l.env)
	return nil
}

// coresEnv is the default environment of a process given cores: a Go
// process (glint's executors and drivers) runs as many threads of Go code as
// it has cores, not as the machine has — Spark's executor runs as many tasks,
// and the Go runtime's own share (its garbage collector takes a quarter of
// GOMAXPROCS) stays within the cores too.
func coresEnv(cores int32) []string {
	if cores <= 0 {
		return nil
	}
	return []string{"GOMAXPROCS=" + strconv.Itoa(int(cores))}
}

// mergeEnv concatenates "KEY=value" lists; a later value of a key replaces an
// earlier one in place.
func mergeEnv(lists ...[]string) []string {
	var out []string
	index := map[string]int{}
	for _, list := range lists {
		for _, kv := range list {
			k, _, _ := strings.Cut(kv, "=")
			if i, ok := index[k]; ok {
				out[i] = kv
				continue
			}
			index[k] = len(out)
			out = append(out, kv)
		}
	}
	return out
}

// validateCommand checks a command from the network: a non-empty argv[0],
// and resources.CheckCommand's rules (no NUL bytes, environment keys that are
// names; errors name keys, never values, and a malformed key not at all),
// which the master checked already at admission.
func validateCommand(c *masterv1.Command) error {
	args := c.GetArgs()
	if len(args) == 0 || args[0] == "" {
		return fmt.Errorf("no command: %w", fault.ErrInvalidArgument)
	}
	return resources.CheckCommand(args, c.GetEnv())
}
