package master

import (
	"context"
	"slices"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/lifecycle"
	"github.com/glint-cluster/glint/services/master/store"
)

// TestCompletedApplicationsAndDriversOutliveARestartWithinTheirBounds: a
// master keeps its completed applications and drivers in its Store as they
// were shown, at most as many as its completed lists retain; restarted on
// that Store it lists them and answers for them as before.
func TestCompletedApplicationsAndDriversOutliveARestartWithinTheirBounds(t *testing.T) {
	dir := t.TempDir()
	st, err := store.OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{RetainedApplications: 2, RetainedDrivers: 2}
	first := cfg
	first.Store = st
	c := newCluster(t, first)
	var apps []string
	for range 3 {
		app := c.registerApp(t, newPeer(t), appDesc(512, 1))
		if _, err := c.client.UnregisterApplication(context.Background(), connect.NewRequest(&masterv1.UnregisterApplicationRequest{AppId: app})); err != nil {
			t.Fatal(err)
		}
		apps = append(apps, app)
	}
	resp, err := c.client.SubmitDriver(context.Background(), connect.NewRequest(&masterv1.SubmitDriverRequest{
		Description: &masterv1.DriverDescription{Name: "d", Cores: 1, MemoryMib: 256, Command: &masterv1.Command{Args: []string{"/bin/true"}}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	driver := resp.Msg.GetDriverId()
	if _, err := c.client.KillDriver(context.Background(), connect.NewRequest(&masterv1.KillDriverRequest{DriverId: driver})); err != nil {
		t.Fatal(err)
	}
	before := c.srv.clusterState()
	c.srv.mu.Lock()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	c.srv.mu.Unlock()

	kept := mustOpen(t, dir)
	rec, err := kept.Load()
	if err != nil {
		t.Fatal(err)
	}
	var completed []string
	for _, p := range rec.Applications {
		if p.GetCompleted() != nil {
			completed = append(completed, p.GetId())
		}
		if p.GetAppToken() != "" || p.GetMasterToken() != "" {
			t.Errorf("completed application %s kept with its token", p.GetId())
		}
	}
	slices.Sort(completed)
	if want := apps[1:]; !slices.Equal(completed, want) {
		t.Fatalf("completed applications kept %v, want the last two %v", completed, want)
	}
	if err := kept.Close(); err != nil {
		t.Fatal(err)
	}

	again := cfg
	again.Store = mustOpen(t, dir)
	r := newCluster(t, again)
	after := r.srv.clusterState()
	if after.GetStatus() != statusAlive {
		t.Fatalf("a master that kept only ended work is %s, want ALIVE at once", after.GetStatus())
	}
	if !equalInfos(after.GetCompletedApps(), before.GetCompletedApps()) || !equalInfos(after.GetCompletedDrivers(), before.GetCompletedDrivers()) {
		t.Fatalf("completed after the restart\n%v\n%v\nwant as before\n%v\n%v", after.GetCompletedApps(), after.GetCompletedDrivers(),
			before.GetCompletedApps(), before.GetCompletedDrivers())
	}
	status, err := r.client.DriverStatus(context.Background(), connect.NewRequest(&masterv1.DriverStatusRequest{DriverId: driver}))
	if err != nil || lifecycle.Name(status.Msg.GetDriver().GetState()) != "KILLED" {
		t.Fatalf("status of the killed driver after the restart: %v %v, want KILLED", status, err)
	}
	if _, err := r.client.KillApplication(context.Background(), connect.NewRequest(&masterv1.KillApplicationRequest{AppId: apps[2]})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("kill of an application that ended before the restart: %v, want failed_precondition (it ended)", err)
	}
	next := r.registerApp(t, newPeer(t), appDesc(512, 1))
	if slices.Contains(apps, next) {
		t.Fatalf("a new application got the id %s of a completed one", next)
	}
}

func equalInfos[T proto.Message](a, b []T) bool {
	return slices.EqualFunc(a, b, func(x, y T) bool { return proto.Equal(x, y) })
}
