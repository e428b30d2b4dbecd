// Package app is the API for writing Glint applications: one Go binary holds a
// driver function, which runs sets of tasks on the cluster, and the task functions
// its executors run. Hand the binary's applications to glint.Main; the same
// binary then acts as driver (glint submit) and executor.
package app

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
)

// TaskFunc computes one task's output from its input. It runs on an executor and
// should return promptly when ctx is cancelled (the task was killed).
type TaskFunc func(ctx context.Context, input []byte) ([]byte, error)

// Context is what a driver function is given.
type Context interface {
	// AppID is the id the master gave the application.
	AppID() string
	// Conf returns a property set with --conf, if it was set.
	Conf(key string) (string, bool)
	// RunTasks runs the named task of this application once per input, spread over
	// the executors, and returns the outputs in input order. A task that fails
	// spark.task.maxFailures times fails the whole set.
	RunTasks(ctx context.Context, task string, inputs [][]byte) ([][]byte, error)
	// Stdout is where the application prints its results.
	Stdout() io.Writer
}

// App is one application.
type App struct {
	// Name is what users pass to glint submit.
	Name string
	// Usage shows the arguments, e.g. "pi [SLICES]".
	Usage string
	// Run is the driver function.
	Run func(ctx context.Context, c Context, args []string) error
	// Tasks are the task functions executors run, by name.
	Tasks map[string]TaskFunc
}

// TaskID is the name by which executors find an application's task.
func TaskID(appName, task string) string { return appName + "." + task }

// Registry holds the applications a binary offers.
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
