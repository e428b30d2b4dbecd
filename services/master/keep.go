package master

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/fault"
	"github.com/glint-cluster/glint/services/master/store"
)

// State changes are kept in the Store, if any, with mu released: a change
// under mu names what changed (keepLocked: "worker ID", "application ID",
// "driver ID" or "counters"), and the master's keeper takes every name
// asked for so far, makes each one's record as the master holds it then,
// writes the batch with mu released — so that heartbeats and reports are
// heard while the store is slow — and then runs under mu what waited for
// each write: an executor's launch is sent once its id is kept, a
// registration is admitted and answered once kept, and undone when not.
// A failed write is logged and counted, and what it was to keep is written
// again, as it is then, every check interval until the store takes it
// (keepUnkept). A write refused because this master no longer leads
// deposes it.

// keepLocked asks for what to be kept as the master holds it when the
// keeper takes it; then, each, runs under mu with the write's outcome.
// Without a Store, then runs at once.
func (s *Server) keepLocked(what string, then ...func(error)) {
	if s.cfg.Store == nil {
		for _, f := range then {
			f(nil)
		}
		return
	}
	s.dirty[what] = append(s.dirty[what], then...)
	s.marks++
	select {
	case s.keeperWake <- struct{}{}:
	default:
	}
}

// lockKept takes mu for a call that is answered once what it changed is
// kept, and returns what unlockKept needs.
func (s *Server) lockKept() uint64 {
	s.mu.Lock()
	return s.marks
}

// unlockKept ends a call that took mu with lockKept: the schedule pass it
// asked for, mu released, and — if it changed what is kept — a wait until
// the keeper made those writes (or ctx ends). A call that changed nothing
// kept, a heartbeat say, never waits on the store.
func (s *Server) unlockKept(ctx context.Context, marks uint64) {
	s.passLocked(ctx)
	var kept chan struct{}
	if s.marks != marks {
		kept = make(chan struct{})
		s.barriers = append(s.barriers, kept)
	}
	s.mu.Unlock()
	if kept != nil {
		select {
		case <-kept:
		case <-ctx.Done():
		}
	}
}

// waitKept waits for the outcome of a write (sent to kept) or the end of
// ctx.
func waitKept(ctx context.Context, kept <-chan error) error {
	select {
	case err := <-kept:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: wait for the store to keep it: %w", fault.ErrUnavailable, ctx.Err())
	}
}

// keeper writes what keepLocked asked for until ctx ends.
func (s *Server) keeper(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.keeperWake:
			s.keepBatch(ctx)
		}
	}
}

// pendingWrite is one record of a batch and what waits for it.
type pendingWrite struct {
	what  string
	write func(store.Store) error
	then  []func(error)
}

// keepBatch writes every record asked for, then runs what waited for each
// and the schedule pass they asked for.
func (s *Server) keepBatch(ctx context.Context) {
	s.mu.Lock()
	batch := make([]pendingWrite, 0, len(s.dirty))
	for _, what := range slices.Sorted(maps.Keys(s.dirty)) {
		batch = append(batch, pendingWrite{what: what, write: s.recordLocked(what), then: s.dirty[what]})
	}
	clear(s.dirty)
	barriers := s.barriers
	s.barriers = nil
	deposed := s.status == statusDeposed
	s.mu.Unlock()
	errs := make([]error, len(batch))
	for i, w := range batch {
		if deposed {
			errs[i] = fmt.Errorf("%w: keep %s: %w", fault.ErrUnavailable, w.what, store.ErrDeposed)
			continue
		}
		began := time.Now()
		if err := w.write(s.cfg.Store); err != nil {
			errs[i] = fmt.Errorf("%w: keep %s: %w", fault.ErrUnavailable, w.what, err)
			deposed = errors.Is(err, store.ErrDeposed)
		}
		s.metrics.stateWrites.Observe(time.Since(began).Seconds())
	}
	s.mu.Lock()
	defer s.scheduleAndUnlock(ctx)
	for i, w := range batch {
		s.keptLocked(w.what, errs[i])
		for _, f := range w.then {
			f(errs[i])
		}
	}
	for _, b := range barriers {
		close(b)
	}
}

// keptLocked records the outcome of what's write.
func (s *Server) keptLocked(what string, err error) {
	if err == nil {
		delete(s.unkept, what)
		return
	}
	s.unkept[what] = struct{}{}
	if s.status == statusDeposed {
		return // nothing was written: it leads no more
	}
	s.metrics.stateWriteErrors.Inc()
	s.log.Error("keep state for recovery", "what", what, "err", err)
	switch {
	case errors.Is(err, store.ErrDeposed):
		s.deposeLocked(fmt.Errorf("a state write was refused: another master leads now: %w", err))
	case s.cfg.StepDownOnFailedWrite:
		s.deposeLocked(fmt.Errorf("a state write failed, so it steps down for a master that can keep its state: %w", err))
	}
}

// deposeLocked stops a master that no longer leads, or may not (why): it
// schedules and admits nothing more, and Run returns why.
func (s *Server) deposeLocked(why error) {
	if s.status == statusDeposed {
		return
	}
	s.status, s.deposedBy = statusDeposed, why
	close(s.deposed)
}

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
	for what := range s.unkept {
		s.keepLocked(what)
	}
}

// recordLocked is the write of what ("worker ID", "application ID",
// "driver ID", "counters") as the master holds it now: its record, or its
// deletion when the master holds it no more.
func (s *Server) recordLocked(what string) func(store.Store) error {
	kind, id, _ := strings.Cut(what, " ")
	switch kind {
	case "worker":
		w, ok := s.workers.alive(id)
		if !ok {
			w, ok = s.pendingWorkers[id]
		}
		if !ok {
			return func(st store.Store) error { return st.DeleteWorker(id) }
		}
		p := &masterv1.PersistedWorker{Id: w.id, Host: w.host, Port: w.port, WorkerUrl: w.url, Cores: w.cores, MemoryMib: w.memoryMiB}
		return func(st store.Store) error { return st.PutWorker(p) }
	case "application":
		a, ok := s.apps[id]
		if !ok {
			a, ok = s.pendingApps[id]
		}
		if ok {
			p := s.appRecordLocked(a)
			return func(st store.Store) error { return st.PutApplication(p) }
		}
		// A completed application is kept as it is shown, without its
		// token: a master that recovers still answers for it, until it
		// drops out of the completed list.
		if a, ok := s.completedApps.find(func(a *appInfo) bool { return a.id == id }); ok {
			p := &masterv1.PersistedApplication{Id: a.id, Completed: s.appProto(a)}
			return func(st store.Store) error { return st.PutApplication(p) }
		}
		return func(st store.Store) error { return st.DeleteApplication(id) }
	case "driver":
		d, ok := s.drivers[id]
		if !ok {
			d, ok = s.pendingDrivers[id]
		}
		if ok {
			p := driverRecord(d)
			return func(st store.Store) error { return st.PutDriver(p) }
		}
		if d, ok := s.completedDrivers.find(func(d *driverInfo) bool { return d.id == id }); ok {
			p := &masterv1.PersistedDriver{Id: d.id, SubmissionId: d.submission, Completed: s.driverProto(d)}
			return func(st store.Store) error { return st.PutDriver(p) }
		}
		return func(st store.Store) error { return st.DeleteDriver(id) }
	}
	p := &masterv1.PersistedCounters{NextAppNumber: int32(s.nextAppNumber), NextDriverNumber: int32(s.nextDriverNumber)}
	return func(st store.Store) error { return st.PutCounters(p) }
}

// appRecordLocked is active application a's record.
func (s *Server) appRecordLocked(a *appInfo) *masterv1.PersistedApplication {
	p := &masterv1.PersistedApplication{
		Id: a.id, Description: a.desc, DriverUrl: a.driverURL, DriverId: a.driverID, AppToken: a.appToken, MasterToken: a.masterToken,
		Owner: a.owner, CoresPeak: a.coresPeak,
		StartTime: timestamppb.New(a.startTime), NextExecutorId: a.nextExecID, Traceparent: formatTraceparent(a.trace),
	}
	if a.executorLimit != unlimitedExecutors {
		p.ExecutorLimit = proto.Int32(int32(min(a.executorLimit, 1<<31-1)))
	}
	return p
}

// driverRecord is active driver d's record.
func driverRecord(d *driverInfo) *masterv1.PersistedDriver {
	p := &masterv1.PersistedDriver{
		Id: d.id, Description: d.desc, SubmitTime: timestamppb.New(d.submitTime), SubmitToken: d.submitToken, Owner: d.owner,
		Traceparent: formatTraceparent(d.trace), SubmissionId: d.submission,
	}
	if d.worker != nil {
		p.WorkerId = d.worker.id
	}
	return p
}
