package master

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
)

// TestJSONKeepsSparksFieldNames pins every field name of /json, which scripts
// and the CLI read: a worker, an active application with an executor that
// exited, a completed application, a running and a killed driver.
func TestJSONKeepsSparksFieldNames(t *testing.T) {
	c := newCluster(t, Config{MaxExecutorRetries: -1})
	wp, dp := newPeer(t), newPeer(t)
	worker := c.registerWorker(t, wp, 7078, 4, 4096)
	driver := &masterv1.DriverDescription{Name: "d", Cores: 1, MemoryMib: 512, Command: &masterv1.Command{Args: []string{"/bin/true"}}}
	var driverIDs []string
	for range 2 {
		resp, err := c.client.SubmitDriver(context.Background(), connect.NewRequest(&masterv1.SubmitDriverRequest{Description: driver}))
		if err != nil {
			t.Fatal(err)
		}
		driverIDs = append(driverIDs, resp.Msg.GetDriverId())
	}
	if _, err := c.client.DriverStateChanged(context.Background(), connect.NewRequest(&masterv1.DriverStateChangedRequest{
		DriverId: driverIDs[1], WorkerId: worker, State: masterv1.DriverState_DRIVER_STATE_KILLED,
	})); err != nil {
		t.Fatal(err)
	}
	desc := appDesc(512, 1)
	desc.MaxCores = ptr[int32](2)
	app := c.registerApp(t, dp, desc)
	done := c.registerApp(t, dp, appDesc(512, 1))
	if _, err := c.client.ExecutorStateChanged(context.Background(), connect.NewRequest(&masterv1.ExecutorStateChangedRequest{
		AppId: app, ExecutorId: 0, State: masterv1.ExecutorState_EXECUTOR_STATE_FAILED, WorkerId: worker, ExitStatus: ptr[int32](1),
	})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.client.KillApplication(context.Background(), connect.NewRequest(&masterv1.KillApplicationRequest{AppId: done})); err != nil {
		t.Fatal(err)
	}

	resp, err := http.Get(c.url + "/json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	first := func(list string) map[string]any {
		l, _ := got[list].([]any)
		if len(l) == 0 {
			t.Fatalf("/json %s is empty", list)
		}
		return l[0].(map[string]any)
	}
	executor := first("activeapps")["executors"].([]any)[0].(map[string]any)
	app0 := "cores corespeak cpuseconds driverid driverurl duration executors id maxcores memorybytes memorypeakbytes memoryperexecutor name starttime state statusmessage submitdate traceid user"
	driver0 := "cores cpuseconds id memory memorybytes memorypeakbytes message name starttime state submitdate supervise traceid user worker"
	for name, tc := range map[string]struct {
		object map[string]any
		want   string
	}{
		"master":          {got, "activeapps activedrivers aliveworkers completedapps completeddrivers cores coresused heartbeatinterval memory memoryused status url workers workertimeout"},
		"worker":          {first("workers"), "cores coresfree coresused cpuseconds heartbeatinterval host id lastheartbeat memory memorybytes memoryfree memorypeakbytes memoryused port state webuiaddress"},
		"active app":      {first("activeapps"), app0},
		"completed app":   {first("completedapps"), app0},
		"exited executor": {executor, "cores cpuseconds exitstatus hostport id memory memorybytes memorypeakbytes message state worker"},
		"active driver":   {first("activedrivers"), driver0},
		"ended driver":    {first("completeddrivers"), driver0},
	} {
		if keys := strings.Join(slices.Sorted(maps.Keys(tc.object)), " "); keys != tc.want {
			t.Errorf("%s fields\n got %s\nwant %s", name, keys, tc.want)
		}
	}
	if executor["exitstatus"] != 1.0 || first("activeapps")["maxcores"] != 2.0 || first("completedapps")["maxcores"] != nil {
		t.Errorf("exitstatus %v, maxcores %v and %v; want 1, 2 and null",
			executor["exitstatus"], first("activeapps")["maxcores"], first("completedapps")["maxcores"])
	}
}
