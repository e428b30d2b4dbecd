package worker

import (
	"slices"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/resources"
)

// unacked are the final states of the worker's executors and drivers that
// no master has acknowledged yet. Each end is reported as it happens and kept
// until a master answers that report, or a registration or heartbeat that
// carried it: an end that happened while no master could hear it (the master
// down, recovering, or not yet elected) still reaches the next one, which
// applies what it did not know and ignores what it did — so a finished driver
// is never taken for lost and run again. Guarded by the Server's mu.
type unacked struct {
	executors []*masterv1.ExecutorStateChangedRequest
	drivers   []*masterv1.DriverStateChangedRequest
}

// addExecutor keeps an executor's final state until it is acknowledged.
func (u *unacked) addExecutor(r *masterv1.ExecutorStateChangedRequest) bool {
	var dropped bool
	u.executors, dropped = keep(u.executors, r, resources.MaxUnackedFinals-len(u.drivers))
	return dropped
}

// addDriver keeps a driver's final state until it is acknowledged.
func (u *unacked) addDriver(r *masterv1.DriverStateChangedRequest) bool {
	var dropped bool
	u.drivers, dropped = keep(u.drivers, r, resources.MaxUnackedFinals-len(u.executors))
	return dropped
}

// keep appends r to list, dropping the oldest entry when the list would
// exceed limit (at least one is kept); it reports whether one was dropped.
func keep[T any](list []T, r T, limit int) ([]T, bool) {
	if len(list) >= max(limit, 1) {
		return append(slices.Delete(list, 0, 1), r), true
	}
	return append(list, r), false
}

// ackExecutor forgets r: a master acknowledged it.
func (u *unacked) ackExecutor(r *masterv1.ExecutorStateChangedRequest) {
	u.executors = slices.DeleteFunc(u.executors, func(o *masterv1.ExecutorStateChangedRequest) bool { return o == r })
}

// ackDriver forgets r: a master acknowledged it.
func (u *unacked) ackDriver(r *masterv1.DriverStateChangedRequest) {
	u.drivers = slices.DeleteFunc(u.drivers, func(o *masterv1.DriverStateChangedRequest) bool { return o == r })
}

// snapshot is what a registration or heartbeat carries now.
func (u *unacked) snapshot() ([]*masterv1.ExecutorStateChangedRequest, []*masterv1.DriverStateChangedRequest) {
	return slices.Clone(u.executors), slices.Clone(u.drivers)
}

// ack forgets what an answered registration or heartbeat carried.
func (u *unacked) ack(executors []*masterv1.ExecutorStateChangedRequest, drivers []*masterv1.DriverStateChangedRequest) {
	u.executors = slices.DeleteFunc(u.executors, func(o *masterv1.ExecutorStateChangedRequest) bool { return slices.Contains(executors, o) })
	u.drivers = slices.DeleteFunc(u.drivers, func(o *masterv1.DriverStateChangedRequest) bool { return slices.Contains(drivers, o) })
}
