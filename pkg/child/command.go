package child

import (
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// Template variables: the worker replaces {{NAME}} in each argument of a
// command template separately, never through a shell.
const (
	VarExecutorID = "EXECUTOR_ID" // an executor's id within its application
	VarHostname   = "HOSTNAME"    // the worker's host
	VarCores      = "CORES"       // the executor's cores
	VarAppID      = "APP_ID"      // the application's id
	VarWorkerURL  = "WORKER_URL"  // the worker's URL
	VarDriverID   = "DRIVER_ID"   // a cluster-mode driver's id
)

// placeholder returns "{{NAME}}", how a template names the variable name.
func placeholder(name string) string { return "{{" + name + "}}" }

// Substitute replaces each {{NAME}} by vars[NAME] in each argument separately.
func Substitute(args []string, vars map[string]string) []string {
	pairs := make([]string, 0, 2*len(vars))
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		pairs = append(pairs, placeholder(k), vars[k])
	}
	r := strings.NewReplacer(pairs...)
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = r.Replace(a)
	}
	return out
}

// ExecutorArgs are the flags of `glint executor`: what a worker tells an
// executor it launches, with the driver's URL that the driver put in its
// command template. The driver builds the template with ExecutorTemplate;
// the executor command parses it with Flags.
type ExecutorArgs struct {
	DriverURL  string
	ExecutorID int32
	Hostname   string
	Cores      int32
	AppID      string
	WorkerURL  string
}

// Executor flag names.
const (
	flagDriverURL  = "driver-url"
	flagExecutorID = "executor-id"
	flagHostname   = "hostname"
	flagCores      = "cores"
	flagAppID      = "app-id"
	flagWorkerURL  = "worker-url"
	flagDriverID   = "driver-id"
)

// ExecutorSubcommand is the glint command that runs an executor:
// `glint executor`.
const ExecutorSubcommand = "executor"

// ExecutorSuffix names a binary's executor program: glint-executor beside
// glint (cmd/glint-executor), a user's myapp-executor beside myapp, is the
// executor command alone, built with the same applications.
const ExecutorSuffix = "-executor"

// ExecutorCommand is how a binary at path self has its executors started:
// its executor program (self + ExecutorSuffix) when that is an executable
// file, whose start links and initialises only what an executor needs;
// otherwise `self executor`.
func ExecutorCommand(self string) []string {
	if fi, err := os.Stat(self + ExecutorSuffix); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
		return []string{self + ExecutorSuffix}
	}
	return []string{self, ExecutorSubcommand}
}

// ExecutorTemplate returns the arguments that follow an executor command
// (such as ["/usr/local/bin/glint-executor"]) in an application's command
// template: the driver's URL, and placeholders for what the worker knows.
func ExecutorTemplate(driverURL string) []string {
	return []string{
		"--" + flagDriverURL, driverURL,
		"--" + flagExecutorID, placeholder(VarExecutorID),
		"--" + flagHostname, placeholder(VarHostname),
		"--" + flagCores, placeholder(VarCores),
		"--" + flagAppID, placeholder(VarAppID),
		"--" + flagWorkerURL, placeholder(VarWorkerURL),
	}
}

// Flags defines the executor's flags on fs; they fill in a.
func (a *ExecutorArgs) Flags(fs *pflag.FlagSet) {
	fs.StringVar(&a.DriverURL, flagDriverURL, "", "the driver's URL")
	fs.Int32Var(&a.ExecutorID, flagExecutorID, -1, "this executor's id within its application")
	fs.StringVar(&a.Hostname, flagHostname, "", "host name the driver uses to reach this executor")
	fs.Int32Var(&a.Cores, flagCores, 0, "cores (task slots)")
	fs.StringVar(&a.AppID, flagAppID, "", "the application id")
	fs.StringVar(&a.WorkerURL, flagWorkerURL, "", "the launching worker's URL")
}

// DriverTemplate returns the arguments that follow a driver command (such as
// ["/usr/local/bin/glint", "driver"]) in a cluster-mode driver's command
// template, before the application's own flags.
func DriverTemplate() []string {
	return []string{"--" + flagDriverID, placeholder(VarDriverID)}
}

// DriverIDFlag defines the cluster-mode driver's --driver-id flag on fs.
func DriverIDFlag(fs *pflag.FlagSet, id *string) {
	fs.StringVar(id, flagDriverID, "", "this driver's id, given by the master")
}

// TaskSlotsPerCore is how many tasks a driver may give an executor per core,
// running or queued: the driver queues up to this many briefly running tasks
// per core at an executor, so that one LaunchTask and one StatusUpdate carry
// a batch of them; the executor refuses a LaunchTask that would pass it.
// Tasks that brief queue at most some 64 ms of work per core, and enough
// that a core still has work while its next batch is on its way (with fewer
// slots, cores sat idle between batches: make bench's row 4).
const TaskSlotsPerCore = 64
