package master

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/driver/v1/driverv1connect"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/redact"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/rpc/rpctest"
)

// get is the body of c's page path, which must answer 200.
func (c *cluster) get(t *testing.T, path string) string {
	t.Helper()
	resp, err := http.Get(c.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
	}
	return string(body)
}

func TestTheEnvironmentTabShowsTheApplicationsConfRedacted(t *testing.T) {
	c := newCluster(t, Config{})
	d := appDesc(512, 1)
	d.Command = secretAppCommand()
	d.ModifyAcls = []string{"bob"}
	app := c.registerApp(t, newPeer(t), d)
	page := c.get(t, "/app/"+app+"?tab=environment")
	for _, want := range []string{
		`<tr><td>spark.executor.memory</td><td>1g</td></tr>`,
		`<tr><td>spark.authenticate.secret</td><td>` + redact.Text + `</td></tr>`,
		`<tr><td>spark.ssl.keyPassword</td><td>` + redact.Text + `</td></tr>`,
		`<tr><td>PLAIN</td><td>shown</td></tr>`,
		`<tr><td>MY_TOKEN</td><td>` + redact.Text + `</td></tr>`,
		`<p id="modify-acls">bob</p>`,
		`<a href="?tab=environment" data-tab="environment" class="current" aria-current="page">`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the environment tab lacks %s", want)
		}
	}
	for _, s := range secrets {
		if strings.Contains(page, s) {
			t.Errorf("the environment tab shows the secret %s", s)
		}
	}
	if strings.Contains(page, `id="executors"`) {
		t.Error("the environment tab shows the executors table too")
	}
	executors := c.get(t, "/app/"+app)
	if !strings.Contains(executors, `id="executors"`) || strings.Contains(executors, `id="conf"`) {
		t.Error("the application's page does not open on its executors tab alone")
	}
}

// The properties the driver described are shown, sorted, in place of its
// command's, with what the master's pattern takes for a secret hidden too.
func TestTheEnvironmentTabShowsTheDriversProperties(t *testing.T) {
	c := newCluster(t, Config{})
	d := appDesc(512, 1)
	d.Conf = map[string]string{"spark.glint.b": "2", "spark.glint.a": "1", "spark.my.password": "hunter2"}
	app := c.registerApp(t, newPeer(t), d)
	page := c.get(t, "/app/"+app+"?tab=environment")
	want := `<tbody><tr><td>spark.glint.a</td><td>1</td></tr><tr><td>spark.glint.b</td><td>2</td></tr><tr><td>spark.my.password</td><td>` + redact.Text + `</td></tr></tbody>`
	if !strings.Contains(page, want) || strings.Contains(page, "hunter2") {
		t.Errorf("the environment tab lacks\n%s\nor shows the secret", want)
	}
	d.Conf = map[string]string{"": "no name"}
	if _, err := c.client.RegisterApplication(context.Background(), connect.NewRequest(&masterv1.RegisterApplicationRequest{AppToken: rpc.NewToken(), MasterToken: rpc.NewToken(),
		Description: d, DriverUrl: newPeer(t).url})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("a property without a name: %v, want invalid_argument", err)
	}
}

func TestTheApplicationPageRefreshesWhileItRunsOnly(t *testing.T) {
	c := newCluster(t, Config{})
	app := c.registerApp(t, newPeer(t), appDesc(512, 1))
	const refresh = `<meta http-equiv="refresh" content="5" id="refresh">`
	if !strings.Contains(c.get(t, "/app/"+app+"?tab=environment"), refresh) {
		t.Error("a running application's page does not refresh itself")
	}
	if _, err := c.client.UnregisterApplication(context.Background(), connect.NewRequest(&masterv1.UnregisterApplicationRequest{AppId: app})); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(c.get(t, "/app/"+app), refresh) {
		t.Error("an ended application's page still refreshes itself")
	}
}

func TestTheEventsTabShowsExecutorsAddedAndRemovedWithWhyAndWhen(t *testing.T) {
	c := newCluster(t, Config{})
	wp := newPeer(t)
	worker := c.registerWorker(t, wp, 7078, 1, 4096)
	app := c.registerApp(t, newPeer(t), appDesc(512, 1))
	c.clock.Advance(3 * time.Second)
	if _, err := c.client.ExecutorStateChanged(context.Background(), connect.NewRequest(&masterv1.ExecutorStateChangedRequest{
		AppId: app, ExecutorId: 0, State: masterv1.ExecutorState_EXECUTOR_STATE_FAILED, WorkerId: worker, Message: "out of memory", ExitStatus: ptr[int32](137),
	})); err != nil {
		t.Fatal(err)
	}
	page := c.get(t, "/app/"+app+"?tab=events")
	for _, want := range []string{
		`<tr class="event added" data-executor="0"><td>2026-11-29 14:00:00Z</td><td>0</td><td>added</td>` + "\n" + `<td><a href="` + wp.url + `/">` + worker + `</a></td><td>cores 1, memory 512.0 MiB; asked for: initial</td></tr>`,
		`<tr class="event removed" data-executor="0"><td>2026-11-29 14:00:03Z</td><td>0</td><td>removed</td>` + "\n" + `<td><a href="` + wp.url + `/">` + worker + `</a></td><td>FAILED: out of memory</td></tr>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the events tab lacks\n%s\nin\n%s", want, page)
		}
	}
}

// progressDriver answers GetProgress for its application.
type progressDriver struct{ driverPeer }

func (d *progressDriver) GetProgress(_ context.Context, r *connect.Request[driverv1.GetProgressRequest]) (*connect.Response[driverv1.GetProgressResponse], error) {
	started := time.Date(2026, 11, 29, 13, 59, 0, 0, time.UTC)
	return connect.NewResponse(&driverv1.GetProgressResponse{Executors: 2, Registered: 1, Tasks: 10, TasksDone: 4,
		TaskSets: []*driverv1.TaskSetProgress{
			{Id: 0, Task: "t/first", Tasks: 4, Succeeded: 4, FailedAttempts: 1, Failures: []string{"FAILED on executor 0: boom"},
				StartedAt: timestamppb.New(started), EndedAt: timestamppb.New(started.Add(1500 * time.Millisecond)), TaskTime: durationpb.New(3 * time.Second)},
			{Id: 1, Task: "t/second", Tasks: 6, Running: 2, StartedAt: timestamppb.New(started.Add(30 * time.Second))},
		},
		ExecutorTasks: []*driverv1.ExecutorTasks{{ExecutorId: 0, TasksDone: 4, TasksFailed: 1, TaskTime: durationpb.New(3 * time.Second)}},
	}), nil
}

func TestTheJobsTabShowsTheDriversProgressOrWhyNot(t *testing.T) {
	c := newCluster(t, Config{})
	p := &peer{messages: make(chan string, 1000)}
	mux := http.NewServeMux()
	mux.Handle(driverv1connect.NewDriverServiceHandler(&progressDriver{driverPeer{p}}))
	p.url = rpctest.Serve(t, mux)
	app := c.registerApp(t, p, appDesc(512, 1))
	page := c.get(t, "/app/"+app+"?tab=jobs")
	for _, want := range []string{`<dd id="tasks">4 of 10</dd>`, `<dd id="registered">1 of 2</dd>`,
		// Newest first; the running one's duration up to now (the master's
		// clock: 14:00:00).
		`<tr class="task-set" data-set="1"><td>1</td><td>t/second</td><td class="state RUNNING">RUNNING</td><td>0 / 6</td><td>2</td><td>0</td>` + "\n" + `<td>30s</td>`,
		`<tr class="task-set" data-set="0"><td>0</td><td>t/first</td><td class="state SUCCEEDED">SUCCEEDED</td><td>4 / 4</td><td>0</td><td>1</td>` + "\n" +
			`<td>1.5s</td><td>3s</td><td class="failures"><p>FAILED on executor 0: boom</p></td></tr>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the jobs tab lacks %s", want)
		}
	}
	// Its executors tab shows what each executor ran, as the driver counts it.
	c.registerWorker(t, newPeer(t), 7078, 1, 4096)
	if page := c.get(t, "/app/"+app); !strings.Contains(page, `<td class="tasks-done">4</td><td class="tasks-failed">1</td><td class="task-time">3s</td>`) {
		t.Errorf("the executors tab lacks executor 0's tasks:\n%s", page)
	}
	silent := c.registerApp(t, newPeer(t), appDesc(512, 1))
	if page := c.get(t, "/app/"+silent+"?tab=jobs"); !strings.Contains(page, `<p id="progress-error">driver not reachable: `) {
		t.Error("the jobs tab of a driver that does not answer does not say so")
	}
	if _, err := c.client.UnregisterApplication(context.Background(), connect.NewRequest(&masterv1.UnregisterApplicationRequest{AppId: app})); err != nil {
		t.Fatal(err)
	}
	if page := c.get(t, "/app/"+app+"?tab=jobs"); !strings.Contains(page, `<p id="progress-error">the application ended: its driver is gone</p>`) {
		t.Error("the jobs tab of an ended application asks its driver")
	}
}
