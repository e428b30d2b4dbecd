package master

import (
	"fmt"
	"math"
	"slices"
	"time"

	driverv1connect "github.com/glint-cluster/glint/pkg/api/glint/driver/v1/driverv1connect"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	workerv1connect "github.com/glint-cluster/glint/pkg/api/glint/worker/v1/workerv1connect"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/rpc"
	"go.opentelemetry.io/otel/trace"
)

// The tables below list every state change a worker, application, executor
// or driver may make on the master, so the life cycles are all in one place.
var workerTransitions = lifecycle.Transitions[masterv1.WorkerState]{
	masterv1.WorkerState_WORKER_STATE_UNKNOWN:        {masterv1.WorkerState_WORKER_STATE_ALIVE, masterv1.WorkerState_WORKER_STATE_DEAD},
	masterv1.WorkerState_WORKER_STATE_ALIVE:          {masterv1.WorkerState_WORKER_STATE_DEAD, masterv1.WorkerState_WORKER_STATE_DECOMMISSIONED},
	masterv1.WorkerState_WORKER_STATE_DECOMMISSIONED: {masterv1.WorkerState_WORKER_STATE_DEAD},
}

var appTransitions = lifecycle.Transitions[masterv1.ApplicationState]{
	// UNKNOWN: recovered, until its driver answers (recovery.go).
	masterv1.ApplicationState_APPLICATION_STATE_UNKNOWN: {
		masterv1.ApplicationState_APPLICATION_STATE_WAITING, masterv1.ApplicationState_APPLICATION_STATE_RUNNING,
		masterv1.ApplicationState_APPLICATION_STATE_FINISHED, masterv1.ApplicationState_APPLICATION_STATE_FAILED,
		masterv1.ApplicationState_APPLICATION_STATE_KILLED,
	},
	masterv1.ApplicationState_APPLICATION_STATE_WAITING: {
		masterv1.ApplicationState_APPLICATION_STATE_RUNNING, masterv1.ApplicationState_APPLICATION_STATE_FINISHED,
		masterv1.ApplicationState_APPLICATION_STATE_FAILED, masterv1.ApplicationState_APPLICATION_STATE_KILLED,
	},
	masterv1.ApplicationState_APPLICATION_STATE_RUNNING: {
		masterv1.ApplicationState_APPLICATION_STATE_FINISHED, masterv1.ApplicationState_APPLICATION_STATE_FAILED,
		masterv1.ApplicationState_APPLICATION_STATE_KILLED,
		// It lost its executors and gets no new ones (scheduleLocked).
		masterv1.ApplicationState_APPLICATION_STATE_WAITING,
	},
	// Its driver unregistered it FINISHED, then exited non-zero (appEndOf).
	masterv1.ApplicationState_APPLICATION_STATE_FINISHED: {masterv1.ApplicationState_APPLICATION_STATE_FAILED},
}

var executorTransitions = lifecycle.Transitions[masterv1.ExecutorState]{
	masterv1.ExecutorState_EXECUTOR_STATE_LAUNCHING: {
		masterv1.ExecutorState_EXECUTOR_STATE_RUNNING, masterv1.ExecutorState_EXECUTOR_STATE_KILLED,
		masterv1.ExecutorState_EXECUTOR_STATE_FAILED, masterv1.ExecutorState_EXECUTOR_STATE_LOST,
		masterv1.ExecutorState_EXECUTOR_STATE_EXITED, masterv1.ExecutorState_EXECUTOR_STATE_DECOMMISSIONED,
	},
	masterv1.ExecutorState_EXECUTOR_STATE_RUNNING: {
		masterv1.ExecutorState_EXECUTOR_STATE_KILLED, masterv1.ExecutorState_EXECUTOR_STATE_FAILED,
		masterv1.ExecutorState_EXECUTOR_STATE_LOST, masterv1.ExecutorState_EXECUTOR_STATE_EXITED,
		masterv1.ExecutorState_EXECUTOR_STATE_DECOMMISSIONED,
	},
	masterv1.ExecutorState_EXECUTOR_STATE_DECOMMISSIONED: {
		masterv1.ExecutorState_EXECUTOR_STATE_KILLED, masterv1.ExecutorState_EXECUTOR_STATE_FAILED,
		masterv1.ExecutorState_EXECUTOR_STATE_LOST, masterv1.ExecutorState_EXECUTOR_STATE_EXITED,
	},
}

var driverTransitions = lifecycle.Transitions[masterv1.DriverState]{
	masterv1.DriverState_DRIVER_STATE_SUBMITTED: {
		masterv1.DriverState_DRIVER_STATE_RUNNING, masterv1.DriverState_DRIVER_STATE_KILLED,
		masterv1.DriverState_DRIVER_STATE_ERROR,
	},
	masterv1.DriverState_DRIVER_STATE_RUNNING: {
		masterv1.DriverState_DRIVER_STATE_FINISHED, masterv1.DriverState_DRIVER_STATE_FAILED,
		masterv1.DriverState_DRIVER_STATE_KILLED, masterv1.DriverState_DRIVER_STATE_ERROR,
		masterv1.DriverState_DRIVER_STATE_RELAUNCHING,
		// Its launch failed: it waits to be placed again.
		masterv1.DriverState_DRIVER_STATE_SUBMITTED,
	},
}

// workerInfo is one registered worker (Spark's WorkerInfo).
type workerInfo struct {
	id string
	// registration is the worker's current registration with this master
	// (RegisterWorkerResponse.registration), which launches carry.
	registration  int64
	host          string
	port          int32
	url           string
	cores         int32
	memoryMiB     int64
	coresUsed     int32
	memoryUsedMiB int64
	state         masterv1.WorkerState
	lastHeartbeat time.Time
	// interval is the heartbeat interval it was last told (0: none yet).
	interval time.Duration
	// timedOut is when the master declared it DEAD for its silence.
	timedOut  time.Time
	executors map[executorKey]*executorInfo
	drivers   map[string]*driverInfo
	client    workerv1connect.WorkerServiceClient
	mailbox   *rpc.Mailbox
	roster    rosterEntry
}

func newWorkerInfo(id, host string, port int32, url string, cores int32, memoryMiB int64, now time.Time) *workerInfo {
	return &workerInfo{
		id: id, host: host, port: port, url: url, cores: cores, memoryMiB: memoryMiB,
		state: masterv1.WorkerState_WORKER_STATE_ALIVE, lastHeartbeat: now,
		executors: map[executorKey]*executorInfo{}, drivers: map[string]*driverInfo{},
	}
}

func (w *workerInfo) setState(to masterv1.WorkerState) error {
	if err := workerTransitions.Check("worker "+w.id, w.state, to); err != nil {
		return err
	}
	w.state = to
	return nil
}

func (w *workerInfo) address() string { return fmt.Sprintf("%s:%d", w.host, w.port) }

func (w *workerInfo) addExecutor(e *executorInfo) {
	w.executors[e.key()] = e
	w.coresUsed += e.cores
	w.memoryUsedMiB += e.memoryMiB
}

func (w *workerInfo) removeExecutor(e *executorInfo) {
	if _, ok := w.executors[e.key()]; !ok {
		return
	}
	delete(w.executors, e.key())
	w.coresUsed -= e.cores
	w.memoryUsedMiB -= e.memoryMiB
	e.used.memoryBytes = 0 // it holds none once it ended; its CPU and peak stay
}

func (w *workerInfo) addDriver(d *driverInfo) {
	w.drivers[d.id] = d
	w.coresUsed += d.desc.GetCores()
	w.memoryUsedMiB += d.desc.GetMemoryMib()
	d.worker = w
}

func (w *workerInfo) removeDriver(d *driverInfo) {
	if _, ok := w.drivers[d.id]; !ok {
		return
	}
	delete(w.drivers, d.id)
	w.coresUsed -= d.desc.GetCores()
	w.memoryUsedMiB -= d.desc.GetMemoryMib()
	d.used.memoryBytes = 0
}

// executorKey names an executor cluster-wide.
type executorKey struct {
	app string
	id  int32
}

// executorInfo is one executor (Spark's ExecutorDesc).
type executorInfo struct {
	id          int32
	app         *appInfo
	worker      *workerInfo
	cores       int32
	memoryMiB   int64
	state       masterv1.ExecutorState
	message     string
	exitStatus  *int32
	scheduledAt time.Time
	// requestedAt is when it was asked for, requestedFor why (its
	// application's asked); zero for one a recovering master adopted.
	requestedAt  time.Time
	requestedFor masterv1.ExecutorCause
	// runningSince is when its worker reported it RUNNING, removedAt when
	// the master removed it from its application.
	runningSince, removedAt time.Time
	// url is where the executor serves, once its worker reported it.
	url string
	// released says its cores no longer count as its application's: its
	// worker is decommissioned, and it ends when its tasks are done.
	released bool
	// launch is when the later steps of its launch happened (timeline.go).
	launch launchTimes
	// used is what it uses, as its worker last measured it (usage.go).
	used usage
	// span is its span in its application's trace until it ends
	// (executorspan.go); nil once ended, or if it was recovered.
	span trace.Span
}

func (e *executorInfo) key() executorKey { return executorKey{e.app.id, e.id} }

func (e *executorInfo) setState(to masterv1.ExecutorState) error {
	if err := executorTransitions.Check(fmt.Sprintf("executor %s/%d", e.app.id, e.id), e.state, to); err != nil {
		return err
	}
	e.state = to
	return nil
}

// appInfo is one application (Spark's ApplicationInfo).
type appInfo struct {
	id string
	// appToken is the application's own token: the master hands it to its
	// executors; it is never shown.
	appToken string
	// owner is the name of the submit token that registered it (owners.go).
	owner     string
	desc      *masterv1.ApplicationDescription
	driverURL string
	driverID  string
	state     masterv1.ApplicationState
	startTime time.Time
	endTime   time.Time
	executors map[int32]*executorInfo
	removed   []*executorInfo
	// workers are those that were given executors of the application.
	workers      map[*workerInfo]struct{}
	coresGranted int32
	// coresPeak is the most cores it held at once, kept once it ended.
	coresPeak int32
	// liveExecutors counts the executors that hold cores of the application
	// (not released): they count against the executor limit.
	liveExecutors int
	nextExecID    int32
	retryCount    int
	// quickFailures counts executors in a row that failed within
	// healthyRun of starting: they set the relaunch backoff, and fail the
	// application at MaxExecutorRetries even though each reached RUNNING.
	quickFailures int
	// driverStopping says the driver released its executors as it stops
	// (RequestExecutors with stopping): their ends are asked for, and it is
	// told nothing more. A target of 0 from dynamic allocation is not that.
	driverStopping bool
	// askedAt is when, and askedFor why, the application last came to want
	// an executor it does not hold (ask): the next executor placed for it
	// was asked for then.
	askedAt  time.Time
	askedFor masterv1.ExecutorCause
	// relaunchAfter holds new executors back after failures (backOffLocked).
	relaunchAfter time.Time
	executorLimit int
	// defaultCores caps an application that set no max cores: the master's
	// DefaultCores when it registered; 0: unlimited.
	defaultCores int32
	// size is the size of desc, counted in Server.activeBytes while active.
	size          int
	statusMessage string
	driverSeen    time.Time
	// trace is the span context of the application's registration; every
	// later launch for the application is traced under it.
	trace   trace.SpanContext
	client  driverv1connect.DriverServiceClient
	mailbox *rpc.Mailbox
	// shown is how a completed application recovered from the Store was
	// shown when it ended (appProto); nil for the others.
	shown *masterv1.ApplicationInfo

	// masterToken is what the master calls the driver with (client): the
	// driver made it and gave it to the masters only, never to its
	// executors. It is never shown.
	masterToken string
}

func (a *appInfo) setState(to masterv1.ApplicationState) error {
	if err := appTransitions.Check("application "+a.id, a.state, to); err != nil {
		return err
	}
	a.state = to
	return nil
}

// maxCores is spark.cores.max, else the master's default cores, else unlimited.
func (a *appInfo) maxCores() int32 {
	switch {
	case a.desc.MaxCores != nil:
		return a.desc.GetMaxCores()
	case a.defaultCores > 0:
		return a.defaultCores
	}
	return math.MaxInt32
}

func (a *appInfo) coresLeft() int32 { return a.maxCores() - a.coresGranted }

func (a *appInfo) finished() bool {
	switch a.state {
	case masterv1.ApplicationState_APPLICATION_STATE_FINISHED, masterv1.ApplicationState_APPLICATION_STATE_FAILED,
		masterv1.ApplicationState_APPLICATION_STATE_KILLED:
		return true
	}
	return false
}

func (a *appInfo) addExecutor(w *workerInfo, cores int32, memoryMiB int64, now time.Time) *executorInfo {
	e := &executorInfo{
		id: a.nextExecID, app: a, worker: w, cores: cores, memoryMiB: memoryMiB,
		state: masterv1.ExecutorState_EXECUTOR_STATE_LAUNCHING, scheduledAt: now,
		requestedAt: a.askedAt, requestedFor: a.askedFor,
	}
	a.nextExecID++
	a.holdExecutor(e)
	return e
}

// holdExecutor makes e one of a's executors, holding its cores: a new one,
// or one a recovering master adopts.
func (a *appInfo) holdExecutor(e *executorInfo) {
	a.executors[e.id] = e
	a.workers[e.worker] = struct{}{}
	a.coresGranted += e.cores
	a.coresPeak = max(a.coresPeak, a.coresGranted)
	a.liveExecutors++
}

// ask records that a came to want an executor at now, for cause.
func (a *appInfo) ask(now time.Time, cause masterv1.ExecutorCause) {
	a.askedAt, a.askedFor = now, cause
}

// removeExecutor removes e from a at now: one placed after it, while a
// runs, replaces it.
func (a *appInfo) removeExecutor(e *executorInfo, now time.Time) {
	if _, ok := a.executors[e.id]; !ok {
		return
	}
	if !a.finished() && !a.driverStopping {
		a.ask(now, masterv1.ExecutorCause_EXECUTOR_CAUSE_REPLACEMENT)
	}
	delete(a.executors, e.id)
	e.removedAt = now
	a.removed = append(a.removed, e)
	if n := len(a.removed) - maxRemovedExecutors; n > 0 {
		a.removed = slices.Delete(a.removed, 0, n)
	}
	a.releaseExecutor(e)
}

// releaseExecutor gives e's cores back and stops counting e against the
// executor limit, once.
func (a *appInfo) releaseExecutor(e *executorInfo) {
	if !e.released {
		e.released = true
		a.coresGranted -= e.cores
		a.liveExecutors--
	}
}

// lastEnd is the message of a's executor that ended last.
func (a *appInfo) lastEnd() string {
	if len(a.removed) == 0 {
		return ""
	}
	return a.removed[len(a.removed)-1].message
}

// ended reports whether executor id of a is among those that ended.
func (a *appInfo) ended(id int32) bool {
	return slices.ContainsFunc(a.removed, func(e *executorInfo) bool { return e.id == id })
}

func (a *appInfo) hasRunningExecutor() bool {
	for _, e := range a.executors {
		if e.state == masterv1.ExecutorState_EXECUTOR_STATE_RUNNING {
			return true
		}
	}
	return false
}

// driverInfo is one cluster-mode driver (Spark's DriverInfo).
type driverInfo struct {
	id         string
	used       usage // as its worker last measured it (usage.go)
	desc       *masterv1.DriverDescription
	state      masterv1.DriverState
	worker     *workerInfo
	submitTime time.Time
	message    string
	// size is the size of desc, counted in Server.activeBytes while active.
	size int
	// trace is the span context of the driver's submission.
	trace trace.SpanContext
	// span is its span from its placement to its end (executorspan.go);
	// nil while it waits to be placed, or if it was recovered.
	span trace.Span
	// submitToken is the submit token the master made for the driver while
	// it runs (none without authentication), named by its id; it is never
	// shown.
	submitToken string
	// owner is the name of the submit token that submitted it (owners.go).
	owner string
	// recoveredOn is the worker a recovered driver ran on, until that
	// worker re-registers with it.
	recoveredOn string
	// shown is how a completed driver recovered from the Store was shown
	// when it ended (driverProto); nil for the others.
	shown *masterv1.DriverInfo
	// launched says its worker took its LaunchDriver (or it was recovered
	// running there): until then, a lost worker never ran it.
	launched bool
	// relaunchedAs is the driver that goes on with a relaunched one's
	// submission (RELAUNCHING).
	relaunchedAs string
	// launchFailures counts its failed launches; relaunchAfter holds it
	// back after one (requeueDriverLocked).
	launchFailures int
	relaunchAfter  time.Time
	// submission is the client's submission id that made the driver (empty:
	// none, or a relaunch).
	submission string
	// endUnkept says the Store has not kept its end yet
	// (driverEndKeptLocked): until it has, its worker's report of the end
	// is not answered and its status does not show it.
	endUnkept bool
}

// runsOn reports whether d runs on the worker with id, or ran there before
// the master recovered and that worker has not registered again yet.
func (d *driverInfo) runsOn(id string) bool {
	if d.worker != nil {
		return d.worker.id == id
	}
	return d.recoveredOn != "" && d.recoveredOn == id
}

func (d *driverInfo) setState(to masterv1.DriverState) error {
	if err := driverTransitions.Check("driver "+d.id, d.state, to); err != nil {
		return err
	}
	d.state = to
	return nil
}
