package master

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/driver/v1/driverv1connect"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/pkg/resources"
	"github.com/glint-cluster/glint/pkg/web"
)

// appTabs are the tabs of an application's page, the first shown by default.
var appTabs = []string{"executors", "environment", "events", "jobs"}

// appTab is the tab a page request asks for (?tab=), executors unless it
// names another.
func appTab(q string) string {
	if slices.Contains(appTabs, q) {
		return q
	}
	return appTabs[0]
}

// setting is one named value of an application's environment.
type setting struct{ Name, Value string }

// environment is what an application's Environment tab shows of d, whose
// command and properties the master has already redacted (the driver hid
// its secrets; what it took for none, the master's pattern may still hide).
type environment struct {
	// Conf is its properties as its driver described them, sorted by name,
	// else each --conf of its command, in order.
	Conf []setting
	// Args is its whole command; Env its environment, sorted by name.
	Args []string
	Env  []setting
	// ModifyACLs is spark.modify.acls.
	ModifyACLs []string
}

func appEnvironment(d *masterv1.ApplicationDescription) environment {
	c := d.GetCommand()
	env := environment{Args: c.GetArgs(), ModifyACLs: d.GetModifyAcls()}
	for k, v := range d.GetConf() {
		env.Conf = append(env.Conf, setting{k, v})
	}
	slices.SortFunc(env.Conf, func(a, b setting) int { return strings.Compare(a.Name, b.Name) })
	args := c.GetArgs()
	for i := 0; i < len(args) && len(d.GetConf()) == 0; i++ {
		kv, ok := strings.CutPrefix(args[i], "--conf=")
		if !ok && args[i] == "--conf" && i+1 < len(args) {
			i++
			kv, ok = args[i], true
		}
		if ok {
			k, v, _ := strings.Cut(kv, "=")
			env.Conf = append(env.Conf, setting{k, v})
		}
	}
	for k, v := range c.GetEnv() {
		env.Env = append(env.Env, setting{k, v})
	}
	slices.SortFunc(env.Env, func(a, b setting) int { return strings.Compare(a.Name, b.Name) })
	return env
}

// appEvent is one line of an application's event timeline: an executor
// added to it or removed from it.
type appEvent struct {
	At       time.Time
	Executor int32
	// Kind is "added" or "removed"; Worker where the executor ran, WorkerURL
	// its page; Detail what was granted, or why it was removed.
	Kind, Worker, WorkerURL, Detail string
}

// appEvents are a's executors' events, oldest first; workerURLs are the
// workers' pages by id.
func appEvents(a *masterv1.ApplicationInfo, workerURLs map[string]string) []appEvent {
	var out []appEvent
	for _, e := range a.GetExecutors() {
		ev := appEvent{Executor: e.GetId(), Worker: e.GetWorkerId(), WorkerURL: workerURLs[e.GetWorkerId()]}
		added := ev
		added.At, added.Kind = e.GetScheduledAt().AsTime(), "added"
		added.Detail = fmt.Sprintf("cores %d, memory %s", e.GetCores(), resources.FormatMiB(e.GetMemoryMib()))
		if cause := causes[e.GetRequestedFor()]; cause != "" {
			added.Detail += "; asked for: " + cause
		}
		out = append(out, added)
		if e.GetRemovedAt() != nil {
			removed := ev
			removed.At, removed.Kind = e.GetRemovedAt().AsTime(), "removed"
			removed.Detail = lifecycle.Name(e.GetState())
			if exit := web.ExitText(e.ExitStatus, e.GetMessage()); exit != "" {
				removed.Detail += ": " + exit
			}
			out = append(out, removed)
		}
	}
	slices.SortStableFunc(out, func(x, y appEvent) int { return x.At.Compare(y.At) })
	return out
}

// progressTimeout bounds how long the Jobs tab waits for the driver.
const progressTimeout = 2 * time.Second

// jobs is what the Jobs tab shows: the driver's progress, or why there is
// none.
type jobs struct {
	Progress *driverv1.GetProgressResponse
	Sets     []taskSetRow
	Error    string
}

// taskSetRow is one line of the Jobs tab: a task set as its driver counts it.
type taskSetRow struct {
	ID                                        int32
	Task, State                               string
	Tasks, Succeeded, Running, FailedAttempts int32
	Duration, TaskTime                        string
	// Failures are its last failures' messages, Error why it failed.
	Failures []string
	Error    string
}

// Bounds of what a driver's answer shows: its newest task sets, and of each
// its last failures, each clipped.
const (
	maxShownTaskSets = 100
	maxShownFailures = 5
	maxShownBytes    = 512
)

// taskSetRows are p's task sets as the Jobs tab shows them at now, newest
// first; what the driver sent beyond the bounds is left out.
func taskSetRows(p *driverv1.GetProgressResponse, now time.Time) []taskSetRow {
	sets := p.GetTaskSets()
	sets = sets[max(0, len(sets)-maxShownTaskSets):]
	rows := make([]taskSetRow, 0, len(sets))
	for i := len(sets) - 1; i >= 0; i-- {
		ts := sets[i]
		r := taskSetRow{ID: ts.GetId(), Task: clipShown(ts.GetTask()), Tasks: ts.GetTasks(), Succeeded: ts.GetSucceeded(), Running: ts.GetRunning(),
			FailedAttempts: ts.GetFailedAttempts(), TaskTime: web.FormatDuration(ts.GetTaskTime().AsDuration()), Error: clipShown(ts.GetError()), State: "RUNNING"}
		end := now
		if ts.GetEndedAt() != nil {
			end, r.State = ts.GetEndedAt().AsTime(), "SUCCEEDED"
			if r.Error != "" {
				r.State = "FAILED"
			}
		}
		r.Duration = web.FormatDuration(end.Sub(ts.GetStartedAt().AsTime()))
		failures := ts.GetFailures()
		for _, f := range failures[max(0, len(failures)-maxShownFailures):] {
			r.Failures = append(r.Failures, clipShown(f))
		}
		rows = append(rows, r)
	}
	return rows
}

// clipShown is s cut to maxShownBytes, whole runes.
func clipShown(s string) string {
	if len(s) <= maxShownBytes {
		return s
	}
	return strings.ToValidUTF8(s[:maxShownBytes], "") + "…"
}

// driverProgress asks application id's driver how far it has come, for at
// most progressTimeout.
func (s *Server) driverProgress(ctx context.Context, id string) jobs {
	s.mu.Lock()
	var client driverv1connect.DriverServiceClient
	if a := s.apps[id]; a != nil {
		client = a.client
	}
	s.mu.Unlock()
	if client == nil {
		return jobs{Error: "the application ended: its driver is gone"}
	}
	ctx, cancel := context.WithTimeout(ctx, progressTimeout)
	defer cancel()
	resp, err := client.GetProgress(ctx, connect.NewRequest(&driverv1.GetProgressRequest{AppId: id}))
	if err != nil {
		return jobs{Error: "driver not reachable: " + err.Error()}
	}
	return jobs{Progress: resp.Msg, Sets: taskSetRows(resp.Msg, s.now())}
}
