package driver_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	"github.com/glint-cluster/glint/internal/servicetest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	"github.com/glint-cluster/glint/pkg/app"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/services/driver"
	"github.com/glint-cluster/glint/services/master"
)

// TestAnApplicationsEndReachesAMasterThatWasDownWhenItEnded: the master
// answers the driver's first UnregisterApplication calls 503, as a master
// that restarts leaves them; the driver tries again until one is taken,
// so the master records the application FINISHED, not lost.
func TestAnApplicationsEndReachesAMasterThatWasDownWhenItEnded(t *testing.T) {
	ln, url := servicetest.Listen(t)
	m, err := master.New(master.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	var down atomic.Int32
	down.Store(3)
	h := m.Handler()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = m.Run(ctx) })
	wg.Go(func() {
		_ = rpc.Serve(ctx, ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/UnregisterApplication") && down.Add(-1) >= 0 {
				http.Error(w, "restarting", http.StatusServiceUnavailable)
				return
			}
			h.ServeHTTP(w, r)
		}))
	})
	t.Cleanup(func() { cancel(); wg.Wait() })

	d, err := servicetest.NewDriver(t, driver.Config{Masters: []string{url}, App: echoApp(nil), ExecutorCommand: []string{"/bin/false"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Register(context.Background()); err != nil {
		t.Fatal(err)
	}
	d.Stop(context.Background())
	st, err := masterv1connect.NewMasterServiceClient(rpc.NewHTTPClient(), url).GetClusterState(context.Background(), connect.NewRequest(&masterv1.GetClusterStateRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if apps := st.Msg.GetCompletedApps(); len(apps) != 1 || apps[0].GetId() != d.AppID() || apps[0].GetState() != masterv1.ApplicationState_APPLICATION_STATE_FINISHED {
		t.Fatalf("completed applications %v after the driver stopped, want %s FINISHED", apps, d.AppID())
	}
	if down.Load() >= 0 {
		t.Fatalf("the master refused %d fewer calls than it was set to", down.Load()+1)
	}
}

// TestTheMasterHearsHowAnApplicationEnded: a run that returns an error ends
// its application FAILED with that error, a run whose context ended first
// (a signal, or its worker stopping the driver) ends it KILLED — so a
// supervised driver is relaunched — and a run that returns nil FINISHED.
func TestTheMasterHearsHowAnApplicationEnded(t *testing.T) {
	url := servicetest.Master(t, master.Config{})
	for _, tc := range []struct {
		name    string
		run     func(ctx context.Context, cancel context.CancelFunc) error
		state   masterv1.ApplicationState
		message string
	}{
		{"returns nil", func(context.Context, context.CancelFunc) error { return nil },
			masterv1.ApplicationState_APPLICATION_STATE_FINISHED, "unregistered by its driver"},
		{"returns an error", func(context.Context, context.CancelFunc) error { return errors.New("input missing.txt: no such file") },
			masterv1.ApplicationState_APPLICATION_STATE_FAILED, "its driver reported it failed: application t"},
		{"is stopped", func(ctx context.Context, cancel context.CancelFunc) error {
			cancel()
			<-ctx.Done()
			return ctx.Err()
		}, masterv1.ApplicationState_APPLICATION_STATE_KILLED, "its driver was stopped: context canceled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			a := echoApp(nil)
			a.Run = func(context.Context, app.Context, []string) error { return tc.run(ctx, cancel) }
			d, err := servicetest.NewDriver(t, driver.Config{Masters: []string{url}, App: a, ExecutorCommand: []string{"/bin/false"}})
			if err != nil {
				t.Fatal(err)
			}
			_ = d.Run(ctx)
			st, err := masterv1connect.NewMasterServiceClient(rpc.NewHTTPClient(), url).GetClusterState(context.Background(), connect.NewRequest(&masterv1.GetClusterStateRequest{}))
			if err != nil {
				t.Fatal(err)
			}
			for _, got := range st.Msg.GetCompletedApps() {
				if got.GetId() != d.AppID() {
					continue
				}
				if got.GetState() != tc.state || !strings.HasPrefix(got.GetStatusMessage(), tc.message) {
					t.Fatalf("application %s %q, want %s %q…", got.GetState(), got.GetStatusMessage(), tc.state, tc.message)
				}
				return
			}
			t.Fatalf("application %s is not among the completed", d.AppID())
		})
	}
}
