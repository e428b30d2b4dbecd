package worker

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	workerv1 "github.com/glint-cluster/glint/pkg/api/glint/worker/v1"
	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/telemetry"
)

// Spark's --supervise restart policy (DriverRunner): wait 1s before the first
// restart and double the wait after each quick failure; a run that lasted
// longer than healthyRun resets the wait to 1s. Glint caps the wait.
const (
	firstRestartWait = time.Second
	healthyRun       = 5 * time.Second
)

// restartWait returns how long to wait before restarting a supervised driver
// that failed after running for ran, given the wait before its previous
// restart (0 if it has not been restarted).
func restartWait(prev, ran, limit time.Duration) time.Duration {
	next := 2 * prev
	if prev == 0 || ran > healthyRun {
		next = firstRestartWait
	}
	return min(next, limit)
}

// driverRunner runs one cluster-mode driver (Spark's DriverRunner), restarted
// when it is supervised and fails. Only its final state is reported to the
// master, which shows it RUNNING from the moment it launched it.
type driverRunner struct {
	runner[masterv1.DriverState]
	id   string
	desc *masterv1.DriverDescription
}

var _ hooks[masterv1.DriverState] = (*driverRunner)(nil)

// newDriverRunner prepares a runner for a validated LaunchDriver request.
func (s *Server) newDriverRunner(ctx context.Context, m *workerv1.LaunchDriverRequest) *driverRunner {
	id, desc := m.GetDriverId(), m.GetDescription()
	dir := filepath.Join(s.cfg.WorkDir, id)
	r := &driverRunner{id: id, desc: desc}
	r.runner = runner[masterv1.DriverState]{
		kind: &driverKind, hooks: r,
		what:  "driver " + id,
		log:   s.log.With("driver", id),
		cores: desc.GetCores(), memoryMiB: desc.GetMemoryMib(), supervise: desc.GetSupervise(),
		spec: launch{
			dir:      dir,
			template: desc.GetCommand(),
			defaults: coresEnv(desc.GetCores()),
			vars:     map[string]string{child.VarDriverID: id, child.VarWorkerURL: s.cfg.URL},
			env: append(child.WorkerEnv(childTLS(s.cfg)),
				child.WorkDirEnv+"="+dir,
				child.DriverIDEnv+"="+id,
				child.WorkerURLEnv+"="+s.cfg.URL,
			),
			secrets:    child.Secrets{SubmitToken: m.GetSubmitToken()},
			now:        s.cfg.Now,
			redaction:  s.cfg.Redaction,
			spare:      s.spare,
			cgroups:    s.cgroups,
			cgroupName: id,
			owner:      id,
			limits:     s.limits(desc.GetCores(), desc.GetMemoryMib()),
			attrs: []attribute.KeyValue{
				telemetry.DriverID.String(id), telemetry.WorkerID.String(s.id),
				telemetry.Cores.Int(int(desc.GetCores())), telemetry.MemoryMiB.Int64(desc.GetMemoryMib()),
			},
		},
	}
	r.init(ctx, s)
	return r
}

// addLocked refuses a driver id that runs here or ran here (a launch the
// master sent again, not knowing the first had arrived).
func (r *driverRunner) addLocked() bool {
	if _, dup := r.s.drivers[r.id]; dup || slices.ContainsFunc(r.s.finishedDrivers, func(o *driverRunner) bool { return o.id == r.id }) {
		return false
	}
	r.s.drivers[r.id] = r
	return true
}

func (r *driverRunner) removeLocked(ended bool) {
	delete(r.s.drivers, r.id)
	if ended {
		r.s.finishedDrivers = retain(r.s.finishedDrivers, r)
	}
}

// poststart does nothing: the master is not told a driver runs.
func (r *driverRunner) poststart(context.Context, *launch) {}

// endedLocked keeps the driver's final state until a master acknowledges
// it, and returns its report.
func (r *driverRunner) endedLocked(state masterv1.DriverState, message string, _ *int32) func(context.Context) {
	req := &masterv1.DriverStateChangedRequest{DriverId: r.id, State: state, Message: message, WorkerId: r.s.id}
	r.s.keepLocked(r.what, r.s.finals.addDriver(req))
	return func(ctx context.Context) {
		r.s.report(ctx, fmt.Sprintf("%s %s", r.what, lifecycle.Name(state)), func(ctx context.Context, c masterv1connect.MasterServiceClient) error {
			_, err := c.DriverStateChanged(ctx, connect.NewRequest(req))
			return err
		}, func() { r.s.finals.ackDriver(req) })
	}
}
