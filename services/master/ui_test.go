package master

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/glint-cluster/glint/dashboards"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/web"
)

func TestTheMetricsLinkOpensGrafanasLaunchDashboard(t *testing.T) {
	if launchDashboard != dashboards.LaunchUID {
		t.Errorf("the web UI links dashboard %q, Grafana's launch dashboard is %q", launchDashboard, dashboards.LaunchUID)
	}
}

func TestExecutorsCarryTheirWholeLaunchToTheTimeline(t *testing.T) {
	c := newCluster(t, Config{})
	wp, dp := newPeer(t), newPeer(t)
	worker := c.registerWorker(t, wp, 7078, 2, 4096)
	app := c.registerApp(t, dp, appDesc(512, 1))
	at := func(ms int) *timestamppb.Timestamp {
		return timestamppb.New(c.clock.Now().Add(time.Duration(ms) * time.Millisecond))
	}
	if _, err := c.client.ExecutorStateChanged(context.Background(), connect.NewRequest(&masterv1.ExecutorStateChangedRequest{
		AppId: app, ExecutorId: 0, State: masterv1.ExecutorState_EXECUTOR_STATE_RUNNING, WorkerId: worker, LaunchedAt: at(1), StartedAt: at(2),
	})); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		req  *masterv1.ReportExecutorLaunchRequest
		code connect.Code
	}{
		"unknown app":      {&masterv1.ReportExecutorLaunchRequest{AppId: "app-20261129140000-0099", ExecutorId: 0}, connect.CodeNotFound},
		"unknown executor": {&masterv1.ReportExecutorLaunchRequest{AppId: app, ExecutorId: 7}, connect.CodeNotFound},
		"path in app id":   {&masterv1.ReportExecutorLaunchRequest{AppId: "../../etc", ExecutorId: 0}, connect.CodeInvalidArgument},
		"negative id":      {&masterv1.ReportExecutorLaunchRequest{AppId: app, ExecutorId: -1}, connect.CodeInvalidArgument},
		"invalid time":     {&masterv1.ReportExecutorLaunchRequest{AppId: app, ExecutorId: 0, FirstTaskAt: &timestamppb.Timestamp{Nanos: -1}}, connect.CodeInvalidArgument},
		"invalid boot":     {&masterv1.ReportExecutorLaunchRequest{AppId: app, ExecutorId: 0, BootedAt: &timestamppb.Timestamp{Seconds: -1e12}}, connect.CodeInvalidArgument},
		"boot in 9999":     {&masterv1.ReportExecutorLaunchRequest{AppId: app, ExecutorId: 0, BootedAt: timestamppb.New(time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC))}, connect.CodeInvalidArgument},
		"task a day off":   {&masterv1.ReportExecutorLaunchRequest{AppId: app, ExecutorId: 0, FirstTaskAt: at(-25 * 3600 * 1000)}, connect.CodeInvalidArgument},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := c.client.ReportExecutorLaunch(context.Background(), connect.NewRequest(tc.req)); connect.CodeOf(err) != tc.code {
				t.Fatalf("got %v, want %v", err, tc.code)
			}
		})
	}
	if _, err := c.client.ReportExecutorLaunch(context.Background(), connect.NewRequest(&masterv1.ReportExecutorLaunchRequest{
		AppId: app, ExecutorId: 0, BootedAt: at(3), PropsRetrievedAt: at(4), RegisteredAt: at(5), FirstTaskAt: at(6),
	})); err != nil {
		t.Fatal(err)
	}
	e := c.app(t, app).GetExecutors()[0]
	got := []*timestamppb.Timestamp{e.GetRequestedAt(), e.GetScheduledAt(), e.GetLaunchedAt(), e.GetStartedAt(), e.GetBootedAt(), e.GetPropsRetrievedAt(), e.GetRegisteredAt(), e.GetFirstTaskAt()}
	for i, want := range []*timestamppb.Timestamp{at(0), at(0), at(1), at(2), at(3), at(4), at(5), at(6)} {
		if !got[i].AsTime().Equal(want.AsTime()) {
			t.Errorf("launch step %d (the end of %s) at %v, want %v", i, append([]string{"request"}, web.Phases[:]...)[i], got[i].AsTime(), want.AsTime())
		}
	}
	if p50 := launchP50(c.app(t, app)); p50 != 6*time.Millisecond {
		t.Errorf("launch p50 %v, want 6ms (scheduled → first task)", p50)
	}
	// An ended application's executors still take the driver's report: it
	// may arrive after the application ended.
	if _, err := c.client.UnregisterApplication(context.Background(), connect.NewRequest(&masterv1.UnregisterApplicationRequest{AppId: app})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.client.ReportExecutorLaunch(context.Background(), connect.NewRequest(&masterv1.ReportExecutorLaunchRequest{
		AppId: app, ExecutorId: 0, PropsRetrievedAt: at(4), RegisteredAt: at(5), FirstTaskAt: at(7),
	})); err != nil {
		t.Errorf("report on an ended application's executor: %v", err)
	}
	if first := c.app(t, app).GetExecutors()[0].GetFirstTaskAt(); !first.AsTime().Equal(at(7).AsTime()) {
		t.Errorf("first task at %v after the late report, want %v", first.AsTime(), at(7).AsTime())
	}
}

// BenchmarkMasterPage renders the master's web page with 1,000 workers and
// 200 applications for a browser (gzip), reporting the page's size as sent
// and unpacked alongside time and memory.
func BenchmarkMasterPage(b *testing.B) {
	s, err := New(Config{URL: "http://master.test:7077"})
	if err != nil {
		b.Fatal(err)
	}
	defer s.cancel()
	registerWorkers(b, s, 1000)
	// Applications larger than any worker wait: the page shows them without
	// the benchmark launching anything.
	for range 200 {
		if _, err := s.RegisterApplication(context.Background(), connect.NewRequest(&masterv1.RegisterApplicationRequest{
			AppToken: rpc.NewToken(), MasterToken: rpc.NewToken(), Description: appDesc(1<<20, 1), DriverUrl: "http://driver.test:4040",
		})); err != nil {
			b.Fatal(err)
		}
	}
	h := s.Handler()
	var page *bytes.Buffer
	for b.Loop() {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("Accept-Encoding", "gzip, deflate, br")
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || rec.Header().Get("Content-Encoding") != "gzip" {
			b.Fatalf("GET /: %d %q", rec.Code, rec.Header().Get("Content-Encoding"))
		}
		page = rec.Body
	}
	sent := page.Len()
	gz, err := gzip.NewReader(page)
	if err != nil {
		b.Fatal(err)
	}
	unpacked, err := io.Copy(io.Discard, gz)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ReportMetric(float64(sent), "gzip-bytes/page")
	b.ReportMetric(float64(unpacked), "bytes/page")
}
