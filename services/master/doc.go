// Package master is Glint's Master: it admits workers, applications and drivers,
// tracks their states and places drivers and executors on workers as Spark's
// standalone Master does.
//
// # Files
//
//   - master.go: Config, Server, New, Handler and Run, whose timer checks worker
//     timeouts and driver liveness and writes again what the store refused; the
//     access table of every procedure and page.
//   - workers.go, roster.go, heartbeats.go: worker registration, removal and
//     timeouts. The roster indexes the workers by id and address, keeps the live
//     ones in heartbeat order and the dead in order of death, so a worker event
//     and a timeout sweep look only at the workers they change.
//   - apps.go: applications and their executors, and Spark's maxExecutorRetries rule.
//   - drivers.go: cluster-mode drivers: submit, launch, relaunch, remove.
//   - launches.go: the schedule pass, its spans, and every message sent to
//     workers and drivers.
//   - decommission.go: WorkerDecommissioning, the operator's DecommissionWorker,
//     and the DecommissionWorker sent to the worker.
//   - probes.go: driver liveness (Ping).
//   - owners.go: who may act on what: Spark's ACLs, always on, by token name.
//   - limits.go: how much state peers may make the master keep.
//   - keep.go: the keeper, which writes state changes with the lock released.
//   - recovery.go: how a restarted master takes back what its store kept.
//     The Store itself, in bbolt or etcd, and the etcd lease a leader holds
//     are in package store; Spark's schedule() is package schedule.
//   - ha.go: a master under etcd leader election (etcd's clientv3
//     concurrency election).
//   - handlers.go: validation and the Connect handlers.
//   - state.go: states, transition tables and the records of workers,
//     applications, executors and drivers.
//   - executorspan.go, timeline.go: the spans of executors and cluster-mode
//     drivers, and each executor's launch steps as the worker and driver report them.
//   - json.go, sd.go, metrics.go, usage.go: GetClusterState and /json, Prometheus
//     service discovery at /sd, metrics, and what workers measured.
//   - ui.go, apptabs.go: the web UI: the overview, an application's page and its
//     tabs (executors, environment, events, jobs), and the kill buttons.
//
// # Events
//
// One mutex guards the state. Every handler, timer tick and send callback that
// changes state under it releases it with scheduleAndUnlock: mutators only mark
// that scheduling is needed, and the event makes one schedule pass as it ends.
// A pass with no waiting demand does not look at the workers.
//
// Messages to a peer go through that peer's rpc.Mailbox, in the order they were
// posted. LaunchExecutor and LaunchDriver are posted with PostAlongside, so
// launches to one worker travel together.
//
// # Workers
//
// A worker that registers again with the id of a live worker is answered as a
// duplicate, or adopted if it is UNKNOWN after a recovery. A new id at the
// address of a live worker is refused (AlreadyExists), unless that worker is
// UNKNOWN, which the new one then replaces. Each admitted worker gets a random
// registration number that every launch to it carries; the worker refuses a
// launch of an earlier registration.
//
// Workers heartbeat at the interval the master names in each answer: a quarter
// of the worker timeout, or whole multiples of it once the cluster is large
// enough that MaxHeartbeatRate would be passed. A live worker times out after
// the worker timeout or four of the longest interval a live worker was told,
// whichever is longer. A master that did not run for more than two check
// intervals (it was stopped or starved) gives every worker and driver a whole
// timeout from when it ran again.
//
// A worker that timed out is DEAD. Its executors are LOST and their drivers
// told. Each driver it ran ends FINISHED if its application had finished, is
// relaunched under a new id if supervised (the old id ends RELAUNCHING and
// names the new one), and ends in ERROR otherwise; a driver whose launch the
// worker never took waits to be placed again. DEAD workers stay listed for
// DeadWorkerPersistence worker timeouts. A heartbeat from a removed worker is
// told to register again; one from an unknown id is NotFound.
//
// Registrations and heartbeats list what the worker runs. The master answers
// with what it does not know there, and the worker kills it (SPARK-13604 at
// registration, and at every heartbeat too). They also carry the final states
// no master acknowledged yet, which the master applies before anything else of
// the call and passes over when it knows them already, so each end is applied
// once and a recovering master never takes a finished driver for lost.
//
// # Scheduling
//
// The schedule package places waiting drivers first, then executors, FIFO over the active
// applications, with Spark's spread-out and consolidate modes, cores per
// executor, memory per executor, maximum cores and the executor limit.
// DefaultCores caps an application that sets no maximum. An application with
// no executor gets a message saying why: no alive workers, more than any worker
// has, or waiting for free resources. A RUNNING application that lost all its
// executors and gets none it wants is WAITING again.
//
// An executor that ends without being asked to is a failure, exit code 0
// included; the ends the application asked for are those after its driver
// released its executors, and those of a decommissioned worker. After
// maxExecutorRetries failures in a row with none RUNNING the application is
// FAILED. After each failure the application gets no new executor for a
// while: one second, doubling for each executor in a row that failed before
// it had run five seconds, at most a minute.
//
// A LaunchExecutor that got no answer may have reached the worker, so it is
// sent again while the executor is LAUNCHING. The worker refuses an executor id
// it launched already (AlreadyExists), which the master takes as launched: an
// executor never runs twice. A worker that refuses for want of free resources
// (it is still reaping an ended application's executors) gets the launch again
// a bounded number of times; any other refusal makes a FAILED executor.
// LaunchDriver is sent again in the same way; a driver launch that certainly
// started nothing, and any failed launch of a supervised driver, puts the
// driver back among the waiting after the same backoff, and any other refusal
// ends an unsupervised driver in ERROR.
//
// Dynamic allocation: RequestExecutors sets an application's executor limit,
// which schedule honours; KillExecutors kills the named executors and forgets
// them at once.
//
// # Decommissioning
//
// A worker that is stopping, or was sent SIGPWR, says so with
// WorkerDecommissioning; an operator does the same with `glint decommission`.
// The worker becomes DECOMMISSIONED and gets nothing more. Its executors become
// DECOMMISSIONED, their drivers are told, and their cores and places under the
// executor limit are released at once, so replacements can be placed
// elsewhere. The worker then gets DecommissionWorker, after every launch sent
// to it before. The executors stay listed until the worker reports their ends,
// which do not count as failures.
//
// # Ends
//
// A driver unregisters its application FINISHED, FAILED (with its error) or
// KILLED. A cluster-mode application whose driver ends first ends as the driver
// did (appEndOf). An application its driver unregistered FINISHED while that
// driver still runs is unconfirmed until the driver ends: a driver that then
// fails turns it FAILED, the one change of a final state. The master probes each
// application's driver with Ping, carrying the application's id and the token
// the driver gave the master; an application whose driver has not answered for
// a worker timeout is FAILED. Completed applications and drivers are retained
// up to RetainedApplications, RetainedDrivers and RetainedBytes.
//
// # Recovery and high availability
//
// With a Store (--recovery-mode file or etcd) every state change is kept by
// the keeper (keep.go) with the lock released: a change names the record it
// changed, and the keeper writes each record named, as it is then, once per
// batch and runs under the lock what waited for it. A launch is sent, and a
// registration or submission admitted and answered, only once kept; a call
// that changed kept state is answered after its writes; a heartbeat never
// waits on the store. Executors are not kept: the workers report them. A
// failed write refuses a registration or submission (Unavailable) and holds a
// launch back; other changes stand and are written again, as they are then, at
// every check until kept (keepUnkept). A registration repeated with the same
// application token and driver URL gets the application it made, and a
// SubmitDriver repeating a submission id gets the driver it made, so a lost
// answer never makes two.
//
// A master whose store kept active work starts RECOVERING: it lists the kept
// workers and applications UNKNOWN, tells each worker and driver MasterChanged,
// and adopts what the workers report when they register again. Recovery
// completes once every kept worker and driver answered or is known to be gone,
// or after a worker timeout: the silent ones are removed, a driver whose worker
// did not come back ends as on a lost worker (relaunched if supervised), and
// each driver is told which of its executors were found. Meanwhile the master schedules nothing and
// refuses new applications and drivers.
//
// Under HA each master stands for election in etcd. A standby answers every
// MasterService call Unavailable before any token check, so the caller tries
// the next master, and names the leader only to a token it accepts. The elected
// master's epoch is its election revision. It answers as the leader only while
// its lease is held (store.Lease.Held, checked on every request), and steps
// down when its session ends. Each etcd write is a transaction fenced on the
// election key's revision: a write etcd refuses, or fails to make, deposes the master. Every
// command to a worker or driver carries the epoch, and they refuse one older
// than the newest they saw. GET /readyz is 200 only on the leading master.
package master
