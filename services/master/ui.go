package master

import (
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/ids"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/resources"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/web"
)

// UIConfig configures the master's web UI.
type UIConfig struct {
	// Public opens the read-only pages to anyone (--ui-public); the kill
	// buttons still need a login with a submit token.
	Public bool
	// JaegerURL is Jaeger's UI (--jaeger-ui-url): each application's page
	// links its trace there. Empty: the trace id is shown as text.
	JaegerURL string
	// GrafanaURL is Grafana's (--grafana-url): each application's page links
	// the launch dashboard over its time there. Empty: no link.
	GrafanaURL string
}

// launchDashboard is the uid of Grafana's launch latency dashboard
// (dashboards.LaunchUID; a test keeps them equal).
const launchDashboard = "glint-launch"

// newSite is the master's web UI: pages for a token of any role the master
// accepts, buttons for a submit token (as KillApplication and KillDriver).
func newSite(cfg Config) *web.Site {
	return web.New(web.Config{Service: "master", Tokens: cfg.Tokens, Read: rpc.AnyToken, Act: rpc.Submit, Public: cfg.UI.Public, Now: cfg.Now})
}

// uiPages are the master's web UI routes.
func (s *Server) uiPages() map[string]http.HandlerFunc {
	pages := map[string]http.HandlerFunc{
		"GET /{$}":               s.site.Page(s.serveIndex),
		"GET /app/{id}":          s.site.Page(s.serveApp),
		"POST /app/{id}/kill":    s.site.Action(s.killAppPage),
		"POST /driver/{id}/kill": s.site.Action(s.killDriverPage),
	}
	maps.Copy(pages, s.site.Routes())
	return pages
}

// indexPage is the master's page: Spark's master UI.
type indexPage struct {
	URL, Status string
	totals
	Workers                         []workerRow
	ActiveApps, CompletedApps       []appRow
	ActiveDrivers, CompletedDrivers []driverRow
}

type workerRow struct {
	ID, URL, Address, State string
	Cores, CoresUsed        int32
	Memory, MemoryUsed      int64
	HeartbeatAge            time.Duration
	// Measured is what its executors and drivers use: CPU seconds and
	// resident memory.
	Measured string
}

type appRow struct {
	ID, Name, User, State string
	// Message says why it waits, or how it ended.
	Message string
	// Cores are those it holds, or held at most once it ended.
	Cores             int32
	MemoryPerExecutor int64
	Submitted         time.Time
	Duration          time.Duration
	// LaunchP50 is the median of its executors' scheduled → first task; 0
	// when none is known.
	LaunchP50 time.Duration
	Active    bool
}

type driverRow struct {
	// LogURL is its log pages on its worker, less the stream.
	ID, Name, User, State, Worker, WorkerURL, Message, LogURL string
	Submitted                                                 time.Time
	Cores                                                     int32
	Memory                                                    int64
	Active                                                    bool
}

// index is the master's page as of now.
func index(st *masterv1.GetClusterStateResponse, now time.Time) indexPage {
	p := indexPage{URL: st.GetMasterUrl(), Status: st.GetStatus(), totals: aliveTotals(st.GetWorkers())}
	workerURLs := map[string]string{}
	for _, w := range st.GetWorkers() {
		workerURLs[w.GetId()] = w.GetWorkerUrl()
		p.Workers = append(p.Workers, workerRow{
			ID: w.GetId(), URL: w.GetWorkerUrl(), Address: fmt.Sprintf("%s:%d", w.GetHost(), w.GetPort()), State: lifecycle.Name(w.GetState()),
			Cores: w.GetCores(), CoresUsed: w.GetCoresUsed(), Memory: w.GetMemoryMib(), MemoryUsed: w.GetMemoryUsedMib(),
			HeartbeatAge: now.Sub(w.GetLastHeartbeat().AsTime()).Round(time.Second),
			Measured:     fmt.Sprintf("%.1f s CPU, %s", w.GetUsage().GetCpuSeconds(), resources.FormatBytes(w.GetUsage().GetMemoryBytes())),
		})
	}
	apps := func(in []*masterv1.ApplicationInfo, active bool) []appRow {
		out := make([]appRow, 0, len(in))
		for _, a := range in {
			out = append(out, appRow{
				ID: a.GetId(), Name: a.GetDescription().GetName(), User: a.GetOwner(), State: lifecycle.Name(a.GetState()),
				Message: a.GetStatusMessage(), Cores: appCores(a), MemoryPerExecutor: a.GetDescription().GetMemoryPerExecutorMib(),
				Submitted: a.GetStartTime().AsTime(), Duration: appDuration(a, now), LaunchP50: launchP50(a), Active: active,
			})
		}
		return out
	}
	p.ActiveApps, p.CompletedApps = apps(st.GetActiveApps(), true), apps(newestFirst(st.GetCompletedApps()), false)
	drivers := func(in []*masterv1.DriverInfo, active bool) []driverRow {
		out := make([]driverRow, 0, len(in))
		for _, d := range in {
			out = append(out, driverRow{
				ID: d.GetId(), Name: d.GetDescription().GetName(), User: d.GetOwner(), State: lifecycle.Name(d.GetState()),
				Worker: d.GetWorkerId(), WorkerURL: workerURLs[d.GetWorkerId()], Message: d.GetMessage(),
				Submitted: d.GetSubmitTime().AsTime(), Cores: d.GetDescription().GetCores(), Memory: d.GetDescription().GetMemoryMib(),
				Active: active, LogURL: driverLogURL(workerURLs[d.GetWorkerId()], d.GetId()),
			})
		}
		return out
	}
	p.ActiveDrivers, p.CompletedDrivers = drivers(st.GetActiveDrivers(), true), drivers(st.GetCompletedDrivers(), false)
	return p
}

// appCores are the cores a holds, or held at most once it ended.
func appCores(a *masterv1.ApplicationInfo) int32 {
	if a.GetEndTime() != nil {
		return a.GetCoresPeak()
	}
	return a.GetCoresGranted()
}

// newestFirst is the completed applications, the last to end first.
func newestFirst(apps []*masterv1.ApplicationInfo) []*masterv1.ApplicationInfo {
	out := slices.Clone(apps)
	slices.Reverse(out)
	return out
}

func appDuration(a *masterv1.ApplicationInfo, now time.Time) time.Duration {
	end := now
	if a.GetEndTime() != nil {
		end = a.GetEndTime().AsTime()
	}
	return end.Sub(a.GetStartTime().AsTime())
}

// launchP50 is the median time from scheduled to first task of a's
// executors whose launch is known; 0 if none is.
func launchP50(a *masterv1.ApplicationInfo) time.Duration {
	var ds []time.Duration
	for _, e := range a.GetExecutors() {
		if e.GetFirstTaskAt() != nil && e.GetScheduledAt() != nil {
			ds = append(ds, e.GetFirstTaskAt().AsTime().Sub(e.GetScheduledAt().AsTime()))
		}
	}
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[(len(ds)-1)/2]
}

func (s *Server) serveIndex(w http.ResponseWriter, r *http.Request, v web.Viewer) {
	s.site.Render(w, r, http.StatusOK, "master", "Overview", v, index(s.clusterState(), s.now()))
}

// appPage is one application's page.
type appPage struct {
	ID, Name, User, State, StatusMessage, DriverURL, DriverID string
	Submitted                                                 time.Time
	Duration                                                  time.Duration
	Cores                                                     int32
	MemoryPerExecutor                                         int64
	TraceID, TraceURL, MetricsURL                             string
	// DriverLogURL is its cluster-mode driver's log pages on its worker.
	DriverLogURL string
	Active       bool
	// Tab is the tab shown, Tabs every tab; Environment is its own tab's.
	Tab         string
	Tabs        []string
	Environment environment
	Events      []appEvent
	Jobs        jobs
	Executors   []executorRow
	Timeline    web.Timeline
}

type executorRow struct {
	ID                             int32
	Worker, WorkerURL, State, Exit string
	Cores                          int32
	Memory                         int64
	// CPU is the CPU it used against its cores (on average while it runs),
	// MemoryPeak its highest resident memory against its limit.
	CPU, MemoryPeak string
	// LogURL is the executor's log pages on its worker, less the stream.
	LogURL string
	// Asked is whether it ended as it was asked to (lifecycle.Unasked).
	Asked bool
	// Tasks is what it ran as its driver counts it — done, failed, their
	// time — while the driver runs; empty otherwise.
	TasksDone, TasksFailed, TaskTime string
}

// executorTasks fills in what each executor ran, from its driver's progress
// (nil: not known).
func (p *appPage) executorTasks(progress *driverv1.GetProgressResponse) {
	ran := map[int32]*driverv1.ExecutorTasks{}
	for _, e := range progress.GetExecutorTasks() {
		ran[e.GetExecutorId()] = e
	}
	for i := range p.Executors {
		if e, ok := ran[p.Executors[i].ID]; ok {
			p.Executors[i].TasksDone, p.Executors[i].TasksFailed = fmt.Sprint(e.GetTasksDone()), fmt.Sprint(e.GetTasksFailed())
			p.Executors[i].TaskTime = web.FormatDuration(e.GetTaskTime().AsDuration())
		}
	}
}

func (s *Server) serveApp(w http.ResponseWriter, r *http.Request, v web.Viewer) {
	id := r.PathValue("id")
	if err := ids.ValidateApp(id); err != nil {
		s.site.Fail(w, r, rpc.Error(err))
		return
	}
	st := s.clusterState()
	var app *masterv1.ApplicationInfo
	active := false
	for _, a := range st.GetActiveApps() {
		if a.GetId() == id {
			app, active = a, true
		}
	}
	for _, a := range st.GetCompletedApps() {
		if a.GetId() == id {
			app = a
		}
	}
	if app == nil {
		s.site.Error(w, r, http.StatusNotFound, "no application "+id+": it never ran here, or it ended long enough ago to be forgotten")
		return
	}
	p := s.appPage(st, app, active, appTab(r.URL.Query().Get("tab")))
	switch {
	case p.Tab == "jobs":
		p.Jobs = s.driverProgress(r.Context(), id)
	case p.Tab == "executors" && active:
		// What each executor ran is the driver's count, while it runs.
		p.executorTasks(s.driverProgress(r.Context(), id).Progress)
	}
	s.site.Render(w, r, http.StatusOK, "app", id, v, p)
}

// appPage is a's page given the cluster state st.
func (s *Server) appPage(st *masterv1.GetClusterStateResponse, a *masterv1.ApplicationInfo, active bool, tab string) appPage {
	workerURLs := map[string]string{}
	for _, w := range st.GetWorkers() {
		workerURLs[w.GetId()] = w.GetWorkerUrl()
	}
	p := appPage{
		ID: a.GetId(), Name: a.GetDescription().GetName(), User: a.GetOwner(), State: lifecycle.Name(a.GetState()), StatusMessage: a.GetStatusMessage(),
		DriverURL: a.GetDriverUrl(), DriverID: a.GetDriverId(), Submitted: a.GetStartTime().AsTime(),
		Duration: appDuration(a, s.now()), Cores: appCores(a), MemoryPerExecutor: a.GetDescription().GetMemoryPerExecutorMib(),
		TraceID: a.GetTraceId(), Active: active, Tab: tab, Tabs: appTabs, Environment: appEnvironment(a.GetDescription()),
	}
	for _, d := range append(st.GetActiveDrivers(), st.GetCompletedDrivers()...) {
		if d.GetId() == p.DriverID {
			p.DriverLogURL = driverLogURL(workerURLs[d.GetWorkerId()], d.GetId())
		}
	}
	if base := strings.TrimRight(s.cfg.UI.JaegerURL, "/"); base != "" && p.TraceID != "" {
		p.TraceURL = base + "/trace/" + p.TraceID
	}
	if base := strings.TrimRight(s.cfg.UI.GrafanaURL, "/"); base != "" {
		end := p.Submitted.Add(p.Duration)
		q := url.Values{"from": {fmt.Sprint(p.Submitted.Add(-time.Minute).UnixMilli())}, "to": {fmt.Sprint(end.Add(time.Minute).UnixMilli())}}
		p.MetricsURL = base + "/d/" + launchDashboard + "?" + q.Encode()
	}
	var launches []web.Launch
	for _, e := range a.GetExecutors() {
		row := executorRow{
			ID: e.GetId(), Worker: e.GetWorkerId(), WorkerURL: workerURLs[e.GetWorkerId()], State: lifecycle.Name(e.GetState()),
			Cores: e.GetCores(), Memory: e.GetMemoryMib(), Exit: web.ExitText(e.ExitStatus, e.GetMessage()),
			MemoryPeak: resources.FormatBytes(e.GetUsage().GetMemoryPeakBytes()) + " / " + resources.FormatMiB(e.GetMemoryMib()),
			Asked:      lifecycle.ExecutorFinished(e.GetState()) && !lifecycle.Unasked(e.GetState(), e.ExitStatus),
		}
		var ran time.Duration
		if e.GetState() == masterv1.ExecutorState_EXECUTOR_STATE_RUNNING && e.GetStartedAt() != nil {
			ran = s.now().Sub(e.GetStartedAt().AsTime())
		}
		row.CPU = resources.FormatCPU(e.GetUsage().GetCpuSeconds(), e.GetCores(), ran)
		if row.WorkerURL != "" {
			row.LogURL = fmt.Sprintf("%s/log/%s/%d", row.WorkerURL, a.GetId(), e.GetId())
		}
		p.Executors = append(p.Executors, row)
		launches = append(launches, launchOf(e))
	}
	p.Timeline = web.NewTimeline(launches)
	p.Events = appEvents(a, workerURLs)
	return p
}

// killAppPage is the kill button of an application.
func (s *Server) killAppPage(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := s.KillApplication(r.Context(), connect.NewRequest(&masterv1.KillApplicationRequest{AppId: id})); err != nil {
		s.site.Fail(w, r, err)
		return
	}
	http.Redirect(w, r, "/app/"+id, http.StatusSeeOther)
}

// killDriverPage is the kill button of a driver.
func (s *Server) killDriverPage(w http.ResponseWriter, r *http.Request) {
	if _, err := s.KillDriver(r.Context(), connect.NewRequest(&masterv1.KillDriverRequest{DriverId: r.PathValue("id")})); err != nil {
		s.site.Fail(w, r, err)
		return
	}
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// causes are the words for why an executor was asked for.
var causes = map[masterv1.ExecutorCause]string{
	masterv1.ExecutorCause_EXECUTOR_CAUSE_INITIAL:            "initial",
	masterv1.ExecutorCause_EXECUTOR_CAUSE_DYNAMIC_ALLOCATION: "dynamic allocation",
	masterv1.ExecutorCause_EXECUTOR_CAUSE_REPLACEMENT:        "replacement",
}

// launchOf is e's launch on the timeline: from its request (its scheduling,
// for one adopted by a recovering master) to its first task, failed where
// it ended, without being asked to, before it registered.
func launchOf(e *masterv1.ExecutorInfo) web.Launch {
	l := web.Launch{Executor: e.GetId(), Cause: causes[e.GetRequestedFor()]}
	requested := e.GetRequestedAt()
	if requested == nil {
		requested = e.GetScheduledAt()
	}
	for i, t := range []*timestamppb.Timestamp{requested, e.GetScheduledAt(), e.GetLaunchedAt(), e.GetStartedAt(), e.GetBootedAt(), e.GetPropsRetrievedAt(), e.GetRegisteredAt(), e.GetFirstTaskAt()} {
		l.At[i] = when(t)
	}
	if e.GetRegisteredAt() == nil && lifecycle.Unasked(e.GetState(), e.ExitStatus) {
		l.Failed, l.Ended = cmp.Or(e.GetMessage(), lifecycle.Name(e.GetState())), when(e.GetRemovedAt())
	}
	return l
}

// driverLogURL is a cluster-mode driver's log pages on its worker, at
// workerURL, less the stream; "" when its worker is not known.
func driverLogURL(workerURL, id string) string {
	if workerURL == "" {
		return ""
	}
	return workerURL + "/log/" + id
}
