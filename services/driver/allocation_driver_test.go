package driver_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/glint-cluster/glint/internal/servicetest"
	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	"github.com/glint-cluster/glint/pkg/app"
	"github.com/glint-cluster/glint/pkg/redact"
	"github.com/glint-cluster/glint/pkg/resources"
	"github.com/glint-cluster/glint/pkg/rpc/rpctest"
	"github.com/glint-cluster/glint/pkg/telemetry"
	"github.com/glint-cluster/glint/services/driver"
)

// allocationMaster is a master that admits one application, records the
// executor targets it is sent and holds each KillExecutors until the test
// lets it answer.
type allocationMaster struct {
	masterv1connect.UnimplementedMasterServiceHandler
	targets chan int32
	killing chan []int32
	proceed chan struct{}
}

func (m *allocationMaster) RegisterApplication(context.Context, *connect.Request[masterv1.RegisterApplicationRequest]) (*connect.Response[masterv1.RegisterApplicationResponse], error) {
	return connect.NewResponse(&masterv1.RegisterApplicationResponse{AppId: "app-20261130120000-0000"}), nil
}

func (m *allocationMaster) RequestExecutors(_ context.Context, r *connect.Request[masterv1.RequestExecutorsRequest]) (*connect.Response[masterv1.RequestExecutorsResponse], error) {
	m.targets <- r.Msg.GetRequestedTotal()
	return connect.NewResponse(&masterv1.RequestExecutorsResponse{}), nil
}

func (m *allocationMaster) KillExecutors(_ context.Context, r *connect.Request[masterv1.KillExecutorsRequest]) (*connect.Response[masterv1.KillExecutorsResponse], error) {
	m.killing <- r.Msg.GetExecutorIds()
	<-m.proceed
	return connect.NewResponse(&masterv1.KillExecutorsResponse{KilledExecutorIds: r.Msg.GetExecutorIds()}), nil
}

func (m *allocationMaster) UnregisterApplication(context.Context, *connect.Request[masterv1.UnregisterApplicationRequest]) (*connect.Response[masterv1.UnregisterApplicationResponse], error) {
	return connect.NewResponse(&masterv1.UnregisterApplicationResponse{}), nil
}

// startAllocationMaster serves an allocationMaster on loopback.
func startAllocationMaster(t *testing.T) (*allocationMaster, string) {
	t.Helper()
	m := &allocationMaster{targets: make(chan int32, 100), killing: make(chan []int32, 2), proceed: make(chan struct{})}
	mux := http.NewServeMux()
	mux.Handle(masterv1connect.NewMasterServiceHandler(m))
	return m, rpctest.Serve(t, mux)
}

// allocatingConf turns dynamic allocation on with short timeouts.
var allocatingConf = map[string]string{
	"spark.dynamicAllocation.enabled": "true", "spark.dynamicAllocation.initialExecutors": "2",
	"spark.dynamicAllocation.executorIdleTimeout": "200ms", "spark.dynamicAllocation.schedulerBacklogTimeout": "100ms",
}

// runUntil runs d's application in the background until finish is closed.
func runUntil(t *testing.T, d *driver.Driver) (ran chan error) {
	t.Helper()
	ran = make(chan error, 1)
	go func() { ran <- d.Run(context.Background()) }()
	tooltest.Eventually(t, "the application registered", func() bool { return d.AppID() != "" })
	return ran
}

func TestReleasedExecutorsGetNoTasksAndAreForgottenWhenTheMasterKilledThem(t *testing.T) {
	m, url := startAllocationMaster(t)

	var released, other atomic.Int32
	finish := make(chan struct{})
	a := &app.App{
		Name: "t",
		Run: func(ctx context.Context, _ app.Context, _ []string) error {
			<-finish
			return nil
		},
		Tasks: map[string]app.TaskFunc{"task": func(_ context.Context, in []byte) ([]byte, error) { released.Add(1); return in, nil }},
	}
	b := &app.App{Name: "t", Run: a.Run, Tasks: map[string]app.TaskFunc{"task": func(_ context.Context, in []byte) ([]byte, error) { other.Add(1); return in, nil }}}
	recorder := tracetest.NewSpanRecorder()
	reg := prometheus.NewRegistry()
	d, err := servicetest.NewDriver(t, driver.Config{
		Masters: []string{url}, App: a, ExecutorCommand: []string{"/bin/false"}, ExecutorCores: 1, Conf: allocatingConf,
		Registry: reg, Instruments: telemetry.Instruments{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))},
	})
	if err != nil {
		t.Fatal(err)
	}
	ran := runUntil(t, d)
	startExecutor(t, d, a, 0, 1)
	startExecutor(t, d, a, 1, 1)

	// Both idle out; while the master kills them, a job arrives: its
	// tasks wait for a new executor rather than go to them.
	ids := <-m.killing
	slices.Sort(ids)
	if !slices.Equal(ids, []int32{0, 1}) {
		t.Fatalf("released %v, want the two idle executors", ids)
	}
	job := make(chan error, 1)
	go func() {
		_, err := d.RunTasks(context.Background(), "task", inputs(2))
		job <- err
	}()
	startExecutor(t, d, b, 2, 1)
	if err := <-job; err != nil {
		t.Fatal(err)
	}
	if released.Load() != 0 || other.Load() != 2 {
		t.Errorf("released executors ran %d tasks, the new one %d; want 0 and 2", released.Load(), other.Load())
	}
	// The master killed them: the driver forgets them (it hears nothing
	// more of them from the master).
	close(m.proceed)
	tooltest.Eventually(t, "the driver to stop counting the released executors", func() bool {
		return gathered(t, reg, "glint_driver_executors_registered") <= 1
	})
	if n := gathered(t, reg, "glint_driver_executors_released_total"); n < 2 {
		t.Errorf("%v executors counted released, want at least the 2", n)
	}
	close(finish)
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	spans := map[string]int{}
	for _, s := range recorder.Ended() {
		spans[s.Name()]++
	}
	if spans["requestExecutors"] == 0 || spans["killExecutors"] == 0 {
		t.Errorf("spans %v; want requestExecutors and killExecutors", spans)
	}
}

// gathered is the value of the metric name (one series) in reg.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			m := f.GetMetric()[0]
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func TestABusyExecutorIsNotReleasedAsIdle(t *testing.T) {
	m, url := startAllocationMaster(t)
	started, release, finish := make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	a := &app.App{
		Name: "t",
		Run:  func(context.Context, app.Context, []string) error { <-finish; return nil },
		Tasks: map[string]app.TaskFunc{"task": func(_ context.Context, in []byte) ([]byte, error) {
			started <- struct{}{}
			<-release
			return in, nil
		}},
	}
	d, err := servicetest.NewDriver(t, driver.Config{
		Masters: []string{url}, App: a, ExecutorCommand: []string{"/bin/false"}, ExecutorCores: 1, Conf: allocatingConf,
	})
	if err != nil {
		t.Fatal(err)
	}
	ran := runUntil(t, d)
	// Executor 0 became ready before executor 1, and then got the task.
	startExecutor(t, d, a, 0, 1)
	job := make(chan error, 1)
	go func() {
		_, err := d.RunTasks(context.Background(), "task", inputs(1))
		job <- err
	}()
	<-started
	startExecutor(t, d, a, 1, 1)
	// One task needs one executor: the idle one goes, not the busy one.
	if ids := <-m.killing; !slices.Equal(ids, []int32{1}) {
		t.Errorf("released %v, want [1], the idle executor", ids)
	}
	close(m.proceed)
	close(release)
	if err := <-job; err != nil {
		t.Fatal(err)
	}
	close(finish)
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
}

// describingMaster is an allocationMaster that keeps the description of the
// application it admits.
type describingMaster struct {
	*allocationMaster
	desc atomic.Pointer[masterv1.ApplicationDescription]
}

func (m *describingMaster) RegisterApplication(ctx context.Context, r *connect.Request[masterv1.RegisterApplicationRequest]) (*connect.Response[masterv1.RegisterApplicationResponse], error) {
	m.desc.Store(r.Msg.GetDescription())
	return m.allocationMaster.RegisterApplication(ctx, r)
}

// The application's description carries its properties for its Environment
// tab, their secrets hidden before they leave the driver.
func TestTheDescriptionCarriesThePropertiesTheirSecretsHidden(t *testing.T) {
	m := &describingMaster{allocationMaster: &allocationMaster{targets: make(chan int32, 100)}}
	mux := http.NewServeMux()
	mux.Handle(masterv1connect.NewMasterServiceHandler(m))
	url := rpctest.Serve(t, mux)
	finish := make(chan struct{})
	defer close(finish)
	a := &app.App{Name: "t", Run: func(context.Context, app.Context, []string) error { <-finish; return nil }}
	d, err := servicetest.NewDriver(t, driver.Config{
		Masters: []string{url}, App: a, ExecutorCommand: []string{"/bin/false"},
		Conf: map[string]string{"spark.authenticate.secret": "s3cr3t", "spark.glint.shown": "1",
			"spark.glint.long": strings.Repeat("x", resources.MaxArgBytes+1), strings.Repeat("k", resources.MaxNameBytes+1): "1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	runUntil(t, d)
	conf := m.desc.Load().GetConf()
	if conf["spark.glint.shown"] != "1" || conf["spark.authenticate.secret"] != redact.Text {
		t.Errorf("described properties %q: want spark.glint.shown as it is and the secret hidden", conf)
	}
	// A property the master would refuse does not keep it from registering:
	// a value too long is said to be, a name too long left out.
	if err := resources.CheckConf(conf); err != nil || !strings.Contains(conf["spark.glint.long"], "too long to show") || len(conf) != 3 {
		t.Errorf("described properties %.200q (%v): want them within the master's limits, the long value said to be too long", conf, err)
	}
}
