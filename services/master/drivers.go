package master

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/ids"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry"
)

// submitDriverLocked queues a validated driver (Spark's RequestSubmitDriver)
// of owner for the client's submission id (empty: none) once it is kept
// with it; kept then runs, under mu, with the write's outcome.
func (s *Server) submitDriverLocked(ctx context.Context, desc *masterv1.DriverDescription, owner, submission string, kept func(*driverInfo, error)) *driverInfo {
	now := s.now()
	d := &driverInfo{
		id: ids.Driver(now, s.nextDriverNumber), desc: desc, size: proto.Size(desc), owner: owner, submission: submission,
		state: masterv1.DriverState_DRIVER_STATE_SUBMITTED, submitTime: now, trace: telemetry.Caller(ctx),
	}
	if s.cfg.Tokens != nil {
		// The driver registers its application with a submit token of its
		// own, which acts only on that driver and its applications.
		d.submitToken = rpc.NewToken()
	}
	s.nextDriverNumber++
	// The driver is queued once kept: a master that leads next knows every
	// driver a client was told it has.
	s.pendingDrivers[d.id] = d
	s.activeBytes += d.size
	s.keepLocked("counters")
	s.keepLocked("driver "+d.id, func(err error) {
		delete(s.pendingDrivers, d.id)
		if err != nil {
			s.activeBytes -= d.size
			kept(d, fmt.Errorf("submit driver: %w", err))
			return
		}
		if d.submitToken != "" {
			s.cfg.Tokens.AddNamed(rpc.Submit, d.id, d.submitToken)
		}
		s.drivers[d.id] = d
		s.waitingDrivers = append(s.waitingDrivers, d)
		s.log.InfoContext(ctx, "submitted driver", "driver", d.id, "name", desc.GetName())
		trace.SpanFromContext(ctx).SetAttributes(telemetry.DriverID.String(d.id))
		s.needSchedule = true
		kept(d, nil)
	})
	return d
}

// launchDriverLocked is Spark's launchDriver: d runs on w, which gets
// LaunchDriver — once the store keeps d as placed on w. A launch the store
// did not keep is not sent (d waits again, backing off): the master that
// leads next would find d waiting and launch it a second time.
func (s *Server) launchDriverLocked(ctx context.Context, w *workerInfo, d *driverInfo) {
	s.log.InfoContext(ctx, "launching driver", "driver", d.id, "worker", w.id)
	trace.SpanFromContext(ctx).AddEvent("driver placed", trace.WithAttributes(telemetry.WorkerID.String(w.id)))
	w.addDriver(d)
	if err := d.setState(masterv1.DriverState_DRIVER_STATE_RUNNING); err != nil {
		s.log.Warn("launch driver", "err", err)
	}
	d.message = ""
	s.waitingDrivers = slices.DeleteFunc(s.waitingDrivers, func(o *driverInfo) bool { return o == d })
	s.keepLocked("driver "+d.id, func(err error) {
		if d.worker != w || d.state != masterv1.DriverState_DRIVER_STATE_RUNNING || s.drivers[d.id] != d {
			return // ended or moved before its launch was kept: it was not sent
		}
		if err != nil {
			s.requeueDriverLocked(ctx, d, fmt.Sprintf("its launch on worker %s could not be kept for recovery: %v", w.id, err))
			return
		}
		s.sendLaunchDriver(s.startDriverSpanLocked(ctx, w, d), w, d)
	})
}

// requeueDriverLocked puts d, whose launch failed, back among the waiting
// drivers: it is placed again (on any worker) once its backoff — relaunchWait
// of its failed launches in a row, as an application's executors back off —
// is over.
func (s *Server) requeueDriverLocked(ctx context.Context, d *driverInfo, reason string) {
	if err := d.setState(masterv1.DriverState_DRIVER_STATE_SUBMITTED); err != nil {
		s.log.Warn("requeue driver", "err", err)
		return
	}
	d.worker.removeDriver(d)
	d.worker = nil
	d.launchFailures++
	wait := relaunchWait(d.launchFailures)
	d.relaunchAfter = s.now().Add(wait)
	d.message = fmt.Sprintf("%s; launching it again in %s", reason, wait)
	endDriverSpanLocked(d, masterv1.DriverState_DRIVER_STATE_SUBMITTED, d.message)
	s.log.InfoContext(ctx, "driver back among the waiting", "driver", d.id, "reason", reason, "in", wait)
	s.keepLocked("driver " + d.id)
	s.waitingDrivers = append(s.waitingDrivers, d)
	time.AfterFunc(wait, s.wake)
	s.needSchedule = true
}

// lostDriverLocked ends d, whose worker was lost (why: reason): FINISHED if
// its application finished (the driver unregistered it, so its work is done,
// though its process was lost before it exited: it is not run again);
// else relaunched under a new id if supervised (SPARK-19900), ERROR if not.
func (s *Server) lostDriverLocked(ctx context.Context, d *driverInfo, reason string) {
	switch {
	case s.appFinishedBy(d):
		s.removeDriverLocked(ctx, d, masterv1.DriverState_DRIVER_STATE_FINISHED,
			fmt.Sprintf("its application had finished when %s", reason))
	case d.desc.GetSupervise():
		s.relaunchDriverLocked(ctx, d)
	default:
		s.removeDriverLocked(ctx, d, masterv1.DriverState_DRIVER_STATE_ERROR, reason)
	}
}

// appFinishedBy reports whether d's application ended FINISHED, and none of
// d's is still active.
func (s *Server) appFinishedBy(d *driverInfo) bool {
	for _, a := range s.appQueue {
		if a.driverID == d.id {
			return false
		}
	}
	for _, a := range s.completedApps.items {
		if a.driverID == d.id && a.state == masterv1.ApplicationState_APPLICATION_STATE_FINISHED {
			return true
		}
	}
	return false
}

// relaunchDriverLocked restarts a supervised driver under a new id (SPARK-19900).
// d ends once its relaunch is kept (or could not be).
func (s *Server) relaunchDriverLocked(ctx context.Context, d *driverInfo) {
	s.submitDriverLocked(telemetry.ContextWithSpanContextOf(ctx, d.trace), d.desc, d.owner, "", func(n *driverInfo, err error) {
		switch {
		case s.drivers[d.id] != d:
		case err != nil:
			s.removeDriverLocked(ctx, d, masterv1.DriverState_DRIVER_STATE_ERROR, fmt.Sprintf("its worker was lost and it could not be relaunched: %v", err))
		default:
			d.relaunchedAs = n.id
			s.removeDriverLocked(ctx, d, masterv1.DriverState_DRIVER_STATE_RELAUNCHING, fmt.Sprintf("its worker was lost; relaunched as %s", n.id))
		}
	})
}

// removeDriverLocked is Spark's removeDriver; apps the driver registered end with it.
func (s *Server) removeDriverLocked(ctx context.Context, d *driverInfo, state masterv1.DriverState, message string) {
	if err := d.setState(state); err != nil {
		s.log.Warn("remove driver", "err", err)
		return
	}
	s.log.Info("removing driver", "driver", d.id, "state", state.String(), "message", message)
	endDriverSpanLocked(d, state, message)
	if d.submitToken != "" {
		s.cfg.Tokens.Remove(rpc.Submit, d.submitToken)
	}
	d.message = message
	delete(s.drivers, d.id)
	s.waitingDrivers = slices.DeleteFunc(s.waitingDrivers, func(o *driverInfo) bool { return o == d })
	s.activeBytes -= d.size
	dropped := s.completedDrivers.add(d, proto.Size(s.driverProto(d)), s.cfg.RetainedDrivers, s.cfg.RetainedBytes)
	d.endUnkept = true
	s.keepLocked("driver "+d.id, func(err error) {
		if err == nil {
			d.endUnkept = false
		}
	})
	for _, o := range dropped {
		s.keepLocked("driver " + o.id)
	}
	if d.worker != nil {
		d.worker.removeDriver(d)
	}
	s.metrics.driverEnded(state)
	appState, appMessage := appEndOf(d)
	for _, a := range s.apps {
		if a.driverID == d.id {
			s.removeApplicationLocked(ctx, a, appState, appMessage)
		}
	}
	for _, a := range s.unconfirmed[d.id] {
		s.confirmAppEndLocked(a, d)
	}
	delete(s.unconfirmed, d.id)
	s.needSchedule = true
}

// appEndOf is how an application ends with its driver d, which ended
// without unregistering it: FINISHED or KILLED as d did, FAILED when d
// failed, ended in ERROR or was relaunched, with d's end as the reason.
func appEndOf(d *driverInfo) (masterv1.ApplicationState, string) {
	why := fmt.Sprintf("its driver %s ended %s", d.id, lifecycle.Name(d.state))
	if d.message != "" {
		why += ": " + d.message
	}
	switch d.state {
	case masterv1.DriverState_DRIVER_STATE_FINISHED:
		return masterv1.ApplicationState_APPLICATION_STATE_FINISHED, why
	case masterv1.DriverState_DRIVER_STATE_KILLED:
		return masterv1.ApplicationState_APPLICATION_STATE_KILLED, why
	}
	return masterv1.ApplicationState_APPLICATION_STATE_FAILED, why
}

// confirmAppEndLocked settles the end of a, which d unregistered FINISHED,
// now that d ended: a driver that then failed (it exited non-zero, say
// after an error its program printed) fails a too. a is counted once, here.
func (s *Server) confirmAppEndLocked(a *appInfo, d *driverInfo) {
	state, why := appEndOf(d)
	if state == masterv1.ApplicationState_APPLICATION_STATE_FAILED && d.state != masterv1.DriverState_DRIVER_STATE_RELAUNCHING {
		if err := a.setState(state); err != nil {
			s.log.Warn("fail application after its driver", "err", err)
		} else {
			a.statusMessage = why + " after it unregistered the application"
			if a.shown != nil {
				a.shown = proto.CloneOf(a.shown)
				a.shown.State, a.shown.StatusMessage = a.state, a.statusMessage
			}
			s.log.Info("application failed with its driver", "app", a.id, "driver", d.id, "message", a.statusMessage)
			if slices.Contains(s.completedApps.items, a) {
				s.keepLocked("application " + a.id)
			}
		}
	}
	s.metrics.appEnded(a.state)
}

// driverEndKeptLocked returns, for driver id whose end the Store has not kept
// yet, the outcome of keeping it (its write asked for again); nil when there
// is nothing to wait for. A final state is shown and a worker's report of it
// answered only once kept: a master that then stops leading before keeping
// it would leave the next leader the driver as it was before its end — lost
// with its worker, in ERROR, after a client was told FINISHED.
func (s *Server) driverEndKeptLocked(id string) <-chan error {
	d := s.completedDriverLocked(id)
	if d == nil || !d.endUnkept {
		return nil
	}
	kept := make(chan error, 1)
	s.keepLocked("driver "+id, func(err error) {
		if err == nil {
			d.endUnkept = false
		}
		kept <- err
	})
	return kept
}
