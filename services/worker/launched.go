package worker

import (
	"maps"
	"slices"
)

// Bounds of launchedIDs: a retried launch comes within seconds of the first,
// so forgetting the oldest of many ids costs nothing.
const (
	maxLaunchedApps   = 1024
	maxLaunchedPerApp = 4096
)

// launchedIDs are the executor ids launched on this worker, by application,
// until the application finishes.
type launchedIDs map[string]map[int32]struct{}

// add records key, or reports false when it was launched here already.
// Beyond its bounds it forgets the applications that run nothing here, and
// an application's oldest id.
func (l launchedIDs) add(key executorKey, running map[executorKey]*executorRunner) bool {
	ids, ok := l[key.app]
	if _, dup := ids[key.id]; dup {
		return false
	}
	if !ok {
		if len(l) >= maxLaunchedApps {
			l.forgetIdle(running)
		}
		ids = map[int32]struct{}{}
		l[key.app] = ids
	}
	if len(ids) >= maxLaunchedPerApp {
		delete(ids, slices.Min(slices.Collect(maps.Keys(ids))))
	}
	ids[key.id] = struct{}{}
	return true
}

// forget drops an application's ids: it finished.
func (l launchedIDs) forget(app string) { delete(l, app) }

// forgetIdle drops the applications that run no executor here.
func (l launchedIDs) forgetIdle(running map[executorKey]*executorRunner) {
	busy := map[string]bool{}
	for key := range running {
		busy[key.app] = true
	}
	maps.DeleteFunc(l, func(app string, _ map[int32]struct{}) bool { return !busy[app] })
}
