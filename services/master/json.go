package master

import (
	"encoding/json"
	"net/http"
	"sort"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"go.opentelemetry.io/otel/trace"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/resources"
)

// clusterState is the master's whole view, as GetClusterState and /json show
// it: commands with their secrets hidden.
func (s *Server) clusterState() *masterv1.GetClusterStateResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &masterv1.GetClusterStateResponse{MasterUrl: s.cfg.URL, Status: s.status, Epoch: s.cfg.Epoch,
		WorkerTimeoutMs:     s.workerTimeoutLocked().Milliseconds(),
		HeartbeatIntervalMs: heartbeatInterval(s.cfg.WorkerTimeout, s.cfg.MaxHeartbeatRate, s.workers.liveCount()).Milliseconds()}
	for w := range s.workers.all() {
		out.Workers = append(out.Workers, workerProto(w))
	}
	for _, a := range s.appQueue {
		out.ActiveApps = append(out.ActiveApps, s.appProto(a))
	}
	for _, a := range s.completedApps.items {
		out.CompletedApps = append(out.CompletedApps, s.appProto(a))
	}
	var active []*driverInfo
	for _, d := range s.drivers {
		active = append(active, d)
	}
	sort.Slice(active, func(i, j int) bool { return active[i].id < active[j].id })
	for _, d := range active {
		out.ActiveDrivers = append(out.ActiveDrivers, s.driverProto(d))
	}
	for _, d := range s.completedDrivers.items {
		out.CompletedDrivers = append(out.CompletedDrivers, s.driverProto(d))
	}
	return out
}

func workerProto(w *workerInfo) *masterv1.WorkerInfo {
	return &masterv1.WorkerInfo{
		Id: w.id, Host: w.host, Port: w.port, WorkerUrl: w.url, State: w.state,
		Cores: w.cores, CoresUsed: w.coresUsed, MemoryMib: w.memoryMiB, MemoryUsedMib: w.memoryUsedMiB,
		LastHeartbeat: timestamppb.New(w.lastHeartbeat), HeartbeatIntervalMs: w.interval.Milliseconds(), Usage: w.usedLocked().proto(),
	}
}

// appProto is a as shown, its command's secrets hidden.
func (s *Server) appProto(a *appInfo) *masterv1.ApplicationInfo {
	if a.shown != nil {
		return a.shown
	}
	p := &masterv1.ApplicationInfo{
		Id: a.id, Description: s.cfg.Redaction.App(a.desc), State: a.state, DriverUrl: a.driverURL, DriverId: a.driverID,
		StartTime: timestamppb.New(a.startTime), CoresGranted: a.coresGranted, CoresPeak: a.coresPeak, StatusMessage: a.statusMessage,
		TraceId: traceID(a.trace), DefaultCores: a.defaultCores, Owner: a.owner,
	}
	if !a.endTime.IsZero() {
		p.EndTime = timestamppb.New(a.endTime)
	}
	var execs []*executorInfo
	for _, e := range a.executors {
		execs = append(execs, e)
	}
	execs = append(execs, a.removed...)
	sort.Slice(execs, func(i, j int) bool { return execs[i].id < execs[j].id })
	var used usage
	for _, e := range execs {
		used.cpuSeconds += e.used.cpuSeconds
		if a.executors[e.id] == e {
			used.memoryBytes += e.used.memoryBytes
			used.peakBytes += e.used.peakBytes
		}
		p.Executors = append(p.Executors, &masterv1.ExecutorInfo{
			Id: e.id, AppId: a.id, WorkerId: e.worker.id, HostPort: e.worker.address(),
			Cores: e.cores, MemoryMib: e.memoryMiB, State: e.state, Message: e.message,
			ExitStatus: e.exitStatus, ScheduledAt: timestamppb.New(e.scheduledAt), Url: e.url,
			LaunchedAt: stamp(e.launch.launched), StartedAt: stamp(e.launch.started),
			PropsRetrievedAt: stamp(e.launch.propsRetrieved), RegisteredAt: stamp(e.launch.registered),
			FirstTaskAt: stamp(e.launch.firstTask), RemovedAt: stamp(e.removedAt), Usage: e.used.proto(),
			RequestedAt: stamp(e.requestedAt), RequestedFor: e.requestedFor, BootedAt: stamp(e.launch.booted),
		})
	}
	p.Usage = used.proto()
	return p
}

// driverProto is d as shown, its command's secrets hidden.
func (s *Server) driverProto(d *driverInfo) *masterv1.DriverInfo {
	if d.shown != nil {
		return d.shown
	}
	p := &masterv1.DriverInfo{
		Id: d.id, Description: s.cfg.Redaction.Driver(d.desc), State: d.state, SubmitTime: timestamppb.New(d.submitTime), Message: d.message,
		TraceId: traceID(d.trace), RelaunchedAs: d.relaunchedAs, Owner: d.owner, Usage: d.used.proto(),
	}
	if d.worker != nil {
		p.WorkerId, p.WorkerHostPort = d.worker.id, d.worker.address()
	}
	return p
}

func traceID(sc trace.SpanContext) string {
	if !sc.HasTraceID() {
		return ""
	}
	return sc.TraceID().String()
}

// workerJSON is one worker in /json, DEAD ones included.
type workerJSON struct {
	ID           string `json:"id"`
	Host         string `json:"host"`
	Port         int32  `json:"port"`
	WebUIAddress string `json:"webuiaddress"`
	resources.Usage
	State         string `json:"state"`
	LastHeartbeat int64  `json:"lastheartbeat"`
	// HeartbeatInterval is the interval it was told, in milliseconds.
	HeartbeatInterval int64 `json:"heartbeatinterval"`
	usageJSON
}

// masterJSON is GET /json: the master in the shape of Spark's master JSON.
type masterJSON struct {
	URL    string `json:"url"`
	Status string `json:"status"`
	// Epoch is the leadership epoch (etcd mode); Leader, on a standby, the
	// master that leads.
	Epoch  int64  `json:"epoch,omitempty"`
	Leader string `json:"leader,omitempty"`
	// WorkerTimeout is how long a live worker may be silent now, and
	// HeartbeatInterval the interval a worker registering now is told, in
	// milliseconds: both grow with the cluster past --max-heartbeat-rate.
	WorkerTimeout     int64        `json:"workertimeout"`
	HeartbeatInterval int64        `json:"heartbeatinterval"`
	Workers           []workerJSON `json:"workers"`
	totals
	ActiveApps       []appJSON    `json:"activeapps"`
	CompletedApps    []appJSON    `json:"completedapps"`
	ActiveDrivers    []driverJSON `json:"activedrivers"`
	CompletedDrivers []driverJSON `json:"completeddrivers"`
}

// totals are the ALIVE workers' count, cores and memory (MiB), in 64 bits:
// no number of workers can wrap them.
type totals struct {
	AliveWorkers int32 `json:"aliveworkers"`
	Cores        int64 `json:"cores"`
	CoresUsed    int64 `json:"coresused"`
	Memory       int64 `json:"memory"`
	MemoryUsed   int64 `json:"memoryused"`
}

func aliveTotals(workers []*masterv1.WorkerInfo) totals {
	var t totals
	for _, w := range workers {
		if w.GetState() == masterv1.WorkerState_WORKER_STATE_ALIVE {
			t.AliveWorkers++
			t.Cores += int64(w.GetCores())
			t.CoresUsed += int64(w.GetCoresUsed())
			t.Memory += w.GetMemoryMib()
			t.MemoryUsed += w.GetMemoryUsedMib()
		}
	}
	return t
}

// appJSON is one application in /json. MaxCores is the cores it may use, as
// Spark's requestedCores: spark.cores.max, else the master's default cores;
// null when both are unset. DefaultCores is set when the latter caps it.
// Duration runs to now for an active application. User is its owner, the
// name of the submit token that registered it (Spark's user).
type appJSON struct {
	ID                string         `json:"id"`
	Name              string         `json:"name"`
	User              string         `json:"user"`
	StartTime         int64          `json:"starttime"`
	SubmitDate        string         `json:"submitdate"`
	Cores             int32          `json:"cores"`
	CoresPeak         int32          `json:"corespeak"`
	MaxCores          *int32         `json:"maxcores"`
	DefaultCores      int32          `json:"defaultcores,omitempty"`
	MemoryPerExecutor int64          `json:"memoryperexecutor"`
	State             string         `json:"state"`
	Duration          int64          `json:"duration"`
	DriverURL         string         `json:"driverurl"`
	DriverID          string         `json:"driverid"`
	StatusMessage     string         `json:"statusmessage"`
	Executors         []executorJSON `json:"executors"`
	TraceID           string         `json:"traceid"`
	usageJSON
}

// executorJSON is one executor of an application in /json, ended ones
// included; exitstatus is present once the process exited.
type executorJSON struct {
	ID         int32  `json:"id"`
	Worker     string `json:"worker"`
	HostPort   string `json:"hostport"`
	Cores      int32  `json:"cores"`
	Memory     int64  `json:"memory"`
	State      string `json:"state"`
	Message    string `json:"message"`
	ExitStatus *int32 `json:"exitstatus,omitempty"`
	usageJSON
}

// driverJSON is one cluster-mode driver in /json; User is its owner.
type driverJSON struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	User       string `json:"user"`
	StartTime  int64  `json:"starttime"`
	SubmitDate string `json:"submitdate"`
	State      string `json:"state"`
	Cores      int32  `json:"cores"`
	Memory     int64  `json:"memory"`
	Supervise  bool   `json:"supervise"`
	Worker     string `json:"worker"`
	Message    string `json:"message"`
	TraceID    string `json:"traceid"`
	usageJSON
}

// serveJSON serves GET /json.
func (s *Server) serveJSON(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(statusJSON(s.clusterState(), time.Now())); err != nil {
		s.log.Debug("write /json", "err", err)
	}
}

// statusJSON is the cluster state st as /json shows it at now.
func statusJSON(st *masterv1.GetClusterStateResponse, now time.Time) masterJSON {
	out := masterJSON{
		URL: st.GetMasterUrl(), Status: st.GetStatus(), Epoch: st.GetEpoch(), Workers: []workerJSON{},
		WorkerTimeout: st.GetWorkerTimeoutMs(), HeartbeatInterval: st.GetHeartbeatIntervalMs(),
		ActiveApps: appsJSON(st.GetActiveApps(), now), CompletedApps: appsJSON(st.GetCompletedApps(), now),
		ActiveDrivers: driversJSON(st.GetActiveDrivers()), CompletedDrivers: driversJSON(st.GetCompletedDrivers()),
	}
	out.totals = aliveTotals(st.GetWorkers())
	for _, wk := range st.GetWorkers() {
		out.Workers = append(out.Workers, workerJSON{
			ID: wk.GetId(), Host: wk.GetHost(), Port: wk.GetPort(), WebUIAddress: wk.GetWorkerUrl(),
			Usage: resources.NewUsage(wk.GetCores(), wk.GetCoresUsed(), wk.GetMemoryMib(), wk.GetMemoryUsedMib()),
			State: lifecycle.Name(wk.GetState()), LastHeartbeat: wk.GetLastHeartbeat().AsTime().UnixMilli(),
			HeartbeatInterval: wk.GetHeartbeatIntervalMs(), usageJSON: usageOf(wk.GetUsage()),
		})
	}
	return out
}

func appsJSON(apps []*masterv1.ApplicationInfo, now time.Time) []appJSON {
	out := []appJSON{}
	for _, a := range apps {
		start, end := a.GetStartTime().AsTime(), now
		if a.GetEndTime() != nil {
			end = a.GetEndTime().AsTime()
		}
		execs := []executorJSON{}
		for _, e := range a.GetExecutors() {
			execs = append(execs, executorJSON{
				ID: e.GetId(), Worker: e.GetWorkerId(), HostPort: e.GetHostPort(), Cores: e.GetCores(),
				Memory: e.GetMemoryMib(), State: lifecycle.Name(e.GetState()), Message: e.GetMessage(), ExitStatus: e.ExitStatus,
				usageJSON: usageOf(e.GetUsage()),
			})
		}
		maxCores := a.GetDescription().MaxCores
		if a.GetDefaultCores() > 0 {
			maxCores = &a.DefaultCores
		}
		out = append(out, appJSON{
			ID: a.GetId(), Name: a.GetDescription().GetName(), User: a.GetOwner(), StartTime: start.UnixMilli(), DefaultCores: a.GetDefaultCores(),
			SubmitDate: start.UTC().Format(time.RFC1123), Cores: a.GetCoresGranted(), CoresPeak: a.GetCoresPeak(), MaxCores: maxCores,
			MemoryPerExecutor: a.GetDescription().GetMemoryPerExecutorMib(), State: lifecycle.Name(a.GetState()),
			Duration: end.Sub(start).Milliseconds(), DriverURL: a.GetDriverUrl(), DriverID: a.GetDriverId(),
			StatusMessage: a.GetStatusMessage(), Executors: execs, TraceID: a.GetTraceId(),
			usageJSON: usageOf(a.GetUsage()),
		})
	}
	return out
}

func driversJSON(drivers []*masterv1.DriverInfo) []driverJSON {
	out := []driverJSON{}
	for _, d := range drivers {
		start := d.GetSubmitTime().AsTime()
		out = append(out, driverJSON{
			ID: d.GetId(), Name: d.GetDescription().GetName(), User: d.GetOwner(), StartTime: start.UnixMilli(),
			SubmitDate: start.UTC().Format(time.RFC1123), State: lifecycle.Name(d.GetState()),
			Cores: d.GetDescription().GetCores(), Memory: d.GetDescription().GetMemoryMib(),
			Supervise: d.GetDescription().GetSupervise(), Worker: d.GetWorkerId(), Message: d.GetMessage(),
			TraceID: d.GetTraceId(), usageJSON: usageOf(d.GetUsage()),
		})
	}
	return out
}
