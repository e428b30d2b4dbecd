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
)

// clusterState is the master's whole view, as GetClusterState and /json show it.
func (s *Server) clusterState() *masterv1.GetClusterStateResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &masterv1.GetClusterStateResponse{MasterUrl: s.cfg.URL, Status: "ALIVE"}
	for _, w := range s.workers {
		out.Workers = append(out.Workers, workerProto(w))
	}
	for _, a := range s.appQueue {
		out.ActiveApps = append(out.ActiveApps, appProto(a))
	}
	for _, a := range s.completedApps {
		out.CompletedApps = append(out.CompletedApps, appProto(a))
	}
	var active []*driverInfo
	for _, d := range s.drivers {
		active = append(active, d)
	}
	sort.Slice(active, func(i, j int) bool { return active[i].id < active[j].id })
	for _, d := range active {
		out.ActiveDrivers = append(out.ActiveDrivers, driverProto(d))
	}
	for _, d := range s.completedDrivers {
		out.CompletedDrivers = append(out.CompletedDrivers, driverProto(d))
	}
	return out
}

func workerProto(w *workerInfo) *masterv1.WorkerInfo {
	return &masterv1.WorkerInfo{
		Id: w.id, Host: w.host, Port: w.port, WorkerUrl: w.url, State: w.state,
		Cores: w.cores, CoresUsed: w.coresUsed, MemoryMib: w.memoryMiB, MemoryUsedMib: w.memoryUsedMiB,
		LastHeartbeat: timestamppb.New(w.lastHeartbeat),
	}
}

func appProto(a *appInfo) *masterv1.ApplicationInfo {
	p := &masterv1.ApplicationInfo{
		Id: a.id, Description: a.desc, State: a.state, DriverUrl: a.driverURL, DriverId: a.driverID,
		StartTime: timestamppb.New(a.startTime), CoresGranted: a.coresGranted, StatusMessage: a.statusMessage,
		TraceId: traceID(a.trace),
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
	for _, e := range execs {
		p.Executors = append(p.Executors, &masterv1.ExecutorInfo{
			Id: e.id, AppId: a.id, WorkerId: e.worker.id, HostPort: e.worker.address(),
			Cores: e.cores, MemoryMib: e.memoryMiB, State: e.state, Message: e.message,
			ExitStatus: e.exitStatus, ScheduledAt: timestamppb.New(e.scheduledAt), Url: e.url,
		})
	}
	return p
}

func driverProto(d *driverInfo) *masterv1.DriverInfo {
	p := &masterv1.DriverInfo{
		Id: d.id, Description: d.desc, State: d.state, SubmitTime: timestamppb.New(d.submitTime), Message: d.message,
		TraceId: traceID(d.trace),
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

// serveJSON serves GET /json in the shape of Spark's master JSON.
func (s *Server) serveJSON(w http.ResponseWriter, _ *http.Request) {
	st := s.clusterState()
	out := map[string]any{
		"url": st.GetMasterUrl(), "status": st.GetStatus(),
		"workers": []any{}, "activeapps": []any{}, "completedapps": []any{},
		"activedrivers": []any{}, "completeddrivers": []any{},
	}
	var alive, cores, coresUsed int32
	var memory, memoryUsed int64
	workers := []any{}
	for _, wk := range st.GetWorkers() {
		if wk.GetState() == masterv1.WorkerState_WORKER_STATE_ALIVE {
			alive++
			cores += wk.GetCores()
			coresUsed += wk.GetCoresUsed()
			memory += wk.GetMemoryMib()
			memoryUsed += wk.GetMemoryUsedMib()
		}
		workers = append(workers, map[string]any{
			"id": wk.GetId(), "host": wk.GetHost(), "port": wk.GetPort(), "webuiaddress": wk.GetWorkerUrl(),
			"cores": wk.GetCores(), "coresused": wk.GetCoresUsed(), "coresfree": wk.GetCores() - wk.GetCoresUsed(),
			"memory": wk.GetMemoryMib(), "memoryused": wk.GetMemoryUsedMib(), "memoryfree": wk.GetMemoryMib() - wk.GetMemoryUsedMib(),
			"state": lifecycle.Name(wk.GetState()), "lastheartbeat": wk.GetLastHeartbeat().AsTime().UnixMilli(),
		})
	}
	out["workers"] = workers
	out["aliveworkers"], out["cores"], out["coresused"], out["memory"], out["memoryused"] = alive, cores, coresUsed, memory, memoryUsed
	out["activeapps"] = appsJSON(st.GetActiveApps())
	out["completedapps"] = appsJSON(st.GetCompletedApps())
	out["activedrivers"] = driversJSON(st.GetActiveDrivers())
	out["completeddrivers"] = driversJSON(st.GetCompletedDrivers())
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(out)
}

func appsJSON(apps []*masterv1.ApplicationInfo) []any {
	out := []any{}
	for _, a := range apps {
		start := a.GetStartTime().AsTime()
		end := time.Now()
		if a.GetEndTime() != nil {
			end = a.GetEndTime().AsTime()
		}
		execs := []any{}
		for _, e := range a.GetExecutors() {
			ex := map[string]any{
				"id": e.GetId(), "worker": e.GetWorkerId(), "hostport": e.GetHostPort(), "cores": e.GetCores(),
				"memory": e.GetMemoryMib(), "state": lifecycle.Name(e.GetState()), "message": e.GetMessage(),
			}
			if e.ExitStatus != nil {
				ex["exitstatus"] = e.GetExitStatus()
			}
			execs = append(execs, ex)
		}
		maxCores := any(nil)
		if a.GetDescription().MaxCores != nil {
			maxCores = a.GetDescription().GetMaxCores()
		}
		out = append(out, map[string]any{
			"id": a.GetId(), "name": a.GetDescription().GetName(), "starttime": start.UnixMilli(),
			"submitdate": start.UTC().Format(time.RFC1123), "cores": a.GetCoresGranted(), "maxcores": maxCores,
			"memoryperexecutor": a.GetDescription().GetMemoryPerExecutorMib(), "state": lifecycle.Name(a.GetState()),
			"duration": end.Sub(start).Milliseconds(), "driverurl": a.GetDriverUrl(), "driverid": a.GetDriverId(),
			"statusmessage": a.GetStatusMessage(), "executors": execs, "traceid": a.GetTraceId(),
		})
	}
	return out
}

func driversJSON(drivers []*masterv1.DriverInfo) []any {
	out := []any{}
	for _, d := range drivers {
		start := d.GetSubmitTime().AsTime()
		out = append(out, map[string]any{
			"id": d.GetId(), "name": d.GetDescription().GetName(), "starttime": start.UnixMilli(),
			"submitdate": start.UTC().Format(time.RFC1123), "state": lifecycle.Name(d.GetState()),
			"cores": d.GetDescription().GetCores(), "memory": d.GetDescription().GetMemoryMib(),
			"supervise": d.GetDescription().GetSupervise(), "worker": d.GetWorkerId(), "message": d.GetMessage(),
			"traceid": d.GetTraceId(),
		})
	}
	return out
}
