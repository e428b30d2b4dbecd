package master

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
)

// Each executor is asked for when its application first wanted it: at its
// registration, when its driver asked for more, when one it replaces ended;
// its launch on the timeline starts then, labelled with why.
func TestEachExecutorsLaunchStartsAtItsOwnRequest(t *testing.T) {
	c := newCluster(t, Config{})
	wp, dp := newPeer(t), newPeer(t)
	registered := c.clock.Now()
	app := c.registerApp(t, dp, appDesc(512, 1))
	request := func(n int32) {
		t.Helper()
		if _, err := c.client.RequestExecutors(context.Background(), connect.NewRequest(&masterv1.RequestExecutorsRequest{AppId: app, RequestedTotal: n})); err != nil {
			t.Fatal(err)
		}
	}
	// Its first ask, before it holds any executor, is for its initial ones.
	request(1)
	c.clock.Advance(time.Second)
	worker := c.registerWorker(t, wp, 7078, 4, 4096)
	c.clock.Advance(2 * time.Second)
	asked := c.clock.Now()
	request(2)
	c.clock.Advance(2 * time.Second)
	// One runs, so the application outlives a lost one; its worker's clock
	// says the year 9999, a time its report is taken without.
	if _, err := c.client.ExecutorStateChanged(context.Background(), connect.NewRequest(&masterv1.ExecutorStateChangedRequest{
		AppId: app, ExecutorId: 1, State: masterv1.ExecutorState_EXECUTOR_STATE_RUNNING, WorkerId: worker,
		StartedAt: timestamppb.New(time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)),
	})); err != nil {
		t.Fatal(err)
	}
	lost := c.clock.Now()
	if _, err := c.client.ExecutorStateChanged(context.Background(), connect.NewRequest(&masterv1.ExecutorStateChangedRequest{
		AppId: app, ExecutorId: 0, State: masterv1.ExecutorState_EXECUTOR_STATE_LOST, WorkerId: worker, Message: "worker lost",
	})); err != nil {
		t.Fatal(err)
	}
	// Its replacement is placed once the backoff after a failure passed.
	c.clock.Advance(time.Minute)
	c.srv.wake()
	want := map[int32]struct {
		at    time.Time
		cause masterv1.ExecutorCause
		label string
	}{
		0: {registered, masterv1.ExecutorCause_EXECUTOR_CAUSE_INITIAL, "initial"},
		1: {asked, masterv1.ExecutorCause_EXECUTOR_CAUSE_DYNAMIC_ALLOCATION, "dynamic allocation"},
		2: {lost, masterv1.ExecutorCause_EXECUTOR_CAUSE_REPLACEMENT, "replacement"},
	}
	execs := c.app(t, app).GetExecutors()
	if execs[1].GetStartedAt() != nil {
		t.Errorf("executor 1 started at %v, as its worker's clock said: want no time kept", execs[1].GetStartedAt().AsTime())
	}
	if len(execs) != len(want) {
		t.Fatalf("%d executors, want %d: %v", len(execs), len(want), execs)
	}
	page := c.get(t, "/app/"+app)
	for _, e := range execs {
		w := want[e.GetId()]
		if !e.GetRequestedAt().AsTime().Equal(w.at) || e.GetRequestedFor() != w.cause {
			t.Errorf("executor %d asked for at %v for %v, want at %v for %v", e.GetId(), e.GetRequestedAt().AsTime(), e.GetRequestedFor(), w.at, w.cause)
		}
		// Its row's first bar, its schedule, starts at the axis' start.
		row := `data-cause="` + w.label + `"><text class="label" x="4"`
		i := strings.Index(page, row)
		if i < 0 {
			t.Errorf("no timeline row for executor %d labelled %s", e.GetId(), w.label)
			continue
		}
		if bar := page[i:]; !strings.Contains(bar[:strings.Index(bar, "</g>")], `data-phase="schedule" x="164"`) {
			t.Errorf("executor %d's schedule does not start at its request:\n%s", e.GetId(), bar[:strings.Index(bar, "</g>")])
		}
	}
	if !strings.Contains(page, `<td class="failed">in LaunchExecutor: worker lost</td>`) {
		t.Errorf("the lost executor's launch is not marked failed where it was:\n%s", page)
	}
	// Those killed as it ends were asked to end: not shown as failures.
	if _, err := c.client.UnregisterApplication(context.Background(), connect.NewRequest(&masterv1.UnregisterApplicationRequest{AppId: app})); err != nil {
		t.Fatal(err)
	}
	page = c.get(t, "/app/"+app)
	for _, cell := range []string{`<td class="state KILLED asked">KILLED</td>`, `<td class="state LOST">LOST</td>`} {
		if !strings.Contains(page, cell) {
			t.Errorf("the executors table lacks %s", cell)
		}
	}
}
