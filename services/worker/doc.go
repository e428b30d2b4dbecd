// Package worker is Glint's Worker: it registers with a master, heartbeats, and
// runs the executors and cluster-mode drivers the master places on it as real
// operating-system processes, reporting their states back as Spark's standalone
// Worker does.
//
// # Files
//
//   - worker.go: Config, Server, New, Handler and Run; the reports to the master.
//   - register.go: registration, heartbeats, and which master is active.
//   - handlers.go: validation, then one start and one kill over the runner, and
//     MasterChanged; the epoch fence.
//   - runner.go: one runner for executors and drivers, in the manner of Nomad's
//     task runner: the launch steps, the poststart hook, and the exit phase.
//   - executor_runner.go, driver_runner.go: each kind's launch spec and hooks.
//   - state.go: each kind's states and transition table, as data.
//   - step_command.go, step_cgroup.go, step_workdir.go, step_logs.go,
//     step_start.go, step_report.go: the named launch steps, one file each.
//   - users.go: the uids processes run as, their work dirs, the secret files
//     checked at start.
//   - process.go: exit status, and the kill of a process group with a grace period.
//   - finals.go: final states no master acknowledged yet.
//   - launched.go: the executor ids launched per application, so a resent
//     launch is refused rather than run twice.
//   - prestart.go: idle executor processes kept ready for launches to claim.
//   - spare.go: work directories made ahead of their launch.
//   - decommission.go: SIGPWR's Decommission and the master's DecommissionWorker.
//   - cleanup.go: Spark's WorkDirCleanup.
//   - usage.go: what each executor's and driver's process tree uses.
//   - json.go, metrics.go, ui.go: /json in the shape of Spark's worker JSON,
//     metrics, and the worker's page and log pages.
//
// # Masters
//
// The worker registers with each of its masters in turn until one accepts it,
// on Spark's schedule: six retries at RegisterInterval, ten more at six times
// it, each jittered; then Run returns an error. The master that accepted it is
// the active one. The worker obeys commands only from the active master, by
// the URL that master names itself by, and reaches it at the URL its
// registration went to. A command that arrives while a registration is in
// flight waits for it. MasterChanged selects one of the masters the worker was
// given and never adds one, so the cluster token goes nowhere else.
//
// Heartbeats go at the interval the master names. Three failures in a row, a
// NotFound, or an answer asking it to register make the worker register again.
// Registrations and heartbeats list what the worker runs and carry the final
// states no master acknowledged yet; heartbeats also carry the measured usage.
// The worker kills what the master answers it does not know. Calls to the
// masters go over HTTP/1.1 (rpc.NewHTTP1Client).
//
// Every command carries the master's epoch; the worker refuses one older than
// the newest it saw (a deposed leader). It refuses a launch while it last heard
// from its master more than two heartbeat intervals ago, since the master may
// have declared it lost and placed the launch elsewhere; it also refuses a
// launch of an earlier registration, one that arrives once it is
// decommissioned or while it shuts down, an executor or driver id it launched
// already (AlreadyExists), and one it has no free cores or memory for.
//
// # Launches
//
// LaunchExecutor and LaunchDriver reserve the cores and memory, answer at once,
// and start a runner. A launch runs these steps in order, each in a span named
// after it, and stops at the first that fails; only process.start or handover
// starts a process, so a failed launch leaves nothing running:
//
//   - command: the argument vector from the template, whose variables are
//     substituted argument by argument, never through a shell; the environment
//     is the worker's, then GOMAXPROCS set to the process's cores, then the
//     command's own, then the GLINT_* variables.
//   - claim, when a prestarted executor fits: it is handed its launch.
//   - cgroup, on a contained worker: the process's cgroup under the worker's;
//     a claimed executor's own, made with it, becomes the launch's while it
//     takes its claim, before the handover lets it register.
//   - workdir: <work-dir>/<app-id>/<executor-id> or <work-dir>/<driver-id>,
//     taken from the spare or the claimed process when one is ready; its
//     user's alone when processes run as users of their own.
//   - logs: stdout and stderr, headed by the command with secrets redacted;
//     never a link or FIFO its user put in their place.
//   - process.start: fork and exec in the process's own process group and
//     work directory, stdin from /dev/null, with the parent-death signal set,
//     in its cgroup on a contained worker, as its user (users.go). An
//     executor gets its listening socket as file descriptor 3; each process
//     gets its secrets in a pipe,
//     never in its environment or arguments, and the launch's trace context in
//     TRACEPARENT. For a claimed executor this step is handover: it sends the
//     log files.
//   - report: the process runs; an executor is reported RUNNING with its URL (a
//     claimed one once it registered with its driver). A driver's RUNNING is
//     not reported: the master shows it RUNNING from its launch.
//
// The exit phase waits for the process in a process.wait span, a trace of its
// own linked to the launch. A killed process's group gets SIGTERM, then
// SIGKILL after KillGrace; what is left of the group once the process ended is
// killed too. A supervised driver that fails, or whose launch fails, is
// restarted under its own id (RESTARTING, which only the worker shows) after a
// backoff: one second, doubling after each quick failure, capped by
// SuperviseBackoffCap. Otherwise the runner records the final state, frees the
// cores and memory, and reports it.
//
// # Final states
//
// Each final state is kept, in the same critical section that takes the process
// out of the running table, until a master answers its report or a
// registration or heartbeat that carried it (finals.go). An end that happened
// while no master could hear it still reaches the next one. At most
// resources.MaxUnackedFinals are kept; past that the oldest is dropped, with a
// warning.
//
// # Prestarted executors and spare directories
//
// With PrestartExecutors the worker keeps idle processes of its own binary's
// executor command (child.ExecutorCommand) waiting for a claim on a channel
// only it and that process hold. A launch claims one when its command is that
// executor command and sets no environment of its own. Each serves one claim; a
// replacement starts once the claimed executor registered or ended. The worker
// also keeps one spare work directory, with its log files open, which the next
// launch that starts a process renames into place instead of making them.
//
// # Containment, usage and cleanup
//
// On a contained worker (Config.Cgroup) each executor and driver runs in a
// cgroup of its own, limited to its granted memory plus contain.MemoryLimit's
// overhead, its cores (Config.CPULimit) and Config.PidsLimit processes. The
// exit phase reads the cgroup, so an OOM kill ends the process with a message
// that says so, and removes it. Where no writable hierarchy exists the worker
// says so once and runs its processes unconfined.
//
// A worker started as root (Config.ExecutorUsers) runs each application's
// executors as a uid of their own and each driver as another (users.go):
// no group besides its own, a work dir only it reads, taken back when its
// owner's last process ends, and none of the worker's files readable. A
// prestarted executor drops from root to its uid as it takes its claim.
// Otherwise processes run as the worker's user, which it says at start.
//
// Every UsageInterval the worker measures, outside its lock, the CPU time,
// memory and peak of each running process: its cgroup's on a contained
// worker (memory then counts its page cache, as its limit does), else its
// process tree's resident memory (usageSource, which reads /proc); it sends
// them with its heartbeats.
//
// Every CleanupInterval the worker removes, inside an os.Root of its work dir
// and without following links, the directories named by application or
// driver ids it does not run that hold nothing modified within CleanupTTL. A
// directory is first renamed .removing-<id> under the worker's lock, so no
// launch of that id can race its removal; leftovers go the next time.
//
// # Stopping
//
// Decommission (glint worker calls it on SIGPWR) and the master's
// DecommissionWorker make the worker take no new launches, while what it runs
// goes on; Decommission tells the master first. A decommissioned worker says so
// again after each registration. When Run ends (its context ended, or
// registration gave up) the worker tells the master it is decommissioning,
// kills every executor and driver, waits until all are reaped, removes its
// cgroup, prestarted processes and spare, and waits a bounded time for their
// final reports to reach the master.
package worker
