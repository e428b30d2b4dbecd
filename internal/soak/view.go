package soak

import (
	"fmt"
	"regexp"
	"sort"
	"sync"
)

// MasterJSON is the part of a master's GET /json the soak reads.
type MasterJSON struct {
	URL              string       `json:"url"`
	Status           string       `json:"status"`
	Epoch            int64        `json:"epoch"`
	AliveWorkers     int          `json:"aliveworkers"`
	ActiveApps       []AppJSON    `json:"activeapps"`
	CompletedApps    []AppJSON    `json:"completedapps"`
	ActiveDrivers    []DriverJSON `json:"activedrivers"`
	CompletedDrivers []DriverJSON `json:"completeddrivers"`
}

// AppJSON is an application in /json.
type AppJSON struct {
	ID            string `json:"id"`
	Name          string `json:"name"`
	State         string `json:"state"`
	DriverID      string `json:"driverid"`
	StatusMessage string `json:"statusmessage"`
}

// DriverJSON is a cluster-mode driver in /json.
type DriverJSON struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	State   string `json:"state"`
	Worker  string `json:"worker"`
	Message string `json:"message"`
}

// Final states, as /json names them.
var (
	finalApp    = map[string]bool{"FINISHED": true, "FAILED": true, "KILLED": true}
	finalDriver = map[string]bool{"FINISHED": true, "RELAUNCHING": true, "KILLED": true, "FAILED": true, "ERROR": true}
)

// failedAfter reports whether an application's final state may change from
// was to now: a cluster-mode driver that unregistered it FINISHED and then
// exited non-zero fails it (the master's appEndOf). Nothing else changes.
func failedAfter(was, now string) bool { return was == "FINISHED" && now == "FAILED" }

// DriverSeen is the latest the leading master said of a driver.
type DriverSeen struct {
	State   string
	Message string
}

// relaunchedAs is how the master names the driver a supervised one was
// relaunched as.
var relaunchedAs = regexp.MustCompile(`relaunched as (driver-[0-9]+-[0-9]+)`)

// Successor is the driver d was relaunched as, or "".
func (d DriverSeen) Successor() string {
	if d.State != "RELAUNCHING" {
		return ""
	}
	if m := relaunchedAs.FindStringSubmatch(d.Message); m != nil {
		return m[1]
	}
	return ""
}

// View accumulates what the leading master said over the run — the
// master keeps only so many ended applications, and a master that
// recovered may have forgotten some — and checks that nothing final
// changes: an application or driver once FINISHED (or any final state)
// never shows another state again, but for an application its driver
// failed after it unregistered it (failedAfter). Safe for concurrent use.
type View struct {
	mu        sync.Mutex
	appsByRun map[string]map[string]bool // application name → ids
	apps      map[string]string          // application id → its final state, once final
	drivers   map[string]DriverSeen
	final     map[string]string // driver id → its final state, once final
}

// NewView returns an empty view.
func NewView() *View {
	return &View{appsByRun: map[string]map[string]bool{}, apps: map[string]string{},
		drivers: map[string]DriverSeen{}, final: map[string]string{}}
}

// Observe takes in the /json of a master that leads, and returns what in
// it changed a final state.
func (v *View) Observe(s MasterJSON) []Violation {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []Violation
	for _, a := range append(append([]AppJSON(nil), s.ActiveApps...), s.CompletedApps...) {
		if v.appsByRun[a.Name] == nil {
			v.appsByRun[a.Name] = map[string]bool{}
		}
		v.appsByRun[a.Name][a.ID] = true
		if was, ok := v.apps[a.ID]; ok && was != a.State && !failedAfter(was, a.State) {
			out = append(out, Violation{FinalStateChanged, fmt.Sprintf("application %s (%s) was %s, now %s on %s (epoch %d)",
				a.ID, a.Name, was, a.State, s.URL, s.Epoch)})
		}
		if finalApp[a.State] {
			v.apps[a.ID] = a.State
		}
	}
	for _, d := range append(append([]DriverJSON(nil), s.ActiveDrivers...), s.CompletedDrivers...) {
		if was, ok := v.final[d.ID]; ok && was != d.State {
			out = append(out, Violation{FinalStateChanged, fmt.Sprintf("driver %s (%s) was %s, now %s on %s (epoch %d)",
				d.ID, d.Name, was, d.State, s.URL, s.Epoch)})
		}
		if finalDriver[d.State] {
			v.final[d.ID] = d.State
		}
		v.drivers[d.ID] = DriverSeen{State: d.State, Message: d.Message}
	}
	return out
}

// Apps returns the ids of the applications named name, sorted.
func (v *View) Apps(name string) []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []string
	for id := range v.appsByRun[name] {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// AppFinal returns an application's final state, if it has one.
func (v *View) AppFinal(id string) (string, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	s, ok := v.apps[id]
	return s, ok
}

// Chain returns the drivers from id through each one it was relaunched
// as, and the last one's latest state.
func (v *View) Chain(id string) ([]string, DriverSeen) {
	v.mu.Lock()
	defer v.mu.Unlock()
	chain := []string{id}
	d := v.drivers[id]
	for next := d.Successor(); next != "" && len(chain) < 100; next = d.Successor() {
		chain = append(chain, next)
		d = v.drivers[next]
	}
	return chain, d
}
