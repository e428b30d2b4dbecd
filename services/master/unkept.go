package master

import (
	"maps"
	"slices"
	"strings"
)

// keepUnkept writes again what the Store refused to keep: each thing as it
// is now, so a change the master then undid (a registration it refused, an
// executor it did not launch) is kept as undone, and what ended since is
// kept ended or deleted. A master that no longer leads keeps nothing.
func (s *Server) keepUnkept() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.status == statusDeposed {
		return
	}
	for _, what := range slices.Sorted(maps.Keys(s.unkept)) {
		if s.keepLocked(what) != nil {
			return
		}
	}
}

// keepLocked writes what persist names by what ("worker ID", "application
// ID", "driver ID", "counters") as the master holds it now.
func (s *Server) keepLocked(what string) error {
	kind, id, _ := strings.Cut(what, " ")
	switch kind {
	case "worker":
		if w, ok := s.workers.alive(id); ok {
			return s.persistWorkerLocked(w)
		}
		return s.forgetWorkerLocked(&workerInfo{id: id})
	case "application":
		if a, ok := s.apps[id]; ok {
			return s.persistAppLocked(a)
		}
		if i := slices.IndexFunc(s.completedApps.items, func(a *appInfo) bool { return a.id == id }); i >= 0 {
			return s.persistCompletedAppLocked(s.completedApps.items[i])
		}
		return s.forgetAppLocked(&appInfo{id: id})
	case "driver":
		if d, ok := s.drivers[id]; ok {
			return s.persistDriverLocked(d)
		}
		if i := slices.IndexFunc(s.completedDrivers.items, func(d *driverInfo) bool { return d.id == id }); i >= 0 {
			return s.persistCompletedDriverLocked(s.completedDrivers.items[i])
		}
		return s.forgetDriverLocked(&driverInfo{id: id})
	}
	return s.persistCountersLocked()
}
