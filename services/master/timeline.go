package master

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/fault"
	"github.com/glint-cluster/glint/pkg/ids"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// launchTimes are the steps of an executor's launch after the master
// scheduled it: launched and started as its worker reported them, the rest
// as its driver did (ReportExecutorLaunch), booted as the executor told its
// driver. Zero is not (yet) known.
type launchTimes struct {
	launched, started, booted, propsRetrieved, registered, firstTask time.Time
}

// maxClockSkew is how far from the master's clock a reported launch time
// may be: another host's clock may be off, not by a day.
const maxClockSkew = 24 * time.Hour

// plausible is whether t is a time within maxClockSkew of the master's now.
func (s *Server) plausible(t *timestamppb.Timestamp) bool {
	if !t.IsValid() {
		return false
	}
	d := s.now().Sub(t.AsTime())
	return d > -maxClockSkew && d < maxClockSkew
}

// fromWorker keeps the worker's launch timestamps from a state report, those
// that are plausible (its report is taken whatever they are).
func (l *launchTimes) fromWorker(s *Server, t *executorTimes) {
	if t == nil {
		return
	}
	if s.plausible(t.launched) {
		l.launched = when(t.launched)
	}
	if s.plausible(t.started) {
		l.started = when(t.started)
	}
}

// when is t as a time, zero when t is nil.
func when(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

// stamp is t as a timestamp, nil when t is zero.
func stamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// ReportExecutorLaunch keeps the driver's times of one executor's launch. The
// report may arrive after the application ended (the driver posts it while
// its application finishes), so ended applications' executors take it too.
func (s *Server) ReportExecutorLaunch(ctx context.Context, req *connect.Request[masterv1.ReportExecutorLaunchRequest]) (*connect.Response[masterv1.ReportExecutorLaunchResponse], error) {
	m := req.Msg
	if err := ids.ValidateApp(m.GetAppId()); err != nil {
		return nil, rpc.Error(err)
	}
	if err := ids.ValidateExecutor(m.GetExecutorId()); err != nil {
		return nil, rpc.Error(err)
	}
	times := []*timestamppb.Timestamp{m.GetPropsRetrievedAt(), m.GetRegisteredAt(), m.GetFirstTaskAt(), m.GetBootedAt()}
	for i, name := range []string{"props_retrieved_at", "registered_at", "first_task_at", "booted_at"} {
		if times[i] != nil && !s.plausible(times[i]) {
			return nil, rpc.Error(fmt.Errorf("report executor launch %s/%d: %w: %s is not a time within %s of the master's clock",
				m.GetAppId(), m.GetExecutorId(), fault.ErrInvalidArgument, name, maxClockSkew))
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.anyExecutorLocked(m.GetAppId(), m.GetExecutorId())
	if e == nil {
		return nil, rpc.Error(fmt.Errorf("executor %s/%d: %w", m.GetAppId(), m.GetExecutorId(), fault.ErrNotFound))
	}
	if err := s.callerLocked(ctx).mayActOnApp("report on", e.app); err != nil {
		return nil, rpc.Error(err)
	}
	e.launch.propsRetrieved, e.launch.registered, e.launch.firstTask, e.launch.booted = when(times[0]), when(times[1]), when(times[2]), when(times[3])
	return connect.NewResponse(&masterv1.ReportExecutorLaunchResponse{}), nil
}

// anyExecutorLocked finds an executor of an active or completed application,
// running or ended; nil if none.
func (s *Server) anyExecutorLocked(appID string, id int32) *executorInfo {
	a := s.anyAppLocked(appID)
	if a == nil {
		return nil
	}
	if e, ok := a.executors[id]; ok {
		return e
	}
	for _, e := range a.removed {
		if e.id == id {
			return e
		}
	}
	return nil
}

// anyAppLocked finds an active or completed application; nil if none.
func (s *Server) anyAppLocked(id string) *appInfo {
	if a, ok := s.apps[id]; ok {
		return a
	}
	for _, a := range s.completedApps.items {
		if a.id == id {
			return a
		}
	}
	return nil
}
