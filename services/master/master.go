package master

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	"github.com/glint-cluster/glint/pkg/redact"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry"
	"github.com/glint-cluster/glint/pkg/telemetry/prom"
	"github.com/glint-cluster/glint/pkg/web"
	"github.com/glint-cluster/glint/services/master/store"
)

// Config configures a master. The zero value of each field means its default.
type Config struct {
	// URL is the address by which workers and drivers reach this master.
	URL string
	// WorkerTimeout is spark.worker.timeout: a worker without a heartbeat for
	// this long is DEAD. Default 60s. Workers heartbeat every WorkerTimeout/4,
	// or less often in a cluster large enough for MaxHeartbeatRate to bind.
	WorkerTimeout time.Duration
	// MaxHeartbeatRate bounds the heartbeats the master asks for, per second,
	// whatever the cluster's size, as Nomad's max_heartbeats_per_second:
	// past it each worker is told a longer interval and the worker timeout
	// grows with it (heartbeatInterval). Default 50; negative: unbounded,
	// Spark's fixed WorkerTimeout/4.
	MaxHeartbeatRate float64
	// SpreadOut is spark.deploy.spreadOut (default true in the CLI).
	SpreadOut bool
	// DefaultCores is spark.deploy.defaultCores: the cores an application
	// that sets no total executor cores (spark.cores.max) may use. Default 0:
	// unlimited, as in Spark.
	DefaultCores int32
	// MaxExecutorRetries is spark.deploy.maxExecutorRetries (default 10 in the
	// CLI; negative disables the rule).
	MaxExecutorRetries int
	// RetainedApplications and RetainedDrivers bound the completed lists. Default 200.
	RetainedApplications int
	RetainedDrivers      int
	// RetainedBytes bounds each completed list by the size of its entries
	// (as GetClusterState sends them). Default 32 MiB.
	RetainedBytes int
	// DeadWorkerPersistence is spark.dead.worker.persistence: a DEAD worker stays
	// listed for persistence × WorkerTimeout after it died — (persistence+1) ×
	// WorkerTimeout after its last heartbeat when it timed out. Default 15.
	DeadWorkerPersistence int
	// Tokens are the tokens the master accepts: the cluster token (Cluster)
	// and the submit tokens (Submit), each named (Tokens.AddNamed, the
	// cluster token as AdminName; CheckTokenName), to which it adds one for
	// each cluster-mode driver while it runs, named by the driver's id.
	// Nil: no authentication, where every caller is an admin (in-process tests; glint always gives tokens).
	Tokens *rpc.Tokens
	// Admins are the names of the submit tokens that may act on every
	// application and driver besides AdminName (spark.admin.acls).
	Admins []string
	// ClusterToken is what the master calls its workers with.
	ClusterToken string
	// MetricsAuth makes /metrics and /sd need a token of any role.
	MetricsAuth bool
	// Redaction hides secret values in the commands the master shows
	// (GetClusterState, DriverStatus, /json); workers are sent them whole.
	// Nil: Spark's default pattern (redact.DefaultPattern).
	Redaction *redact.Redactor
	// UI configures the web UI (ui.go).
	UI UIConfig
	// Instruments are the logger and tracer provider.
	telemetry.Instruments
	// Registry receives the service's metrics and is served at its
	// /metrics; default prom.NewRegistry().
	Registry *prometheus.Registry
	// Epoch is the master's leadership epoch (the etcd election's revision
	// in --recovery-mode etcd; 0 otherwise). Every command to workers and
	// drivers carries it; they refuse commands older than the newest they saw.
	Epoch int64
	// Store keeps the master's state so that a restarted master recovers it
	// (--recovery-mode); nil keeps nothing.
	Store store.Store
	// StepDownOnFailedWrite ends the master's leadership at the first write
	// Store did not take, as HA does: a leader that cannot keep its state
	// leaves the lead to a master that can. Otherwise a failed write is
	// made again until kept.
	StepDownOnFailedWrite bool
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Rand shuffles workers for drivers; default seeded randomly.
	Rand *rand.Rand
}

// Server is the Master. Its methods are safe for concurrent use.
type Server struct {
	cfg     Config
	log     *slog.Logger
	tracer  trace.Tracer
	metrics *metrics
	http    *http.Client
	site    *web.Site
	// ctx bounds every message the master sends; it ends when Run returns.
	ctx    context.Context
	cancel context.CancelFunc

	mu               sync.Mutex
	workers          *roster // registered workers, DEAD ones until culled
	apps             map[string]*appInfo
	appQueue         []*appInfo // active applications in registration order (Spark's waitingApps)
	completedApps    retained[*appInfo]
	drivers          map[string]*driverInfo
	waitingDrivers   []*driverInfo
	completedDrivers retained[*driverInfo]
	// unconfirmed are, by driver id, the applications a cluster-mode driver
	// ended FINISHED while it runs: its own end confirms them, or fails
	// them (appEndOf), and only then are they counted.
	unconfirmed map[string][]*appInfo
	// activeBytes is the size of the active applications' and drivers'
	// descriptions, bounded by MaxActiveBytes.
	activeBytes      int
	nextAppNumber    int
	nextDriverNumber int
	// needSchedule says that a change made under mu may let a waiting driver
	// or application be placed. The …Locked mutators only set it; the event
	// that took mu (an RPC, a timer tick, a failed send) releases it with
	// scheduleAndUnlock, which makes the one schedule pass for the event.
	needSchedule bool
	// status is ALIVE, or RECOVERING until the kept workers and drivers
	// answered (recovery.go); unknownWorkers and unknownApps count those
	// that have not yet.
	status                      string
	unknownWorkers, unknownApps int
	recoverySpan                trace.Span
	// deposed is closed when a write showed that another master leads, or
	// failed under StepDownOnFailedWrite; deposedBy is that write's error.
	deposed   chan struct{}
	deposedBy error
	// resumedAt is when the master last ran again after a stall (resumed).
	resumedAt time.Time
	// unkept names what the Store refused to keep (keepLocked's what),
	// until kept again (keepUnkept).
	unkept map[string]struct{}
	// dirty names what changed and waits for the keeper (keep.go), with
	// what waits for its write; keeperWake wakes the keeper.
	dirty      map[string][]func(error)
	keeperWake chan struct{}
	// marks counts the writes asked for; barriers are closed once the
	// keeper made the writes asked for before each (unlockKept).
	marks    uint64
	barriers []chan struct{}
	// pendingWorkers, pendingApps and pendingDrivers are registrations
	// admitted once kept.
	pendingWorkers map[string]*workerInfo
	pendingApps    map[string]*appInfo
	pendingDrivers map[string]*driverInfo
}

var _ masterv1connect.MasterServiceHandler = (*Server)(nil)

// New returns a master for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.URL == "" {
		return nil, fmt.Errorf("new master: no URL")
	}
	if cfg.WorkerTimeout <= 0 {
		cfg.WorkerTimeout = 60 * time.Second
	}
	if cfg.MaxHeartbeatRate == 0 {
		cfg.MaxHeartbeatRate = DefaultMaxHeartbeatRate
	}
	if cfg.RetainedApplications <= 0 {
		cfg.RetainedApplications = 200
	}
	if cfg.RetainedDrivers <= 0 {
		cfg.RetainedDrivers = 200
	}
	if cfg.RetainedBytes <= 0 {
		cfg.RetainedBytes = defaultRetainedBytes
	}
	if cfg.DeadWorkerPersistence <= 0 {
		cfg.DeadWorkerPersistence = 15
	}
	cfg.Instruments.SetDefaults()
	cfg.Registry = prom.OrNew(cfg.Registry)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		unkept:         map[string]struct{}{},
		dirty:          map[string][]func(error){},
		keeperWake:     make(chan struct{}, 1),
		pendingWorkers: map[string]*workerInfo{},
		pendingApps:    map[string]*appInfo{},
		pendingDrivers: map[string]*driverInfo{},
		cfg:            cfg,
		log:            cfg.Logger,
		tracer:         telemetry.Tracer(cfg.TracerProvider),
		http:           rpc.NewHTTPClient(),
		site:           newSite(cfg),
		ctx:            ctx,
		cancel:         cancel,
		workers:        newRoster(),
		apps:           map[string]*appInfo{},
		drivers:        map[string]*driverInfo{},
		status:         statusAlive,

		unconfirmed: map[string][]*appInfo{},
		deposed:     make(chan struct{}),
	}
	s.metrics = newMetrics(cfg.Registry, s)
	if cfg.Store != nil {
		rec, err := cfg.Store.Load()
		if err != nil {
			cancel()
			return nil, fmt.Errorf("new master: %w", err)
		}
		s.recoverLocked(rec)
	}
	go s.keeper(ctx)
	return s, nil
}

// Handler returns the master's HTTP handler: its Connect service, /json,
// /healthz and the web UI.
func (s *Server) Handler() http.Handler {
	ui := s.uiPages()
	pages := map[string]http.HandlerFunc{"GET /json": s.serveJSON, "GET /json/": s.serveJSON, "GET /sd": s.serveSD,
		"GET /readyz": s.serveReady}
	maps.Copy(pages, ui)
	return rpc.NewHandler(rpc.Endpoints{
		Service: func(o ...connect.HandlerOption) (string, http.Handler) {
			return masterv1connect.NewMasterServiceHandler(s, o...)
		},
		TracerProvider: s.cfg.TracerProvider,
		Metrics:        prom.Handler(s.cfg.Registry),
		Pages:          pages,
		Tokens:         s.cfg.Tokens,
		Access:         web.Access(maps.Clone(access), ui),
		MetricsAuth:    s.cfg.MetricsAuth,
	})
}

// Run checks worker timeouts and driver liveness until ctx ends, then stops
// delivering messages.
func (s *Server) Run(ctx context.Context) error {
	defer s.http.CloseIdleConnections()
	defer s.cancel()
	interval := s.cfg.WorkerTimeout / 4
	timeouts := time.NewTicker(interval)
	defer timeouts.Stop()
	if s.recovering() {
		s.beginRecovery(ctx)
	}
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.deposed:
			return fmt.Errorf("master: lost the leadership of epoch %d: %w", s.cfg.Epoch, s.deposedBy)
		case <-timeouts.C:
			if stalled := time.Since(last); stalled > 2*interval {
				s.resumed(stalled)
			}
			last = time.Now()
			s.keepUnkept()
			s.checkWorkerTimeouts(ctx)
			s.checkDrivers(ctx)
		}
	}
}

// resumed records that the master did not run for stalled (it was stopped,
// or starved of CPU): it heard no heartbeat and no driver meanwhile, so each
// worker and driver gets a whole worker timeout from now to be heard from
// before it is taken for lost — a master woken from a pause does not time
// out every worker that heartbeated all along.
func (s *Server) resumed(stalled time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resumedAt = s.now()
	s.log.Warn("the master did not run for a while; workers and drivers get a whole timeout to be heard from again",
		"stalled", stalled.Round(time.Millisecond), "timeout", s.cfg.WorkerTimeout)
}

// silentFor is how long a worker or driver last heard from at seen has been
// silent while the master ran: from seen, or from when the master resumed
// after a stall, whichever is later.
func (s *Server) silentFor(now, seen time.Time) time.Duration {
	if seen.Before(s.resumedAt) {
		seen = s.resumedAt
	}
	return now.Sub(seen)
}

// serveReady is GET /readyz: 200 while the master leads (ALIVE), else 503
// with its status — so that a Service in front of several masters routes
// to the leader only.
func (s *Server) serveReady(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	status := s.status
	s.mu.Unlock()
	writeReady(w, status)
}

func writeReady(w http.ResponseWriter, status string) {
	if status != statusAlive {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	fmt.Fprintln(w, status)
}

// recovering reports whether the master is RECOVERING.
func (s *Server) recovering() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status == statusRecovering
}

// now returns the clock's time.
func (s *Server) now() time.Time { return s.cfg.Now() }

// access is the role each MasterService procedure and master page needs:
// workers' calls and an operator's decommissioning the cluster token,
// clients' and drivers' a submit token;
// /json either; /sd is a metrics page.
var access = rpc.Access{"GET /json": rpc.AnyToken, "GET /json/": rpc.AnyToken, "GET /sd": rpc.Metrics, "GET /readyz": rpc.Public}.
	Grant(rpc.Cluster,
		masterv1connect.MasterServiceRegisterWorkerProcedure, masterv1connect.MasterServiceHeartbeatProcedure,
		masterv1connect.MasterServiceExecutorStateChangedProcedure, masterv1connect.MasterServiceDriverStateChangedProcedure,
		masterv1connect.MasterServiceWorkerDecommissioningProcedure, masterv1connect.MasterServiceDecommissionWorkerProcedure).
	Grant(rpc.Submit,
		masterv1connect.MasterServiceRegisterApplicationProcedure, masterv1connect.MasterServiceUnregisterApplicationProcedure,
		masterv1connect.MasterServiceKillApplicationProcedure, masterv1connect.MasterServiceSubmitDriverProcedure,
		masterv1connect.MasterServiceKillDriverProcedure, masterv1connect.MasterServiceDriverStatusProcedure,
		masterv1connect.MasterServiceGetClusterStateProcedure, masterv1connect.MasterServiceRequestExecutorsProcedure,
		masterv1connect.MasterServiceKillExecutorsProcedure, masterv1connect.MasterServiceReportExecutorLaunchProcedure)
