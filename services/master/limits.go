package master

import (
	"fmt"
	"slices"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/fault"
	"github.com/glint-cluster/glint/pkg/resources"
)

// How much state peers may make the master keep. What one request may ask
// for is bounded by pkg/resources' limits; these bound how many requests the
// master keeps the results of.
const (
	// MaxWorkers is the most workers the master lists, DEAD ones included.
	MaxWorkers = 10_000
	// MaxActiveApps and MaxActiveDrivers bound the applications and drivers
	// that have not ended; MaxActiveBytes bounds their descriptions together.
	MaxActiveApps    = 1_000
	MaxActiveDrivers = 1_000
	MaxActiveBytes   = 64 << 20
	// MaxMessageBytes is the longest state message a worker's report may
	// leave in the master's state; a longer one is clipped.
	MaxMessageBytes = 4 << 10
	// MaxExecutorLimit is the most executors an application may ask for
	// (RequestExecutors, its initial limit): each executor holds a core, and
	// no cluster of MaxWorkers has more cores than this.
	MaxExecutorLimit = MaxWorkers * resources.MaxCores
	// maxRemovedExecutors is how many ended executors an application keeps listed.
	maxRemovedExecutors = 1_000
	// defaultRetainedBytes bounds each completed list by size (Config.RetainedBytes).
	defaultRetainedBytes = 32 << 20
)

// admitLocked refuses a new application or driver (kind, with active already
// active) of size bytes when the master keeps as many as it may.
func (s *Server) admitLocked(kind string, active, limit, size int) error {
	switch s.status {
	case statusRecovering:
		return s.errRecovering(kind)
	case statusDeposed:
		return fmt.Errorf("%s: %w: this master no longer leads; another master does", kind, fault.ErrUnavailable)
	}
	if active >= limit {
		return fmt.Errorf("%s: %w: %d are active, the limit is %d", kind, fault.ErrResourceExhausted, active, limit)
	}
	if s.activeBytes+size > MaxActiveBytes {
		return fmt.Errorf("%s: %w: active applications and drivers hold %d bytes, the limit is %d",
			kind, fault.ErrResourceExhausted, s.activeBytes, MaxActiveBytes)
	}
	return nil
}

// clip shortens a peer's message to MaxMessageBytes.
func clip(msg string) string {
	if len(msg) <= MaxMessageBytes {
		return msg
	}
	return msg[:MaxMessageBytes] + "…(clipped)"
}

// checkCommand checks a description's name and command against the limits.
func checkCommand(name string, c *masterv1.Command) error {
	if name == "" {
		return fmt.Errorf("name: %w: empty", fault.ErrInvalidArgument)
	}
	if err := resources.CheckLength("name", name, resources.MaxNameBytes); err != nil {
		return err
	}
	if len(c.GetArgs()) == 0 || c.GetArgs()[0] == "" {
		return fmt.Errorf("command: %w: empty", fault.ErrInvalidArgument)
	}
	return resources.CheckCommand(c.GetArgs(), c.GetEnv())
}

// retained is a completed list (spark.deploy.retainedApplications,
// retainedDrivers) bounded by count and by bytes.
type retained[T any] struct {
	items []T
	sizes []int
	bytes int
}

// add appends v of size bytes. When maxCount entries are kept already it
// first drops the oldest 10% (at least one), as Spark does, then as many of
// the oldest as it takes to keep the bytes within maxBytes. It returns what
// it dropped.
func (r *retained[T]) add(v T, size, maxCount, maxBytes int) []T {
	var dropped []T
	if len(r.items) >= maxCount {
		dropped = r.drop(dropped, max(maxCount/10, 1))
	}
	for len(r.items) > 0 && r.bytes+size > maxBytes {
		dropped = r.drop(dropped, 1)
	}
	r.items, r.sizes, r.bytes = append(r.items, v), append(r.sizes, size), r.bytes+size
	return dropped
}

// find returns the entry that match accepts, if any.
func (r *retained[T]) find(match func(T) bool) (T, bool) {
	if i := slices.IndexFunc(r.items, match); i >= 0 {
		return r.items[i], true
	}
	var none T
	return none, false
}

// drop drops the n oldest entries, appending them to dropped.
func (r *retained[T]) drop(dropped []T, n int) []T {
	n = min(n, len(r.items))
	for _, size := range r.sizes[:n] {
		r.bytes -= size
	}
	dropped = append(dropped, r.items[:n]...)
	clear(r.items[:n])
	r.items, r.sizes = r.items[n:], r.sizes[n:]
	return dropped
}
