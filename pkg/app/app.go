// Package app is the API for writing Glint applications.
//
// An application is an App: a driver function (Run) and the task functions
// (Tasks) it runs on the cluster. Build them into your own binary and hand
// them to glint.Main (the module's root package):
//
//	func main() { os.Exit(glint.Main(myApp, myOtherApp)) }
//
// That binary then has every glint subcommand — master, worker, submit,
// status, decommission, … — and is the driver and the executors of its own
// applications: "mybinary submit --master URL myapp ARGS" runs Run with ARGS
// in the submit process (or, with --deploy-mode cluster, in a driver a
// worker starts), and the workers start the same binary as the executors,
// which look tasks up by name in the same applications. Masters and workers
// may run any build of Glint; the executors run yours, so each worker needs
// your binary at the path submit ran it from.
//
// # The driver function
//
// Run gets the command-line arguments after the application's name and a
// Context. Context.RunTasks runs one task function once per input on the
// executors and returns the outputs in input order; call it as often as the
// application needs, one job after another or from several goroutines.
// Context.Conf reads the --conf properties given to submit, and
// Context.Stdout is where results are printed (submit's standard output).
// Returning an error fails the application.
//
// # Task functions
//
// A TaskFunc turns one input into one output, both bytes: encode what a task
// needs (a seed, a file name, a range) into its input, and decode its result
// in the driver. Tasks run concurrently, one per executor core, in processes
// other than the driver, so they share nothing with it but their input. A
// task that returns an error is tried again on any executor, up to
// spark.task.maxFailures (default 4) attempts, after which RunTasks fails;
// one whose executor was lost (its worker died or was decommissioned) runs
// again without counting as a failure. A task may therefore run more than
// once, and should be safe to repeat. It should return promptly when its
// context is cancelled (the task was killed or its executor is stopping).
//
// examples/montecarlo in Glint's repository is a complete program built this
// way, in a module of its own.
package app

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
)

// TaskFunc computes one task's output from its input. It runs on an executor,
// may run more than once for one input (a retry, or its executor was lost),
// and should return promptly when ctx is cancelled (the task was killed or
// its executor is stopping). A returned error fails this attempt.
type TaskFunc func(ctx context.Context, input []byte) ([]byte, error)

// Context is what a driver function is given: the application's handle on
// the cluster while it runs.
type Context interface {
	// AppID is the id the master gave the application.
	AppID() string
	// Conf returns a property set with --conf, if it was set.
	Conf(key string) (string, bool)
	// RunTasks runs the named task of this application (a key of App.Tasks)
	// once per input, spread over the executors, and returns the outputs in
	// input order. A task that fails spark.task.maxFailures times fails the
	// whole set; RunTasks also fails when ctx ends or the master removes the
	// application. It waits for executors when there are none yet.
	RunTasks(ctx context.Context, task string, inputs [][]byte) ([][]byte, error)
	// Stdout is where the application prints its results.
	Stdout() io.Writer
}

// App is one application.
type App struct {
	// Name is what users pass to glint submit: non-empty, without '.', '/'
	// or spaces, and unique among the binary's applications.
	Name string
	// Usage shows the arguments, e.g. "pi [SLICES]".
	Usage string
	// Run is the driver function; args are the arguments after the
	// application's name on the submit command line. Required.
	Run func(ctx context.Context, c Context, args []string) error
	// Tasks are the task functions executors run, by the name RunTasks is
	// given.
	Tasks map[string]TaskFunc
}

// TaskID is the name by which executors find an application's task: the
// application's name and the task's, joined by a dot.
func TaskID(appName, task string) string { return appName + "." + task }

// Registry holds the applications a binary offers; glint.Main makes it from
// the applications it is given.
type Registry struct {
	apps  map[string]*App
	tasks map[string]TaskFunc
}

// NewRegistry returns a registry of apps; names must be unique and non-empty.
func NewRegistry(apps ...*App) (*Registry, error) {
	r := &Registry{apps: map[string]*App{}, tasks: map[string]TaskFunc{}}
	for _, a := range apps {
		if a.Name == "" || strings.ContainsAny(a.Name, ". /") {
			return nil, fmt.Errorf("register app %q: name must be non-empty without '.', '/' or spaces", a.Name)
		}
		if _, dup := r.apps[a.Name]; dup {
			return nil, fmt.Errorf("register app %q: duplicate name", a.Name)
		}
		if a.Run == nil {
			return nil, fmt.Errorf("register app %q: no Run function", a.Name)
		}
		r.apps[a.Name] = a
		for name, fn := range a.Tasks {
			r.tasks[TaskID(a.Name, name)] = fn
		}
	}
	return r, nil
}

// App returns the application named name.
func (r *Registry) App(name string) (*App, bool) {
	a, ok := r.apps[name]
	return a, ok
}

// Task returns the task function registered under id (see TaskID).
func (r *Registry) Task(id string) (TaskFunc, bool) {
	fn, ok := r.tasks[id]
	return fn, ok
}

// Apps returns the registered applications sorted by name.
func (r *Registry) Apps() []*App {
	out := make([]*App, 0, len(r.apps))
	for _, a := range r.apps {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
