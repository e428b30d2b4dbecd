package master

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/timestamppb"

	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/driver/v1/driverv1connect"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	workerv1 "github.com/glint-cluster/glint/pkg/api/glint/worker/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/worker/v1/workerv1connect"
	"github.com/glint-cluster/glint/pkg/ids"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry"
)

// Config configures a master. The zero value of each field means its default.
type Config struct {
	// URL is the address by which workers and drivers reach this master.
	URL string
	// WorkerTimeout is spark.worker.timeout: a worker without a heartbeat for
	// this long is DEAD. Default 60s. Workers heartbeat every WorkerTimeout/4.
	WorkerTimeout time.Duration
	// SpreadOut is spark.deploy.spreadOut (default true in the CLI).
	SpreadOut bool
	// MaxExecutorRetries is spark.deploy.maxExecutorRetries (default 10 in the
	// CLI; negative disables the rule).
	MaxExecutorRetries int
	// RetainedApplications and RetainedDrivers bound the completed lists. Default 200.
	RetainedApplications int
	RetainedDrivers      int
	// DeadWorkerPersistence is spark.dead.worker.persistence: a DEAD worker stays
	// listed for (persistence+1) × WorkerTimeout. Default 15.
	DeadWorkerPersistence int
	// Instruments are the logger, tracer provider and metrics registry.
	telemetry.Instruments
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
	// ctx bounds every message the master sends; it ends when Run returns.
	ctx    context.Context
	cancel context.CancelFunc

	mu               sync.Mutex
	workers          []*workerInfo // registered workers, DEAD ones until culled
	idToWorker       map[string]*workerInfo
	addressToWorker  map[string]*workerInfo
	apps             map[string]*appInfo
	appQueue         []*appInfo // active applications in registration order (Spark's waitingApps)
	completedApps    []*appInfo
	drivers          map[string]*driverInfo
	waitingDrivers   []*driverInfo
	completedDrivers []*driverInfo
	nextAppNumber    int
	nextDriverNumber int
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
	if cfg.RetainedApplications <= 0 {
		cfg.RetainedApplications = 200
	}
	if cfg.RetainedDrivers <= 0 {
		cfg.RetainedDrivers = 200
	}
	if cfg.DeadWorkerPersistence <= 0 {
		cfg.DeadWorkerPersistence = 15
	}
	cfg.Instruments.SetDefaults()
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg:             cfg,
		log:             cfg.Logger,
		tracer:          telemetry.Tracer(cfg.TracerProvider),
		http:            rpc.NewHTTPClient(),
		ctx:             ctx,
		cancel:          cancel,
		idToWorker:      map[string]*workerInfo{},
		addressToWorker: map[string]*workerInfo{},
		apps:            map[string]*appInfo{},
		drivers:         map[string]*driverInfo{},
	}
	s.metrics = newMetrics(cfg.Registry, s)
	return s, nil
}

// Handler returns the master's HTTP handler: its Connect service, /json and /healthz.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(masterv1connect.NewMasterServiceHandler(s, rpc.HandlerOptions(s.cfg.TracerProvider)...))
	mux.HandleFunc("GET /json", s.serveJSON)
	mux.HandleFunc("GET /sd", s.serveSD)
	mux.Handle("GET /metrics", telemetry.MetricsHandler(s.cfg.Registry))
	mux.HandleFunc("GET /json/", s.serveJSON)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	return mux
}

// Run checks worker timeouts and driver liveness until ctx ends, then stops
// delivering messages.
func (s *Server) Run(ctx context.Context) error {
	defer s.http.CloseIdleConnections()
	defer s.cancel()
	timeouts := time.NewTicker(s.cfg.WorkerTimeout / 4)
	defer timeouts.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timeouts.C:
			s.checkWorkerTimeouts(ctx)
			s.checkDrivers(ctx)
		}
	}
}

// now returns the clock's time.
func (s *Server) now() time.Time { return s.cfg.Now() }

// registerWorkerLocked admits w unless an ALIVE worker holds its address
// (Spark's registerWorker).
func (s *Server) registerWorkerLocked(ctx context.Context, w *workerInfo) error {
	s.workers = slices.DeleteFunc(s.workers, func(o *workerInfo) bool {
		return o.address() == w.address() && o.state == masterv1.WorkerState_WORKER_STATE_DEAD
	})
	if old, ok := s.addressToWorker[w.address()]; ok {
		if old.state != masterv1.WorkerState_WORKER_STATE_UNKNOWN {
			return fmt.Errorf("register worker %s: worker %s is already registered at %s: %w",
				w.id, old.id, w.address(), rpc.ErrAlreadyExists)
		}
		s.removeWorkerLocked(ctx, old, "replaced by a new worker at the same address")
	}
	w.client = workerv1connect.NewWorkerServiceClient(s.http, w.url, rpc.ClientOptions(s.cfg.TracerProvider)...)
	w.mailbox = rpc.NewMailbox(s.ctx)
	s.workers = append(s.workers, w)
	s.idToWorker[w.id] = w
	s.addressToWorker[w.address()] = w
	return nil
}

// removeWorkerLocked marks w DEAD: its executors are LOST, its drivers
// relaunched (supervised) or ended, and everything is scheduled again.
func (s *Server) removeWorkerLocked(ctx context.Context, w *workerInfo, reason string) {
	s.log.Info("removing worker", "worker", w.id, "address", w.address(), "reason", reason)
	if err := w.setState(masterv1.WorkerState_WORKER_STATE_DEAD); err != nil {
		s.log.Warn("remove worker", "err", err)
	}
	delete(s.idToWorker, w.id)
	delete(s.addressToWorker, w.address())
	for _, e := range w.executors {
		msg := fmt.Sprintf("worker %s lost: %s", w.id, reason)
		if err := e.setState(masterv1.ExecutorState_EXECUTOR_STATE_LOST); err != nil {
			s.log.Warn("remove worker", "err", err)
		}
		e.message = msg
		s.notifyExecutorUpdated(ctx, e, true, nil)
		e.app.removeExecutor(e)
	}
	w.executors = map[executorKey]*executorInfo{}
	for _, d := range w.drivers {
		if d.desc.GetSupervise() {
			s.relaunchDriverLocked(ctx, d)
		} else {
			s.removeDriverLocked(ctx, d, masterv1.DriverState_DRIVER_STATE_ERROR, fmt.Sprintf("worker %s lost: %s", w.id, reason))
		}
	}
	w.drivers = map[string]*driverInfo{}
	w.coresUsed, w.memoryUsedMiB = 0, 0
	s.scheduleLocked(ctx)
}

// checkWorkerTimeouts is Spark's timeOutDeadWorkers.
func (s *Server) checkWorkerTimeouts(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for _, w := range slices.Clone(s.workers) {
		since := now.Sub(w.lastHeartbeat)
		switch {
		case w.state != masterv1.WorkerState_WORKER_STATE_DEAD && since > s.cfg.WorkerTimeout:
			s.metrics.workerTimeouts.Inc()
			s.removeWorkerLocked(ctx, w, fmt.Sprintf("no heartbeat in %s", since.Round(time.Millisecond)))
		case w.state == masterv1.WorkerState_WORKER_STATE_DEAD &&
			since > time.Duration(s.cfg.DeadWorkerPersistence+1)*s.cfg.WorkerTimeout:
			s.workers = slices.DeleteFunc(s.workers, func(o *workerInfo) bool { return o == w })
		}
	}
}

// checkDrivers probes each application's driver; an application whose driver
// has not answered for a worker timeout is removed (Spark notices a
// disconnected driver; Glint's drivers have no connection to lose).
func (s *Server) checkDrivers(ctx context.Context) {
	s.mu.Lock()
	probes := map[*appInfo]string{}
	for _, a := range s.apps {
		probes[a] = a.driverURL
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	answered := make(chan *appInfo, len(probes))
	for a, url := range probes {
		wg.Go(func() {
			if s.probe(ctx, url) {
				answered <- a
			}
		})
	}
	wg.Wait()
	close(answered)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for a := range answered {
		a.driverSeen = now
	}
	for a := range probes {
		if !a.finished() && now.Sub(a.driverSeen) > s.cfg.WorkerTimeout {
			s.removeApplicationLocked(ctx, a, masterv1.ApplicationState_APPLICATION_STATE_FAILED,
				fmt.Sprintf("driver at %s unreachable for %s", a.driverURL, now.Sub(a.driverSeen).Round(time.Second)))
		}
	}
}

func (s *Server) probe(ctx context.Context, url string) bool {
	ctx, cancel := context.WithTimeout(ctx, min(s.cfg.WorkerTimeout/4, 5*time.Second))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/healthz", nil)
	if err != nil {
		return false
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// scheduleLocked is Spark's Master.schedule(): it snapshots free resources and
// waiting demand, lets schedule decide, and launches what it placed.
func (s *Server) scheduleLocked(ctx context.Context) {
	snap := Snapshot{SpreadOut: s.cfg.SpreadOut}
	for _, w := range s.workers {
		if w.state == masterv1.WorkerState_WORKER_STATE_ALIVE {
			snap.Workers = append(snap.Workers, WorkerSlot{
				ID: w.id, Cores: w.cores, MemoryMiB: w.memoryMiB,
				CoresFree: w.cores - w.coresUsed, MemoryFreeMiB: w.memoryMiB - w.memoryUsedMiB,
			})
		}
	}
	for _, d := range s.waitingDrivers {
		snap.Drivers = append(snap.Drivers, DriverDemand{ID: d.id, Cores: d.desc.GetCores(), MemoryMiB: d.desc.GetMemoryMib()})
	}
	for _, a := range s.appQueue {
		snap.Apps = append(snap.Apps, AppDemand{
			ID: a.id, CoresLeft: a.coresLeft(), CoresPerExecutor: a.desc.GetCoresPerExecutor(),
			MemoryPerExecutorMiB: a.desc.GetMemoryPerExecutorMib(), ExecutorsLeft: a.executorLimit - len(a.executors),
		})
	}
	started := time.Now()
	plan := schedule(snap, s.cfg.Rand)
	ended := time.Now()
	// The pass's exemplar is the trace of the first application it served.
	exemplar := trace.SpanContextFromContext(ctx)
	for _, p := range plan.Drivers {
		d := s.drivers[p.DriverID]
		sctx, span := s.scheduleSpan(ctx, d.trace, started, telemetry.DriverID.String(d.id))
		s.launchDriverLocked(sctx, s.idToWorker[p.WorkerID], d)
		span.End(trace.WithTimestamp(ended))
	}
	for i := 0; i < len(plan.Executors); {
		a := s.apps[plan.Executors[i].AppID]
		sctx, span := s.scheduleSpan(ctx, a.trace, started, telemetry.AppID.String(a.id))
		if i == 0 {
			exemplar = span.SpanContext()
		}
		for ; i < len(plan.Executors) && plan.Executors[i].AppID == a.id; i++ {
			p := plan.Executors[i]
			s.launchExecutorLocked(sctx, s.idToWorker[p.WorkerID], a, p.Cores, p.MemoryMiB)
		}
		span.End(trace.WithTimestamp(ended))
	}
	telemetry.ObserveInTrace(exemplar, s.metrics.scheduleDuration, ended.Sub(started).Seconds())
	for _, a := range s.appQueue {
		// Only an application without executors is stuck; say why.
		if len(a.executors) == 0 {
			a.statusMessage = plan.Waiting[a.id]
		} else {
			a.statusMessage = ""
		}
	}
}

// scheduleSpan starts the "schedule" span of one application's (or driver's)
// placements in one schedule() pass, timed as the pass. It belongs to the
// application's trace (parent); when another event triggered the pass — a
// worker registered, an executor of another app ended — it links to it.
func (s *Server) scheduleSpan(ctx context.Context, parent trace.SpanContext, started time.Time, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{trace.WithTimestamp(started), trace.WithAttributes(attrs...)}
	if parent.IsValid() {
		if trigger := trace.SpanContextFromContext(ctx); trigger.IsValid() && trigger.TraceID() != parent.TraceID() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: trigger}))
		}
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	}
	return s.tracer.Start(ctx, "schedule", opts...)
}

// launchDriverLocked is Spark's launchDriver.
func (s *Server) launchDriverLocked(ctx context.Context, w *workerInfo, d *driverInfo) {
	s.log.InfoContext(ctx, "launching driver", "driver", d.id, "worker", w.id)
	trace.SpanFromContext(ctx).AddEvent("driver placed", trace.WithAttributes(telemetry.WorkerID.String(w.id)))
	w.addDriver(d)
	if err := d.setState(masterv1.DriverState_DRIVER_STATE_RUNNING); err != nil {
		s.log.Warn("launch driver", "err", err)
	}
	s.waitingDrivers = slices.DeleteFunc(s.waitingDrivers, func(o *driverInfo) bool { return o == d })
	req := &workerv1.LaunchDriverRequest{MasterUrl: s.cfg.URL, DriverId: d.id, Description: d.desc}
	w.mailbox.Post(ctx, func(ctx context.Context) {
		if _, err := w.client.LaunchDriver(ctx, connect.NewRequest(req)); err != nil {
			s.log.Warn("launch driver failed", "driver", d.id, "worker", w.id, "err", err)
			s.mu.Lock()
			defer s.mu.Unlock()
			if d.worker == w && !driverFinished(d.state) {
				s.removeDriverLocked(ctx, d, masterv1.DriverState_DRIVER_STATE_ERROR,
					fmt.Sprintf("launch driver on worker %s: %v", w.id, err))
			}
		}
	})
}

// launchExecutorLocked is Spark's launchExecutor: the worker gets
// LaunchExecutor, the driver ExecutorAdded.
func (s *Server) launchExecutorLocked(ctx context.Context, w *workerInfo, a *appInfo, cores int32, memoryMiB int64) {
	e := a.addExecutor(w, cores, memoryMiB, s.now())
	w.addExecutor(e)
	if a.state == masterv1.ApplicationState_APPLICATION_STATE_WAITING {
		if err := a.setState(masterv1.ApplicationState_APPLICATION_STATE_RUNNING); err != nil {
			s.log.Warn("launch executor", "err", err)
		}
	}
	s.log.InfoContext(ctx, "launching executor", "app", a.id, "executor", e.id, "worker", w.id, "cores", cores, "memory_mib", memoryMiB)
	trace.SpanFromContext(ctx).AddEvent("executor placed", trace.WithAttributes(
		telemetry.ExecutorID.Int(int(e.id)), telemetry.WorkerID.String(w.id), telemetry.Cores.Int(int(cores)), telemetry.MemoryMiB.Int64(memoryMiB)))
	req := &workerv1.LaunchExecutorRequest{
		MasterUrl: s.cfg.URL, AppId: a.id, ExecutorId: e.id, Description: a.desc, Cores: cores, MemoryMib: memoryMiB,
	}
	w.mailbox.Post(ctx, func(ctx context.Context) {
		_, err := w.client.LaunchExecutor(ctx, connect.NewRequest(req))
		if err == nil {
			s.metrics.executorLaunches.WithLabelValues(launchOK).Inc()
			return
		}
		s.metrics.executorLaunches.WithLabelValues(launchError).Inc()
		s.log.Warn("launch executor failed", "app", a.id, "executor", e.id, "worker", w.id, "err", err)
		s.mu.Lock()
		defer s.mu.Unlock()
		if err := s.executorStateChangedLocked(ctx, e, masterv1.ExecutorState_EXECUTOR_STATE_FAILED,
			fmt.Sprintf("launch executor on worker %s: %v", w.id, err), nil, nil); err != nil {
			s.log.Debug("launch executor failure after executor ended", "err", err)
		}
	})
	added := &driverv1.ExecutorAddedRequest{
		AppId: a.id, ExecutorId: e.id, WorkerId: w.id, HostPort: w.address(),
		Cores: cores, MemoryMib: memoryMiB, ScheduledAt: timestamppb.New(e.scheduledAt),
	}
	a.mailbox.Post(ctx, func(ctx context.Context) {
		if _, err := a.client.ExecutorAdded(ctx, connect.NewRequest(added)); err != nil {
			s.log.Warn("tell driver executor added", "app", a.id, "executor", e.id, "err", err)
		}
	})
}

// executorTimes are the worker's timestamps for an executor's launch.
type executorTimes struct {
	launched, started *timestamppb.Timestamp
}

// executorStateChangedLocked is Spark's ExecutorStateChanged handling,
// including the spark.deploy.maxExecutorRetries rule.
func (s *Server) executorStateChangedLocked(ctx context.Context, e *executorInfo, state masterv1.ExecutorState, message string, exitStatus *int32, times *executorTimes) error {
	a := e.app
	if _, ok := a.executors[e.id]; !ok || a.finished() {
		return fmt.Errorf("executor %s/%d: %w (already removed)", a.id, e.id, rpc.ErrNotFound)
	}
	old := e.state
	if err := e.setState(state); err != nil {
		return err
	}
	e.message, e.exitStatus = message, exitStatus
	if state == masterv1.ExecutorState_EXECUTOR_STATE_RUNNING {
		a.retryCount = 0
		telemetry.ObserveInTrace(a.trace, s.metrics.executorStart, s.now().Sub(e.scheduledAt).Seconds())
	}
	s.notifyExecutorUpdated(ctx, e, false, times)
	if !executorFinished(state) {
		return nil
	}
	s.log.Info("executor finished", "app", a.id, "executor", e.id, "state", state.String(), "message", message)
	a.removeExecutor(e)
	e.worker.removeExecutor(e)
	normalExit := exitStatus != nil && *exitStatus == 0
	if !normalExit && old != masterv1.ExecutorState_EXECUTOR_STATE_DECOMMISSIONED {
		a.retryCount++
		if s.cfg.MaxExecutorRetries >= 0 && a.retryCount >= s.cfg.MaxExecutorRetries && !a.hasRunningExecutor() {
			s.removeApplicationLocked(ctx, a, masterv1.ApplicationState_APPLICATION_STATE_FAILED,
				fmt.Sprintf("%d executors failed in a row and none is running; last: %s", a.retryCount, message))
			return nil
		}
	}
	s.scheduleLocked(ctx)
	return nil
}

func (s *Server) notifyExecutorUpdated(ctx context.Context, e *executorInfo, workerLost bool, times *executorTimes) {
	a := e.app
	req := &driverv1.ExecutorUpdatedRequest{
		AppId: a.id, ExecutorId: e.id, State: e.state, Message: e.message, ExitStatus: e.exitStatus, WorkerLost: workerLost,
	}
	if times != nil {
		req.LaunchedAt, req.StartedAt = times.launched, times.started
	}
	a.mailbox.Post(ctx, func(ctx context.Context) {
		if _, err := a.client.ExecutorUpdated(ctx, connect.NewRequest(req)); err != nil {
			s.log.Warn("tell driver executor updated", "app", a.id, "executor", e.id, "err", err)
		}
	})
}

// registerApplicationLocked admits a validated application (Spark's registerApplication).
func (s *Server) registerApplicationLocked(ctx context.Context, desc *masterv1.ApplicationDescription, driverURL, driverID string) *appInfo {
	now := s.now()
	a := &appInfo{
		id: ids.App(now, s.nextAppNumber), desc: desc, driverURL: driverURL, driverID: driverID,
		state: masterv1.ApplicationState_APPLICATION_STATE_WAITING, startTime: now, driverSeen: now,
		trace:     trace.SpanContextFromContext(ctx),
		executors: map[int32]*executorInfo{}, executorLimit: math.MaxInt,
		client:  driverv1connect.NewDriverServiceClient(s.http, driverURL, rpc.ClientOptions(s.cfg.TracerProvider)...),
		mailbox: rpc.NewMailbox(s.ctx),
	}
	if desc.InitialExecutorLimit != nil {
		a.executorLimit = int(desc.GetInitialExecutorLimit())
	}
	s.nextAppNumber++
	s.apps[a.id] = a
	s.appQueue = append(s.appQueue, a)
	s.log.InfoContext(ctx, "registered application", "app", a.id, "name", desc.GetName(), "driver_url", driverURL)
	trace.SpanFromContext(ctx).SetAttributes(telemetry.AppID.String(a.id))
	s.scheduleLocked(ctx)
	return a
}

// removeApplicationLocked is Spark's removeApplication: the executors are
// killed, the driver and every worker told, the app kept among the completed.
func (s *Server) removeApplicationLocked(ctx context.Context, a *appInfo, state masterv1.ApplicationState, message string) {
	if err := a.setState(state); err != nil {
		s.log.Warn("remove application", "err", err)
		return
	}
	s.log.Info("removing application", "app", a.id, "state", state.String(), "message", message)
	a.endTime = s.now()
	a.statusMessage = message
	delete(s.apps, a.id)
	s.appQueue = slices.DeleteFunc(s.appQueue, func(o *appInfo) bool { return o == a })
	s.completedApps = retain(s.completedApps, a, s.cfg.RetainedApplications)
	for _, e := range a.executors {
		s.killExecutorLocked(ctx, e)
	}
	removed := &driverv1.ApplicationRemovedRequest{AppId: a.id, Message: fmt.Sprintf("%s: %s", lifecycle.Name(state), message)}
	a.mailbox.Post(ctx, func(ctx context.Context) {
		if _, err := a.client.ApplicationRemoved(ctx, connect.NewRequest(removed)); err != nil {
			s.log.Debug("tell driver application removed", "app", a.id, "err", err)
		}
	})
	for _, w := range s.workers {
		if w.state != masterv1.WorkerState_WORKER_STATE_ALIVE {
			continue
		}
		req := &workerv1.ApplicationFinishedRequest{MasterUrl: s.cfg.URL, AppId: a.id}
		w.mailbox.Post(ctx, func(ctx context.Context) {
			if _, err := w.client.ApplicationFinished(ctx, connect.NewRequest(req)); err != nil {
				s.log.Warn("tell worker application finished", "worker", w.id, "err", err)
			}
		})
	}
	s.scheduleLocked(ctx)
}

// killExecutorLocked is Spark's killExecutor: the worker is told to kill it and
// the master forgets it at once.
func (s *Server) killExecutorLocked(ctx context.Context, e *executorInfo) {
	e.app.removeExecutor(e)
	e.worker.removeExecutor(e)
	if err := e.setState(masterv1.ExecutorState_EXECUTOR_STATE_KILLED); err != nil {
		s.log.Debug("kill executor", "err", err)
	}
	req := &workerv1.KillExecutorRequest{MasterUrl: s.cfg.URL, AppId: e.app.id, ExecutorId: e.id}
	w := e.worker
	w.mailbox.Post(ctx, func(ctx context.Context) {
		if _, err := w.client.KillExecutor(ctx, connect.NewRequest(req)); err != nil {
			s.log.Debug("kill executor", "app", e.app.id, "executor", e.id, "worker", w.id, "err", err)
		}
	})
}

// submitDriverLocked queues a validated driver (Spark's RequestSubmitDriver).
func (s *Server) submitDriverLocked(ctx context.Context, desc *masterv1.DriverDescription) *driverInfo {
	now := s.now()
	d := &driverInfo{
		id: ids.Driver(now, s.nextDriverNumber), desc: desc,
		state: masterv1.DriverState_DRIVER_STATE_SUBMITTED, submitTime: now, trace: trace.SpanContextFromContext(ctx),
	}
	s.nextDriverNumber++
	s.drivers[d.id] = d
	s.waitingDrivers = append(s.waitingDrivers, d)
	s.log.InfoContext(ctx, "submitted driver", "driver", d.id, "name", desc.GetName())
	trace.SpanFromContext(ctx).SetAttributes(telemetry.DriverID.String(d.id))
	s.scheduleLocked(ctx)
	return d
}

// relaunchDriverLocked restarts a supervised driver under a new id (SPARK-19900).
func (s *Server) relaunchDriverLocked(ctx context.Context, d *driverInfo) {
	n := s.submitDriverLocked(telemetry.ContextWithSpanContextOf(ctx, d.trace), d.desc)
	s.removeDriverLocked(ctx, d, masterv1.DriverState_DRIVER_STATE_RELAUNCHING, fmt.Sprintf("its worker was lost; relaunched as %s", n.id))
}

// removeDriverLocked is Spark's removeDriver; apps the driver registered end with it.
func (s *Server) removeDriverLocked(ctx context.Context, d *driverInfo, state masterv1.DriverState, message string) {
	if err := d.setState(state); err != nil {
		s.log.Warn("remove driver", "err", err)
		return
	}
	s.log.Info("removing driver", "driver", d.id, "state", state.String(), "message", message)
	d.message = message
	delete(s.drivers, d.id)
	s.waitingDrivers = slices.DeleteFunc(s.waitingDrivers, func(o *driverInfo) bool { return o == d })
	s.completedDrivers = retain(s.completedDrivers, d, s.cfg.RetainedDrivers)
	if d.worker != nil {
		d.worker.removeDriver(d)
	}
	appState := masterv1.ApplicationState_APPLICATION_STATE_FINISHED
	if state != masterv1.DriverState_DRIVER_STATE_FINISHED {
		appState = masterv1.ApplicationState_APPLICATION_STATE_FAILED
	}
	for _, a := range s.apps {
		if a.driverID == d.id {
			s.removeApplicationLocked(ctx, a, appState, fmt.Sprintf("driver %s ended %s", d.id, state))
		}
	}
	s.scheduleLocked(ctx)
}

// retain appends v to completed, first dropping the oldest 10% (at least one)
// when limit entries are kept already — spark.deploy.retainedApplications
// and retainedDrivers.
func retain[T any](completed []T, v T, limit int) []T {
	if len(completed) >= limit {
		completed = completed[max(limit/10, 1):]
	}
	return append(completed, v)
}
