package cli

import (
	"bytes"
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/glint-cluster/glint/internal/process"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	"github.com/glint-cluster/glint/pkg/redact"
	"github.com/glint-cluster/glint/pkg/rpc/rpctest"
)

// leakyMaster answers GetClusterState with commands whose secrets are not
// hidden, as a master older than redaction would.
type leakyMaster struct {
	masterv1connect.UnimplementedMasterServiceHandler
}

func (leakyMaster) GetClusterState(context.Context, *connect.Request[masterv1.GetClusterStateRequest]) (*connect.Response[masterv1.GetClusterStateResponse], error) {
	cmd := func() *masterv1.Command {
		return &masterv1.Command{
			Args: []string{"glint", "driver", "--conf", "spark.authenticate.secret=s3cr3t-conf", "--conf=my.token=s3cr3t-eq", "AWS_ACCESS_KEY=s3cr3t-arg"},
			Env:  map[string]string{"DB_PASSWORD": "s3cr3t-env", "PLAIN": "shown"},
		}
	}
	app := func(id string) *masterv1.ApplicationInfo {
		return &masterv1.ApplicationInfo{Id: id, Description: &masterv1.ApplicationDescription{Name: "pi", MemoryPerExecutorMib: 512, Command: cmd()}}
	}
	driver := func(id string) *masterv1.DriverInfo {
		return &masterv1.DriverInfo{Id: id, Description: &masterv1.DriverDescription{Name: "pi", Cores: 1, MemoryMib: 512, Command: cmd()}}
	}
	return connect.NewResponse(&masterv1.GetClusterStateResponse{
		MasterUrl: "http://master:7077", Status: "ALIVE",
		ActiveApps: []*masterv1.ApplicationInfo{app("app-20261129140000-0000")}, CompletedApps: []*masterv1.ApplicationInfo{app("app-20261129140000-0001")},
		ActiveDrivers: []*masterv1.DriverInfo{driver("driver-20261129140000-0000")}, CompletedDrivers: []*masterv1.DriverInfo{driver("driver-20261129140000-0001")},
	}), nil
}

// TestStatusHidesSecretsOfCommands: glint status, as a table or JSON, of the
// cluster or of one application or driver, never prints a secret of their
// commands, even when the master sends them.
func TestStatusHidesSecretsOfCommands(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(masterv1connect.NewMasterServiceHandler(leakyMaster{}))
	url := rpctest.Serve(t, mux)

	for _, args := range [][]string{
		{},
		{"--json"},
		{"--json", "app-20261129140000-0000"},
		{"--json", "app-20261129140000-0001"},
		{"--json", "driver-20261129140000-0000"},
		{"--json", "driver-20261129140000-0001"},
	} {
		t.Run(strings.Join(append([]string{"status"}, args...), " "), func(t *testing.T) {
			var out bytes.Buffer
			cmd := newStatusCommand(&globals{&process.Globals{Stdout: &out, Stderr: &out}})
			cmd.SetArgs(append([]string{"--master", url}, args...))
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			if err := cmd.ExecuteContext(context.Background()); err != nil {
				t.Fatalf("glint status %q: %v", args, err)
			}
			for _, s := range []string{"s3cr3t-conf", "s3cr3t-eq", "s3cr3t-arg", "s3cr3t-env"} {
				if strings.Contains(out.String(), s) {
					t.Errorf("prints %q:\n%s", s, out.String())
				}
			}
			if len(args) > 0 && (!strings.Contains(out.String(), "spark.authenticate.secret="+redact.Text) || !strings.Contains(out.String(), `"shown"`)) {
				t.Errorf("does not print the command with only the secrets hidden:\n%s", out.String())
			}
		})
	}
}

// coresMaster answers GetClusterState with a running application holding 2
// cores and a finished one that held 4 at most and holds none.
type coresMaster struct {
	masterv1connect.UnimplementedMasterServiceHandler
}

func (coresMaster) GetClusterState(context.Context, *connect.Request[masterv1.GetClusterStateRequest]) (*connect.Response[masterv1.GetClusterStateResponse], error) {
	desc := &masterv1.ApplicationDescription{Name: "pi", MemoryPerExecutorMib: 512}
	return connect.NewResponse(&masterv1.GetClusterStateResponse{
		MasterUrl: "http://master:7077", Status: "ALIVE",
		ActiveApps: []*masterv1.ApplicationInfo{{Id: "app-20261129140000-0000", Description: desc, CoresGranted: 2, CoresPeak: 3,
			State: masterv1.ApplicationState_APPLICATION_STATE_RUNNING}},
		CompletedApps: []*masterv1.ApplicationInfo{{Id: "app-20261129140000-0001", Description: desc, CoresPeak: 4, EndTime: timestamppb.Now(),
			State: masterv1.ApplicationState_APPLICATION_STATE_FINISHED}},
	}), nil
}

// TestStatusShowsTheCoresAFinishedApplicationHeld: a running application
// shows the cores it holds, a finished one the most it held.
func TestStatusShowsTheCoresAFinishedApplicationHeld(t *testing.T) {
	out := statusOf(t, coresMaster{})
	for _, want := range []string{`app-20261129140000-0000\s+pi\s+-\s+RUNNING\s+2\s`, `app-20261129140000-0001\s+pi\s+-\s+FINISHED\s+4\s`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("glint status does not match %s:\n%s", want, out)
		}
	}
}

// grantedMaster answers GetClusterState with one worker, 3 of its 8 cores
// and 1.5 of its 16 GiB granted.
type grantedMaster struct {
	masterv1connect.UnimplementedMasterServiceHandler
}

func (grantedMaster) GetClusterState(context.Context, *connect.Request[masterv1.GetClusterStateRequest]) (*connect.Response[masterv1.GetClusterStateResponse], error) {
	return connect.NewResponse(&masterv1.GetClusterStateResponse{MasterUrl: "http://master:7077", Status: "ALIVE",
		Workers: []*masterv1.WorkerInfo{{Id: "worker-20261129140000-h-7078", Host: "h", Port: 7078, State: masterv1.WorkerState_WORKER_STATE_ALIVE,
			Cores: 8, CoresUsed: 3, MemoryMib: 16384, MemoryUsedMib: 1536, LastHeartbeat: timestamppb.Now()}},
	}), nil
}

// TestStatusShowsWhatIsGrantedOfEachWorker: its cores and memory granted to
// executors and drivers, said so, apart from what they were measured using.
func TestStatusShowsWhatIsGrantedOfEachWorker(t *testing.T) {
	out := statusOf(t, grantedMaster{})
	for _, want := range []string{`CORES GRANTED\s+MEMORY GRANTED\s+MEASURED CPU`, `ALIVE\s+3 of 8\s+1\.5 GiB of 16\.0 GiB\s`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("glint status does not match %s:\n%s", want, out)
		}
	}
}

// timedMaster answers GetClusterState with a running application started
// 5 s ago with a trace, and a finished one that ran 83.4 s without one.
type timedMaster struct {
	masterv1connect.UnimplementedMasterServiceHandler
}

func (timedMaster) GetClusterState(context.Context, *connect.Request[masterv1.GetClusterStateRequest]) (*connect.Response[masterv1.GetClusterStateResponse], error) {
	desc := &masterv1.ApplicationDescription{Name: "pi", MemoryPerExecutorMib: 512}
	start := time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)
	return connect.NewResponse(&masterv1.GetClusterStateResponse{
		MasterUrl: "http://master:7077", Status: "ALIVE",
		ActiveApps: []*masterv1.ApplicationInfo{{Id: "app-20261129140000-0000", Description: desc, State: masterv1.ApplicationState_APPLICATION_STATE_RUNNING,
			StartTime: timestamppb.New(time.Now().Add(-5 * time.Second)), TraceId: "4bf92f3577b34da6a3ce929d0e0e4736"}},
		CompletedApps: []*masterv1.ApplicationInfo{{Id: "app-20261129140000-0001", Description: desc, State: masterv1.ApplicationState_APPLICATION_STATE_FINISHED,
			StartTime: timestamppb.New(start), EndTime: timestamppb.New(start.Add(83400 * time.Millisecond))}},
	}), nil
}

// TestStatusShowsEachApplicationsDurationAndTrace: how long each ran (so
// far, while running) and its trace id, "-" without one.
func TestStatusShowsEachApplicationsDurationAndTrace(t *testing.T) {
	out := statusOf(t, timedMaster{})
	for _, want := range []string{`app-20261129140000-0000\s+pi\s+-\s+RUNNING\s+0\s+[5-9](\.\d)?s\s.*\s4bf92f3577b34da6a3ce929d0e0e4736\s`,
		`app-20261129140000-0001\s+pi\s+-\s+FINISHED\s+0\s+1m23s\s.*\sMiB\s+-\s`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("glint status does not match %s:\n%s", want, out)
		}
	}
}

// statusOf is what glint status prints of the cluster master describes.
func statusOf(t *testing.T, master masterv1connect.MasterServiceHandler) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(masterv1connect.NewMasterServiceHandler(master))
	url := rpctest.Serve(t, mux)
	var out bytes.Buffer
	cmd := newStatusCommand(&globals{&process.Globals{Stdout: &out, Stderr: &out}})
	cmd.SetArgs([]string{"--master", url})
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	return out.String()
}
