package driver_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	"github.com/glint-cluster/glint/internal/servicetest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
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
