package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	"github.com/glint-cluster/glint/pkg/api/glint/worker/v1/workerv1connect"
	"github.com/glint-cluster/glint/pkg/contain"
	"github.com/glint-cluster/glint/pkg/ids"
	"github.com/glint-cluster/glint/pkg/redact"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry"
	"github.com/glint-cluster/glint/pkg/telemetry/prom"
	"github.com/glint-cluster/glint/pkg/web"
)

// Defaults for the zero values of Config.
const (
	defaultRegisterInterval    = 10 * time.Second
	defaultKillGrace           = 10 * time.Second
	defaultSuperviseBackoffCap = 60 * time.Second
)

// retainedFinished is how many finished executors and drivers /json keeps.
const retainedFinished = 100

// reportDrainTimeout bounds how long Run waits, once its children are gone,
// for their final states to reach the master.
const reportDrainTimeout = 10 * time.Second

// Config configures a worker; zero values mean the documented defaults.
type Config struct {
	// Masters are the master URLs (the comma list of --master); at least one.
	Masters []string
	// URL is this worker's own URL, e.g. http://127.0.0.1:7078.
	URL string
	// ID is the worker's id; default NewID(URL, Now()).
	ID string
	// Cores is how many cores the worker offers; required, > 0.
	Cores int32
	// MemoryMiB is how much memory the worker offers; required, > 0.
	MemoryMiB int64
	// WorkDir holds the executors' and drivers' directories; required, created
	// if missing.
	WorkDir string
	// RegisterInterval is the base registration retry interval, default 10s:
	// the first 6 retries wait base×U(0.5,1.5), the next 10 wait
	// 6×base×U(0.5,1.5), then the worker gives up and Run returns an error.
	RegisterInterval time.Duration
	// KillGrace is how long a killed process has between SIGTERM and SIGKILL,
	// default 10s.
	KillGrace time.Duration
	// PrestartExecutors is how many idle executor processes of this worker's
	// own binary it keeps ready for launches to claim, at most
	// MaxPrestartExecutors; default 0.
	PrestartExecutors int
	// SuperviseBackoffCap caps the restart backoff of supervised drivers
	// (1s doubling, Spark's), default 60s.
	SuperviseBackoffCap time.Duration
	// CleanupInterval is how often the worker removes the directories of
	// finished applications and drivers (spark.worker.cleanup.interval),
	// default 30m; negative: never.
	CleanupInterval time.Duration
	// UsageInterval is how often the worker measures the CPU and memory its
	// executors and drivers use (usage.go), default 5s; negative: never.
	UsageInterval time.Duration
	// CleanupTTL is how long the files of a finished application or driver
	// are kept (spark.worker.cleanup.appDataTtl), default 7 days.
	CleanupTTL time.Duration
	// Tokens are the tokens the worker accepts: the cluster token (Cluster).
	// Nil: no authentication (in-process tests; glint always gives tokens).
	Tokens *rpc.Tokens
	// ClusterToken is what the worker calls the master with.
	ClusterToken string
	// MetricsAuth makes /metrics need a token.
	MetricsAuth bool
	// UIPublic opens the web UI's pages, logs included, to anyone
	// (--ui-public); else they need the cluster token (ui.go).
	UIPublic bool
	// TLS is the worker's TLS files (rpc.UseTLS), which its executors and
	// drivers are given too unless ExecutorTLS is set; zero: none.
	TLS rpc.TLSFiles
	// ExecutorTLS, when set, is the TLS identity of the executors and
	// drivers instead: on a worker with ExecutorUsers and TLS, they cannot
	// read the worker's key (users.go).
	ExecutorTLS rpc.TLSFiles
	// ExecutorUsers, when set, is the uids the worker, running as root,
	// runs its executors and drivers as: each application's executors one
	// of their own, each driver another (users.go). Zero: the worker's.
	ExecutorUsers contain.UIDRange
	// Redaction hides secret values where the worker shows a command (the
	// launch-command log line, process.start's attributes, errors); the
	// process runs it whole. Nil: Spark's default pattern.
	Redaction *redact.Redactor
	// Instruments are the logger and tracer provider.
	telemetry.Instruments
	// Registry receives the service's metrics and is served at its
	// /metrics; default prom.NewRegistry().
	Registry *prometheus.Registry
	// Cgroup, when set, is the worker's cgroup (DefaultCgroup), under which
	// each executor and driver runs in a cgroup of its own with its granted
	// memory (plus contain.MemoryLimit's overhead) and cores as limits.
	// What a previous run on it left is removed at New, and the rest at
	// Run's end. Where no writable cgroup hierarchy exists the worker says
	// so once and runs them unconfined. "": unconfined.
	Cgroup string
	// CgroupRoot is where the cgroup hierarchies are mounted, default
	// /sys/fs/cgroup.
	CgroupRoot string
	// CPULimit is how a contained process's cores are enforced, default
	// contain.CPUHard.
	CPULimit contain.CPULimit
	// PidsLimit bounds a contained process's processes and threads,
	// default contain.DefaultPids.
	PidsLimit int64
	// SpanRelay, when set, carries the spans of the executors the worker
	// starts (prestarted ones too) to the collector with the worker's own
	// (telemetry.RelayFDEnv); nil: each exports its own.
	SpanRelay *telemetry.Relay
	// Now is the clock for the worker id and launch timestamps; default time.Now.
	Now func() time.Time
}

// Server is the Worker. Its methods are safe for concurrent use; Run may be
// called once.
type Server struct {
	cfg     Config
	log     *slog.Logger
	tracer  trace.Tracer
	metrics *metrics
	id      string
	host    string
	port    int
	// http carries the calls to the masters, one at a time: HTTP/1.1, which
	// costs a master less per heartbeat than HTTP/2 (rpc.NewHTTP1Client).
	http    *http.Client
	site    *web.Site
	started atomic.Bool
	// ctx bounds the reports to the master; it ends when Run returns.
	ctx     context.Context
	cancel  context.CancelFunc
	reports *rpc.Mailbox
	// runners counts the executor and driver runners still running.
	runners sync.WaitGroup
	// reregister wakes Run when MasterChanged names a new master.
	reregister chan struct{}

	mu sync.Mutex
	// active is the master whose commands the worker obeys ("" until
	// registered): the URL it names itself by.
	active string
	// route is where the worker reaches the active master: the URL its
	// registration went to, which may differ from the one the master names
	// itself by (a proxy, a Service, NAT in between).
	route string
	// preferred is the master announced by MasterChanged, tried first;
	// masterChanges counts those announcements.
	preferred     string
	masterChanges int
	// epoch is the newest leadership epoch a master's command carried.
	epoch int64
	// heardAt is when the worker sent the last registration or heartbeat
	// its active master answered; until heardWithin after it, the master
	// cannot have declared the worker lost (heardRecentlyLocked).
	heardAt     time.Time
	heardWithin time.Duration
	// registration is the worker's registration with its active master
	// (RegisterWorkerResponse.registration): a launch of another is refused.
	registration int64
	// registering is closed when the registration attempt in flight ends; nil
	// when none is.
	registering   chan struct{}
	closing       bool
	clients       map[string]masterv1connect.MasterServiceClient
	coresUsed     int32
	memoryUsedMiB int64
	// prestart keeps idle executor processes ready (--prestart-executors).
	prestart *prestart
	// spare is a work directory made ahead of the next launch.
	spare     *spare
	executors map[executorKey]*executorRunner
	// launched are the executor ids of each application this worker was
	// told to launch (bounded: launchedIDs), so a launch the master retries
	// is refused instead of run twice.
	launched launchedIDs
	// decommissioned says the worker takes no new launches (decommission.go).
	decommissioned    bool
	drivers           map[string]*driverRunner
	finishedExecutors []*executorRunner
	finishedDrivers   []*driverRunner
	// finals are the final states no master acknowledged yet (finals.go).
	finals unacked
	// usage measures the processes; usedCPU is the CPU seconds all the
	// executors and all the drivers used since the worker started, by
	// kind's noun (usage.go).
	usage   usageSource
	usedCPU map[string]float64
	// cgroups is the worker's cgroup; nil: it contains nothing.
	cgroups *contain.Parent
	// users are the uids of its processes (users.go); nil: the worker's.
	users *contain.Users
}

var _ workerv1connect.WorkerServiceHandler = (*Server)(nil)

// NewID returns the id of the worker at url started at t:
// worker-<start time>-<host>-<port>.
func NewID(url string, t time.Time) (string, error) {
	host, port, err := rpc.HostPort(url)
	if err != nil {
		return "", err
	}
	id := ids.Worker(t, host, port)
	return id, ids.ValidateWorker(id)
}

// New returns a worker for cfg after checking it and creating the work
// directory.
func New(cfg Config) (*Server, error) {
	if err := normalize(&cfg); err != nil {
		return nil, fmt.Errorf("new worker: %w", err)
	}
	host, port, err := rpc.HostPort(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("new worker: %w", err)
	}
	if err := os.MkdirAll(cfg.WorkDir, 0o750); err != nil {
		return nil, fmt.Errorf("new worker: create work dir: %w", err)
	}
	id := cfg.ID
	if id == "" {
		if id, err = NewID(cfg.URL, cfg.Now()); err != nil {
			return nil, fmt.Errorf("new worker: %w", err)
		}
	} else if err := ids.ValidateWorker(id); err != nil {
		return nil, fmt.Errorf("new worker: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg:        cfg,
		log:        cfg.Logger,
		tracer:     telemetry.Tracer(cfg.TracerProvider),
		id:         id,
		host:       host,
		port:       port,
		http:       rpc.NewHTTP1Client(),
		site:       newSite(cfg),
		ctx:        ctx,
		cancel:     cancel,
		reports:    rpc.NewMailbox(ctx),
		reregister: make(chan struct{}, 1),
		clients:    map[string]masterv1connect.MasterServiceClient{},
		executors:  map[executorKey]*executorRunner{},
		launched:   launchedIDs{},
		drivers:    map[string]*driverRunner{},
		usage:      procSource{dir: "/proc"},
		usedCPU:    map[string]float64{},
	}
	s.metrics = newMetrics(cfg.Registry, s)
	if err := removeStaleDirs(cfg.WorkDir); err != nil {
		return nil, fmt.Errorf("new worker: %w", err)
	}
	if s.users, err = openUsers(cfg); err != nil {
		return nil, fmt.Errorf("new worker: %w", err)
	}
	if s.cgroups, err = openCgroup(cfg); err != nil {
		s.closeUsers()
		return nil, fmt.Errorf("new worker: %w", err)
	}
	s.spare = &spare{workDir: cfg.WorkDir, log: s.log}
	if s.prestart, err = newPrestart(s); err != nil {
		s.closeCgroup()
		s.closeUsers()
		return nil, fmt.Errorf("new worker: %w", err)
	}
	return s, nil
}

// DefaultCgroup is the cgroup of the worker whose work dir is workDir (an
// absolute path): glint-worker-<12 hex digits of its SHA-256>, at the
// hierarchy's top, where its weight (its cores: contain.Options.Cores)
// stands against the machine's other processes, not shared with other
// workers'. A worker restarted on the same work dir finds what its
// previous run left there.
func DefaultCgroup(workDir string) string {
	sum := sha256.Sum256([]byte(workDir))
	return "glint-worker-" + hex.EncodeToString(sum[:6])
}

// openCgroup opens the worker's cgroup, nil when it has none or no
// hierarchy is writable, which it says once.
func openCgroup(cfg Config) (*contain.Parent, error) {
	if cfg.Cgroup == "" {
		return nil, nil
	}
	p, err := contain.Open(cfg.Cgroup, contain.Options{Root: cfg.CgroupRoot, CPU: cfg.CPULimit, Cores: cfg.Cores})
	if errors.Is(err, contain.ErrUnavailable) {
		cfg.Logger.Warn("executors and drivers run unconfined: their cores and memory are not enforced", "err", err)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	cfg.Logger.Info("executors and drivers contained", "cgroup", p.Path(), "cgroup_version", p.Version(), "cpu_limit", cfg.CPULimit, "pids_limit", cfg.PidsLimit)
	return p, nil
}

// closeUsers frees the uids the worker holds, once its processes ended.
func (s *Server) closeUsers() {
	if s.users != nil {
		_ = s.users.Close()
	}
}

// closeCgroup removes the worker's cgroup, once its processes ended.
func (s *Server) closeCgroup() {
	if s.cgroups == nil {
		return
	}
	if err := s.cgroups.Close(); err != nil {
		s.log.Warn("remove the worker's cgroup", "err", err)
	}
}

// normalize checks cfg and fills in its defaults.
func normalize(cfg *Config) error {
	if len(cfg.Masters) == 0 {
		return errors.New("no master URL")
	}
	masters := make([]string, 0, len(cfg.Masters))
	for _, m := range cfg.Masters {
		u, err := rpc.NormalizeURL(m)
		if err != nil {
			return fmt.Errorf("master %w", err)
		}
		masters = append(masters, u)
	}
	cfg.Masters = masters
	u, err := rpc.NormalizeURL(cfg.URL)
	if err != nil {
		return fmt.Errorf("worker %w", err)
	}
	cfg.URL = u
	switch {
	case cfg.Cores <= 0:
		return fmt.Errorf("cores %d must be positive", cfg.Cores)
	case cfg.MemoryMiB <= 0:
		return fmt.Errorf("memory %d MiB must be positive", cfg.MemoryMiB)
	case cfg.WorkDir == "":
		return errors.New("no work dir")
	case cfg.PrestartExecutors < 0 || cfg.PrestartExecutors > MaxPrestartExecutors:
		return fmt.Errorf("prestart executors %d: want 0 to %d", cfg.PrestartExecutors, MaxPrestartExecutors)
	}
	dir, err := filepath.Abs(cfg.WorkDir)
	if err != nil {
		return fmt.Errorf("work dir %q: %w", cfg.WorkDir, err)
	}
	cfg.WorkDir = dir
	if cfg.RegisterInterval <= 0 {
		cfg.RegisterInterval = defaultRegisterInterval
	}
	if cfg.KillGrace <= 0 {
		cfg.KillGrace = defaultKillGrace
	}
	if cfg.CleanupInterval == 0 {
		cfg.CleanupInterval = defaultCleanupInterval
	}
	if cfg.UsageInterval == 0 {
		cfg.UsageInterval = defaultUsageInterval
	}
	if cfg.CleanupTTL <= 0 {
		cfg.CleanupTTL = defaultCleanupTTL
	}
	if cfg.CPULimit == "" {
		cfg.CPULimit = contain.CPUHard
	}
	if _, err := contain.ParseCPULimit(string(cfg.CPULimit)); err != nil {
		return err
	}
	if cfg.PidsLimit <= 0 {
		cfg.PidsLimit = contain.DefaultPids
	}
	if cfg.SuperviseBackoffCap <= 0 {
		cfg.SuperviseBackoffCap = defaultSuperviseBackoffCap
	}
	cfg.Instruments.SetDefaults()
	cfg.Registry = prom.OrNew(cfg.Registry)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return nil
}

// ID returns the worker's id.
func (s *Server) ID() string { return s.id }

// Handler returns the worker's HTTP handler: its Connect service, GET /json,
// GET /healthz and the web UI.
func (s *Server) Handler() http.Handler {
	ui := s.uiPages()
	pages := map[string]http.HandlerFunc{"GET /json": s.serveJSON}
	maps.Copy(pages, ui)
	return rpc.NewHandler(rpc.Endpoints{
		Service: func(o ...connect.HandlerOption) (string, http.Handler) {
			return workerv1connect.NewWorkerServiceHandler(s, o...)
		},
		TracerProvider: s.cfg.TracerProvider,
		Metrics:        prom.Handler(s.cfg.Registry),
		Pages:          pages,
		Tokens:         s.cfg.Tokens,
		Access:         web.Access(maps.Clone(access), ui),
		MetricsAuth:    s.cfg.MetricsAuth,
	})
}

// access is the role each WorkerService procedure and worker page needs:
// the cluster token, the master's.
var access = rpc.Access{"GET /json": rpc.Cluster}.Grant(rpc.Cluster,
	workerv1connect.WorkerServiceLaunchExecutorProcedure, workerv1connect.WorkerServiceKillExecutorProcedure,
	workerv1connect.WorkerServiceLaunchDriverProcedure, workerv1connect.WorkerServiceKillDriverProcedure,
	workerv1connect.WorkerServiceApplicationFinishedProcedure, workerv1connect.WorkerServiceMasterChangedProcedure,
	workerv1connect.WorkerServiceDecommissionWorkerProcedure)

// Run registers with a master (retrying on Spark's schedule), heartbeats, and
// registers again when the master asks, changes or stops answering; every
// CleanupInterval it removes finished applications' and drivers' old work
// dirs (cleanup.go). When ctx
// ends it kills and reaps every executor and driver (SIGTERM to each process
// group, SIGKILL after KillGrace), reports their final states to the master,
// waits for those reports and returns nil. It returns an error when
// registration gives up; its children are gone then too.
func (s *Server) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return fmt.Errorf("run worker %s: already running", s.id)
	}
	s.prestart.fill()
	s.spare.fill()
	cleanCtx, stopCleaning := context.WithCancel(ctx)
	cleaning := make(chan struct{})
	go func() {
		defer close(cleaning)
		s.cleanupLoop(cleanCtx)
	}()
	sampling := make(chan struct{})
	go func() {
		defer close(sampling)
		s.usageLoop(cleanCtx)
	}()
	err := s.connect(ctx)
	stopCleaning()
	<-cleaning
	<-sampling
	s.shutdown()
	return err
}

// shutdown kills every child, waits until all are reaped and their final
// states delivered (or reportDrainTimeout passed), and stops reporting.
func (s *Server) shutdown() {
	s.tellDecommissioning()
	s.mu.Lock()
	s.closing = true
	for _, r := range s.executors {
		r.kill(errShutdown)
	}
	for _, r := range s.drivers {
		r.kill(errShutdown)
	}
	s.mu.Unlock()
	s.prestart.close()
	s.runners.Wait()
	s.closeCgroup()
	s.closeUsers()
	s.spare.close()
	delivered := make(chan struct{})
	go func() {
		s.reports.Wait()
		close(delivered)
	}()
	timer := time.NewTimer(reportDrainTimeout)
	defer timer.Stop()
	select {
	case <-delivered:
	case <-timer.C:
		s.log.Warn("final reports not delivered to the master in time; dropping them", "timeout", reportDrainTimeout)
	}
	s.cancel()
	<-delivered
	s.http.CloseIdleConnections()
	s.log.Info("worker stopped", "worker", s.id)
}

// client returns the Connect client for the master at url, one of the
// configured masters (MasterChanged selects among them, never adds one),
// each client made once.
func (s *Server) client(url string) masterv1connect.MasterServiceClient {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.clients[url]
	if !ok {
		c = masterv1connect.NewMasterServiceClient(s.http, url, rpc.ClientOptions(s.cfg.TracerProvider, s.cfg.ClusterToken)...)
		s.clients[url] = c
	}
	return c
}

// activeMaster returns where the worker reaches the active master, "" before
// registration.
func (s *Server) activeMaster() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.route
}

// report queues a message for the active master. Messages are delivered in the
// order they were queued, so an executor's RUNNING always precedes its end.
// ack, unless nil, runs under s.mu once the master answered the report: a
// final state is kept until then, and carried by the next registration or
// heartbeat if the report is not answered.
func (s *Server) report(ctx context.Context, what string, send func(context.Context, masterv1connect.MasterServiceClient) error, ack func()) {
	s.reports.Post(ctx, func(ctx context.Context) {
		url := s.activeMaster()
		if url == "" {
			s.log.Warn("no active master; the report waits for the next registration", "report", what)
			return
		}
		err := send(ctx, s.client(url))
		switch code := connect.CodeOf(err); {
		case err == nil:
			if ack != nil {
				s.mu.Lock()
				ack()
				s.mu.Unlock()
			}
		case code == connect.CodeNotFound || code == connect.CodeFailedPrecondition:
			// The master forgot it (it killed the executor, or the
			// application ended), or does not know it yet (it recovers and
			// the worker has not registered again): a final state goes
			// again with the next registration or heartbeat, which the
			// master answers either way.
			s.log.Debug("master did not apply report", "report", what, "master", url, "err", err)
		default:
			s.log.Warn("report to master failed", "report", what, "master", url, "err", err)
		}
	})
}

// keepLocked warns when keeping a final state dropped the oldest one kept:
// more ended unacknowledged than resources.MaxUnackedFinals.
func (s *Server) keepLocked(what string, dropped bool) {
	if dropped {
		s.log.Warn("too many final states unacknowledged by a master; the oldest is dropped", "kept", what)
	}
}
