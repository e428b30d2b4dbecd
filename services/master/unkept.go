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
		if a, ok := s.completedApps.find(func(a *appInfo) bool { return a.id == id }); ok {
			return s.persistCompletedAppLocked(a)
		}
		return s.forgetAppLocked(&appInfo{id: id})
	case "driver":
		if d, ok := s.drivers[id]; ok {
			return s.persistDriverLocked(d)
		}
		if d, ok := s.completedDrivers.find(func(d *driverInfo) bool { return d.id == id }); ok {
			return s.persistCompletedDriverLocked(d)
		}
		return s.forgetDriverLocked(&driverInfo{id: id})
	}
	return s.persistCountersLocked()
}
