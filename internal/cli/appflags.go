package cli

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/glint-cluster/glint/internal/process"
	"github.com/glint-cluster/glint/pkg/app"
	"github.com/glint-cluster/glint/pkg/resources"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/services/driver"
)

// appFlags are the application settings glint submit and glint driver share.
type appFlags struct {
	masters            string
	name               string
	executorCores      int
	executorMemory     string
	totalExecutorCores int
	conf               []string
}

func (f *appFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.masters, "master", "", "master URL(s), comma-separated (required)")
	fl.StringVar(&f.name, "name", "", "application name (default: the app's name)")
	fl.IntVar(&f.executorCores, "executor-cores", 0, "cores per executor (default: one executor per worker with all its cores)")
	fl.StringVar(&f.executorMemory, "executor-memory", "1g", "memory per executor, e.g. 512m or 2g")
	fl.IntVar(&f.totalExecutorCores, "total-executor-cores", 0, "cores for the whole application (default: all)")
	fl.StringArrayVar(&f.conf, "conf", nil, "Spark property KEY=VALUE, repeatable")
	fl.SetInterspersed(false)
}

// args returns the flags as command-line arguments, to pass on to a
// cluster-mode driver.
func (f *appFlags) args() []string {
	out := []string{"--master", f.masters, "--executor-memory", f.executorMemory}
	if f.name != "" {
		out = append(out, "--name", f.name)
	}
	if f.executorCores > 0 {
		out = append(out, "--executor-cores", fmt.Sprint(f.executorCores))
	}
	if f.totalExecutorCores > 0 {
		out = append(out, "--total-executor-cores", fmt.Sprint(f.totalExecutorCores))
	}
	for _, c := range f.conf {
		out = append(out, "--conf", c)
	}
	return out
}

// driverConfig validates the flags and the APP argument into a driver config.
func (f *appFlags) driverConfig(g *globals, args []string) (driver.Config, error) {
	var cfg driver.Config
	apps := g.Apps
	if len(args) == 0 {
		return cfg, fmt.Errorf("no APP given; built-in apps: %s", appNames(apps))
	}
	a, ok := apps.App(args[0])
	if !ok {
		return cfg, fmt.Errorf("unknown app %q; apps: %s", args[0], appNames(apps))
	}
	masters, err := rpc.ParseURLs(f.masters)
	if err != nil {
		return cfg, fmt.Errorf("--master: %w", err)
	}
	if f.executorCores < 0 {
		return cfg, fmt.Errorf("--executor-cores %d: must be positive", f.executorCores)
	}
	if f.totalExecutorCores < 0 {
		return cfg, fmt.Errorf("--total-executor-cores %d: must be positive", f.totalExecutorCores)
	}
	memory, err := resources.ParseSize(f.executorMemory)
	if err != nil {
		return cfg, fmt.Errorf("--executor-memory: %w", err)
	}
	conf, err := parseConf(f.conf)
	if err != nil {
		return cfg, err
	}
	redaction, err := g.Redactor()
	if err != nil {
		return cfg, err
	}
	cfg = driver.Config{
		Masters: masters, App: a, Name: f.name, ExecutorMemoryMiB: memory,
		ExecutorCores: int32(f.executorCores), MaxCores: int32(f.totalExecutorCores), Conf: conf, Args: args[1:],
		Redaction: redaction,
	}
	return cfg, nil
}

// serveDriver serves a driver for cfg on an ephemeral port of the local
// address that routes to the masters (the first that resolves), and runs its
// application; watch (if any) runs beside it until it ends.
func serveDriver(ctx context.Context, log *slog.Logger, cfg driver.Config, watch func(context.Context, *driver.Driver)) (*driver.Driver, error) {
	host, err := rpc.AdvertiseHost(cfg.Masters...)
	if err != nil {
		return nil, err
	}
	ln, url, err := process.Listen(":0", host)
	if err != nil {
		return nil, err
	}
	cfg.URL = url
	d, err := driver.New(cfg)
	if err != nil {
		ln.Close()
		return nil, err
	}
	if watch != nil {
		watchCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); watch(watchCtx, d) }()
		defer func() { stop(); <-done }()
	}
	return d, process.Serve(ctx, log, ln, url, "", d)
}

func appNames(apps *app.Registry) string {
	var out string
	for i, a := range apps.Apps() {
		if i > 0 {
			out += ", "
		}
		out += a.Usage
	}
	return out
}
