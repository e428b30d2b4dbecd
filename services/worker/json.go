package worker

import (
	"cmp"
	"encoding/json"
	"maps"
	"net/http"
	"slices"

	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/resources"
)

// workerJSON is GET /json: the worker in the shape of Spark's worker JSON.
type workerJSON struct {
	ID        string `json:"id"`
	Host      string `json:"host"`
	Port      int    `json:"port"`
	MasterURL string `json:"masterurl"`
	// Prestarted is how many idle executor processes, ready for their
	// claim, wait for a launch.
	Prestarted int `json:"prestarted"`
	// Contained says executors and drivers run in cgroups that enforce
	// their cores and memory; Cgroup is the worker's, under which they do.
	Contained bool   `json:"contained"`
	Cgroup    string `json:"cgroup,omitempty"`
	resources.Usage
	Executors         []executorJSON `json:"executors"`
	FinishedExecutors []executorJSON `json:"finishedexecutors"`
	Drivers           []driverJSON   `json:"drivers"`
	FinishedDrivers   []driverJSON   `json:"finisheddrivers"`
}

// executorJSON is one executor in /json; finished ones add exitstatus and message.
type executorJSON struct {
	ID         int32  `json:"id"`
	AppID      string `json:"appid"`
	Cores      int32  `json:"cores"`
	Memory     int64  `json:"memory"`
	State      string `json:"state"`
	PID        int    `json:"pid,omitempty"`
	ExitStatus *int32 `json:"exitstatus,omitempty"`
	Message    string `json:"message,omitempty"`
	usageJSON
}

// usageJSON is what an executor or driver used, as measured (usage.go).
type usageJSON struct {
	CPUSeconds  float64 `json:"cpuseconds"`
	MemoryBytes int64   `json:"memorybytes"`
	PeakBytes   int64   `json:"memorypeakbytes"`
}

func (u usage) json() usageJSON {
	return usageJSON{CPUSeconds: u.cpuSeconds, MemoryBytes: u.memoryBytes, PeakBytes: u.peakBytes}
}

// driverJSON is one driver in /json; finished ones add exitstatus and message.
type driverJSON struct {
	ID         string `json:"id"`
	Cores      int32  `json:"cores"`
	Memory     int64  `json:"memory"`
	State      string `json:"state"`
	Supervise  bool   `json:"supervise"`
	Restarts   int    `json:"restarts"`
	PID        int    `json:"pid,omitempty"`
	ExitStatus *int32 `json:"exitstatus,omitempty"`
	Message    string `json:"message,omitempty"`
	usageJSON
}

// status returns the worker as /json shows it.
func (s *Server) status() workerJSON {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := workerJSON{
		ID: s.id, Host: s.host, Port: s.port, MasterURL: s.active, Prestarted: s.prestart.idleCount(),
		Contained: s.cgroups != nil, Cgroup: s.cgroupPath(),
		Usage:     resources.NewUsage(s.cfg.Cores, s.coresUsed, s.cfg.MemoryMiB, s.memoryUsedMiB),
		Executors: []executorJSON{}, FinishedExecutors: []executorJSON{},
		Drivers: []driverJSON{}, FinishedDrivers: []driverJSON{},
	}
	for _, r := range s.sortedExecutorsLocked() {
		out.Executors = append(out.Executors, r.jsonLocked())
	}
	for _, r := range s.finishedExecutors {
		out.FinishedExecutors = append(out.FinishedExecutors, r.jsonLocked())
	}
	for _, r := range s.sortedDriversLocked() {
		out.Drivers = append(out.Drivers, r.jsonLocked())
	}
	for _, r := range s.finishedDrivers {
		out.FinishedDrivers = append(out.FinishedDrivers, r.jsonLocked())
	}
	return out
}

func (r *executorRunner) jsonLocked() executorJSON {
	return executorJSON{
		ID: r.execID, AppID: r.appID, Cores: r.cores, Memory: r.memoryMiB, State: lifecycle.Name(r.state),
		PID: r.pid, ExitStatus: r.exitStatus, Message: r.message, usageJSON: r.used.json(),
	}
}

func (r *driverRunner) jsonLocked() driverJSON {
	return driverJSON{
		ID: r.id, Cores: r.desc.GetCores(), Memory: r.desc.GetMemoryMib(), State: lifecycle.Name(r.state),
		Supervise: r.desc.GetSupervise(), Restarts: r.restarts, PID: r.pid, ExitStatus: r.exitStatus, Message: r.message,
		usageJSON: r.used.json(),
	}
}

// sortedExecutorsLocked returns the running executors by application and id.
func (s *Server) sortedExecutorsLocked() []*executorRunner {
	return slices.SortedFunc(maps.Values(s.executors), func(a, b *executorRunner) int {
		return cmp.Or(cmp.Compare(a.appID, b.appID), cmp.Compare(a.execID, b.execID))
	})
}

// sortedDriversLocked returns the running drivers by id.
func (s *Server) sortedDriversLocked() []*driverRunner {
	return slices.SortedFunc(maps.Values(s.drivers), func(a, b *driverRunner) int { return cmp.Compare(a.id, b.id) })
}

// cgroupPath is the worker's cgroup, "" when it contains nothing.
func (s *Server) cgroupPath() string {
	if s.cgroups == nil {
		return ""
	}
	return s.cgroups.Path()
}

// serveJSON serves GET /json.
func (s *Server) serveJSON(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s.status()); err != nil {
		s.log.Debug("write /json", "err", err)
	}
}
