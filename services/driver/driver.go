// Package driver is Glint's driver side: the application client that registers
// with the master (Spark's StandaloneAppClient) and the scheduler backend that
// admits executors and offers them tasks (Spark's CoarseGrainedSchedulerBackend).
package driver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/glint-cluster/glint/pkg/api/glint/driver/v1/driverv1connect"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	"github.com/glint-cluster/glint/pkg/app"
	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/redact"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry"
	"github.com/glint-cluster/glint/pkg/telemetry/prom"
)

// Spark property names the driver reads from --conf.
const (
	confMaxFailures   = "spark.task.maxFailures"
	confMinRegistered = "spark.scheduler.minRegisteredResourcesRatio"
	confMaxWait       = "spark.scheduler.maxRegisteredResourcesWaitingTime"
	confStarvation    = "spark.starvation.timeout"
	// confTaskSampleRatio is the share of task dispatches (batches of offers
	// after each executor's first task) traced, each in a trace of its own.
	confTaskSampleRatio = "spark.glint.trace.taskSampleRatio"
	// confModifyACLs names the submit tokens that, besides the owner's and
	// the admins', may kill the application or change its executors.
	confModifyACLs = "spark.modify.acls"
)

// ModifyACLs is the comma-separated list of --conf spark.modify.acls, the
// names the master lets act on the application (or a cluster-mode driver)
// besides its owner and the admins.
func ModifyACLs(conf map[string]string) []string {
	var names []string
	for name := range strings.SplitSeq(conf[confModifyACLs], ",") {
		if name = strings.TrimSpace(name); name != "" {
			names = append(names, name)
		}
	}
	return names
}

// defaultTaskSampleRatio traces one task batch in a hundred: enough to see
// dispatch, too few to cost throughput.
const defaultTaskSampleRatio = 0.01

// Config configures a driver.
type Config struct {
	// Masters are the master URLs to register with, tried in order.
	Masters []string
	// URL is where the driver serves DriverService: executors and the master
	// reach it there.
	URL string
	// App is the application the driver runs, with Args as its arguments.
	App  *app.App
	Args []string
	// Name is the application's display name; default App.Name.
	Name string
	// ExecutorMemoryMiB is spark.executor.memory; default 1024.
	ExecutorMemoryMiB int64
	// ExecutorCores is spark.executor.cores; 0 means unset.
	ExecutorCores int32
	// MaxCores is spark.cores.max (--total-executor-cores); 0 means all.
	MaxCores int32
	// ExecutorCommand starts an executor of this binary, e.g.
	// ["/usr/local/bin/glint-executor"] (child.ExecutorCommand); the driver
	// appends Spark's flags.
	ExecutorCommand []string
	// Redaction hides Conf's secret values in the description the master
	// keeps and shows (nil: Spark's default pattern).
	Redaction *redact.Redactor
	// Conf holds the --conf properties; executors receive them.
	Conf map[string]string
	// DriverID is set when the driver runs in cluster mode.
	DriverID string
	// RegisterTimeout is how long registration tries the masters, in rounds,
	// before it gives up, and how long a later call about the application
	// (its executor limit, its end) is tried again while no master answers
	// or leads; default DefaultRegisterTimeout.
	RegisterTimeout time.Duration
	// RegisterInterval is the pause between rounds; default 1s.
	RegisterInterval time.Duration
	// UnreachableTimeout is how long registration tries while no master
	// answers at all (nothing listens at any URL: a wrong URL, or every
	// master down or restarting) before it gives up; default
	// DefaultUnreachableTimeout. submit sets it from --retry-timeout.
	UnreachableTimeout time.Duration
	// Stdout receives the application's output; default os.Stdout.
	Stdout io.Writer
	// SubmitToken is what the driver calls the master with ("" when the
	// master has no authentication).
	SubmitToken string
	// Instruments are the logger and tracer provider.
	telemetry.Instruments
	// Registry receives the service's metrics and is served at its
	// /metrics; default prom.NewRegistry().
	Registry *prometheus.Registry
}

func (c *Config) setDefaults() error {
	if len(c.Masters) == 0 {
		return errors.New("no master URL")
	}
	masters := make([]string, 0, len(c.Masters))
	for _, m := range c.Masters {
		u, err := rpc.NormalizeURL(m)
		if err != nil {
			return fmt.Errorf("master %w", err)
		}
		masters = append(masters, u)
	}
	c.Masters = masters
	if c.App == nil {
		return errors.New("no application")
	}
	if c.Name == "" {
		c.Name = c.App.Name
	}
	if len(c.ExecutorCommand) == 0 {
		return errors.New("no executor command")
	}
	if c.ExecutorMemoryMiB == 0 {
		c.ExecutorMemoryMiB = 1024
	}
	if c.ExecutorMemoryMiB < 0 || c.ExecutorCores < 0 || c.MaxCores < 0 {
		return errors.New("executor memory, executor cores and total executor cores must be positive")
	}
	url, err := rpc.NormalizeURL(c.URL)
	if err != nil {
		return fmt.Errorf("driver URL: %w", err)
	}
	c.URL = url
	if c.RegisterTimeout <= 0 {
		c.RegisterTimeout = DefaultRegisterTimeout
	}
	if c.RegisterInterval <= 0 {
		c.RegisterInterval = time.Second
	}
	if c.UnreachableTimeout <= 0 {
		c.UnreachableTimeout = DefaultUnreachableTimeout
	}
	if c.Stdout == nil {
		c.Stdout = os.Stdout
	}
	c.Instruments.SetDefaults()
	c.Registry = prom.OrNew(c.Registry)
	return nil
}

// Driver is a running driver: the app client and the scheduler backend. It
// implements app.Context for the application's driver function.
type Driver struct {
	cfg     Config
	log     *slog.Logger
	tracer  trace.Tracer
	metrics *metrics
	http    *http.Client
	// masterHTTP carries the calls to the master the driver reports to,
	// on to the other masters while that one does not lead.
	masterHTTP *http.Client
	settings
	// appToken is the application's own token: the driver accepts its
	// executors' calls only with it and calls its executors with it; the
	// master hands it to the executors.
	appToken string
	// masterToken is the master's: the driver gives it to the masters
	// only, and accepts the master's calls only with it (access).
	masterToken string
	tokens      *rpc.Tokens

	mu    sync.Mutex
	appID string
	// registeredAt is when the master gave the application its id.
	registeredAt time.Time
	master       masterv1connect.MasterServiceClient
	registered   chan struct{} // closed once the master gave an app id
	removed      chan struct{} // closed when the master removed the application
	removedWhy   string
	stopping     bool // the driver unregistered the application itself
	// epoch is the newest master leadership epoch a message carried.
	epoch int64

	// toMaster delivers the driver's launch reports to its master.
	toMaster *rpc.Mailbox
	backend
}

var _ driverv1connect.DriverServiceHandler = (*Driver)(nil)
var _ app.Context = (*Driver)(nil)

// New returns a driver for cfg; Run runs its application.
func New(cfg Config) (*Driver, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, fmt.Errorf("driver: %w", err)
	}
	st, err := parseSettings(cfg.Conf)
	if err != nil {
		return nil, fmt.Errorf("driver: %w", err)
	}
	masterHTTP, err := rpc.NewFailoverHTTPClient(cfg.Masters)
	if err != nil {
		return nil, fmt.Errorf("driver: %w", err)
	}
	d := &Driver{
		cfg:         cfg,
		masterHTTP:  masterHTTP,
		log:         cfg.Logger,
		tracer:      telemetry.Tracer(cfg.TracerProvider),
		http:        rpc.NewHTTPClient(),
		settings:    st,
		appToken:    rpc.NewToken(),
		masterToken: rpc.NewToken(),
		tokens:      rpc.NewTokens(),
		toMaster:    rpc.NewMailbox(context.Background()),
		registered:  make(chan struct{}),
		removed:     make(chan struct{}),
		backend:     newBackend(),
	}
	d.tokens.Add(rpc.App, d.appToken)
	d.tokens.Add(rpc.Master, d.masterToken)
	d.metrics = newMetrics(cfg.Registry, d)
	return d, nil
}

// Handler serves DriverService, /healthz and /metrics.
func (d *Driver) Handler() http.Handler {
	return rpc.NewHandler(rpc.Endpoints{
		Service: func(o ...connect.HandlerOption) (string, http.Handler) {
			return driverv1connect.NewDriverServiceHandler(d, o...)
		},
		TracerProvider: d.cfg.TracerProvider,
		Metrics:        prom.Handler(d.cfg.Registry),
		Tokens:         d.tokens,
		Access:         access,
	})
}

// access gives the executors' calls to the application's token and every
// other call — the master's, and any a later version adds — to the master's
// token, which the executors never hold: code in an executor cannot speak
// as the master (tell the driver of executors, end the application, or
// name another master, to which the driver would send its submit token).
var access = rpc.Access{"/" + driverv1connect.DriverServiceName + "/": rpc.Master}.Grant(rpc.App,
	driverv1connect.DriverServiceRetrieveSparkPropsProcedure,
	driverv1connect.DriverServiceRegisterExecutorProcedure,
	driverv1connect.DriverServiceLaunchedExecutorProcedure,
	driverv1connect.DriverServiceStatusUpdateProcedure,
)

// Run runs the application from start to stop, served by Handler: it
// registers with a master, waits until enough executors registered, runs the
// application's driver function with Args, and stops (Stop). With
// spark.dynamicAllocation.enabled it sizes the executors to the tasks
// meanwhile (allocation.go).
func (d *Driver) Run(ctx context.Context) (err error) {
	if err := d.Register(ctx); err != nil {
		return err
	}
	defer func() { d.stop(context.WithoutCancel(ctx), endOf(ctx, err)) }()
	// Dynamic allocation ends before Stop releases the executors.
	defer d.startAllocation(ctx)()
	d.log.Info("application registered", "app", d.AppID(), "name", d.cfg.Name)
	if err := d.waitReady(ctx); err != nil {
		return err
	}
	if err := d.cfg.App.Run(ctx, d, d.cfg.Args); err != nil {
		return fmt.Errorf("application %s (%s): %w", d.cfg.Name, d.AppID(), err)
	}
	return nil
}

// AppToken is the application's token: its executors call the driver with
// it, and the driver calls them with it. The master hands it to the
// executors it launches; an executor run another way needs it too.
func (d *Driver) AppToken() string { return d.appToken }

// URL is where the driver serves DriverService.
func (d *Driver) URL() string { return d.cfg.URL }

// AppID is the id the master gave the application.
func (d *Driver) AppID() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.appID
}

// Conf returns a --conf property.
func (d *Driver) Conf(key string) (string, bool) {
	v, ok := d.cfg.Conf[key]
	return v, ok
}

// Stdout is where the application prints.
func (d *Driver) Stdout() io.Writer { return d.cfg.Stdout }

// Stop ends the application as finished: the master is asked for no more
// executors, the executors are told to stop (they exit 0 and end EXITED),
// and the master is told the application finished once it has the driver's
// launch reports.
func (d *Driver) Stop(ctx context.Context) {
	d.stop(ctx, appEnd{state: masterv1.ApplicationState_APPLICATION_STATE_FINISHED})
}

// stop is Stop for an application that ended as end says.
func (d *Driver) stop(ctx context.Context, end appEnd) {
	d.releaseExecutors(ctx)
	d.stopExecutors(ctx)
	d.toMaster.Wait()
	d.unregister(ctx, end)
}

// appEnd is how an application ended, as its driver tells the master.
type appEnd struct {
	state   masterv1.ApplicationState
	message string
}

// endOf is how an application whose run under ctx returned err ended:
// FINISHED when it returned nil, KILLED when ctx ended first (a signal, or
// the driver's worker stopping it: a supervised driver is then relaunched),
// FAILED with its error otherwise.
func endOf(ctx context.Context, err error) appEnd {
	switch {
	case err == nil:
		return appEnd{state: masterv1.ApplicationState_APPLICATION_STATE_FINISHED}
	case ctx.Err() != nil:
		return appEnd{state: masterv1.ApplicationState_APPLICATION_STATE_KILLED, message: context.Cause(ctx).Error()}
	}
	return appEnd{state: masterv1.ApplicationState_APPLICATION_STATE_FAILED, message: err.Error()}
}

// settings are the Spark properties the driver itself obeys.
type settings struct {
	maxFailures        int
	minRegisteredRatio float64
	maxRegisteredWait  time.Duration
	starvation         time.Duration
	taskSampleRatio    float64
	allocation         allocationSettings
}

// parseSettings reads the driver's own properties from --conf, with Spark's
// defaults; a value that does not parse is an error, not a silent default.
func parseSettings(conf map[string]string) (settings, error) {
	st := settings{maxFailures: 4, maxRegisteredWait: 30 * time.Second, starvation: 15 * time.Second, taskSampleRatio: defaultTaskSampleRatio}
	if v, ok := conf[confMaxFailures]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return st, fmt.Errorf("--conf %s=%q: want a positive integer", confMaxFailures, v)
		}
		st.maxFailures = n
	}
	for key, dst := range map[string]*float64{confMinRegistered: &st.minRegisteredRatio, confTaskSampleRatio: &st.taskSampleRatio} {
		v, ok := conf[key]
		if !ok {
			continue
		}
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r < 0 || r > 1 {
			return st, fmt.Errorf("--conf %s=%q: want a number from 0 to 1", key, v)
		}
		*dst = r
	}
	if err := parseDurations(conf, map[string]*time.Duration{confMaxWait: &st.maxRegisteredWait, confStarvation: &st.starvation}); err != nil {
		return st, err
	}
	alloc, err := parseAllocation(conf)
	st.allocation = alloc
	return st, err
}

// parseDurations sets *dst[key] from each property key set in conf.
func parseDurations(conf map[string]string, dst map[string]*time.Duration) error {
	for key, d := range dst {
		v, ok := conf[key]
		if !ok {
			continue
		}
		parsed, err := parseSparkDuration(v)
		if err != nil {
			return fmt.Errorf("--conf %s=%q: %w", key, v, err)
		}
		*d = parsed
	}
	return nil
}

// parseSparkDuration accepts Go durations ("30s") and Spark's plain seconds ("30").
func parseSparkDuration(v string) (time.Duration, error) {
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, errors.New("want a positive duration such as 30s")
	}
	return d, nil
}

// executorCommand is the command template the master hands to workers.
func (d *Driver) executorCommand() *masterv1.Command {
	return &masterv1.Command{Args: append(slices.Clone(d.cfg.ExecutorCommand), child.ExecutorTemplate(d.cfg.URL)...)}
}
