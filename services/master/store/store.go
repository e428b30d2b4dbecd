package store

import (
	"slices"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
)

// Store keeps what a master needs to recover after a restart: its
// workers, applications, drivers and id counters (Spark's
// PersistenceEngine). Each write keeps one record as it is then; the master
// writes a change before it acts on it or answers it. Executors are not kept: the workers report them to
// the recovering master, which adopts them. Completed applications and
// drivers are kept as they were shown (PersistedApplication.completed),
// while the completed lists retain them.
type Store interface {
	// Load returns everything kept.
	Load() (*Recovered, error)
	PutWorker(*masterv1.PersistedWorker) error
	DeleteWorker(id string) error
	PutApplication(*masterv1.PersistedApplication) error
	DeleteApplication(id string) error
	PutDriver(*masterv1.PersistedDriver) error
	DeleteDriver(id string) error
	PutCounters(*masterv1.PersistedCounters) error
	Close() error
}

// Recovered is what a Store kept.
type Recovered struct {
	Workers      []*masterv1.PersistedWorker
	Applications []*masterv1.PersistedApplication
	Drivers      []*masterv1.PersistedDriver
	Counters     *masterv1.PersistedCounters
}

// Active reports whether workers, or applications or drivers that had not
// ended, were kept: the master must recover them before it leads.
func (r *Recovered) Active() bool {
	return len(r.Workers) > 0 ||
		slices.ContainsFunc(r.Applications, func(p *masterv1.PersistedApplication) bool { return p.GetCompleted() == nil }) ||
		slices.ContainsFunc(r.Drivers, func(p *masterv1.PersistedDriver) bool { return p.GetCompleted() == nil })
}
