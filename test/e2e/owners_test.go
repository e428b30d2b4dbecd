package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/services/master/store"
)

// writeToken writes a new token to a file of mode, in a directory of its
// own, and returns the token and the file.
func writeToken(t *testing.T, mode os.FileMode) (token, path string) {
	t.Helper()
	token, path = rpc.NewToken(), filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return token, path
}

// ownersOf is what /json says of who owns what, by application and driver
// id, and each cluster-mode driver's application ("app of DRIVER").
func ownersOf(t *testing.T, c *testCluster) map[string]string {
	t.Helper()
	resp := getPage(t, c.client, c.master.url+"/json")
	defer resp.Body.Close()
	type entry struct{ ID, User, DriverID string }
	var s struct{ ActiveApps, ActiveDrivers []entry }
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range append(s.ActiveApps, s.ActiveDrivers...) {
		out[e.ID] = e.User
		if e.DriverID != "" {
			out["app of "+e.DriverID] = e.ID
		}
	}
	return out
}

// TestApplicationsBelongToTheirSubmitterAcrossARestart: alice and bob hold
// named submit tokens; alice runs an application and a cluster-mode driver,
// bob an application. The master (--recovery-mode file) is killed and
// restarted; /json and glint status still show each owner. Then bob's token
// against alice's application and driver, and the driver's own token
// against any application but its own, are refused (PermissionDenied,
// nothing changed), as is 2^31-1 executors; the owner's and the cluster
// token's (admin) same calls succeed, and so do carol's, whom alice's
// application and driver name in spark.modify.acls.
func TestApplicationsBelongToTheirSubmitterAcrossARestart(t *testing.T) {
	t.Parallel()
	alice, aliceFile := writeToken(t, 0o600)
	bob, bobFile := writeToken(t, 0o400)
	carol, carolFile := writeToken(t, 0o600)
	recovery := filepath.Join(t.TempDir(), "recovery")
	args := []string{"master", "--listen", fmt.Sprintf("127.0.0.1:%d", tooltest.FreePorts(t, 1)[0]), "--worker-timeout", "6s",
		"--recovery-mode", "file", "--recovery-dir", recovery, "--submit-token-file", "alice=" + aliceFile, "--submit-token-file", "bob=" + bobFile,
		"--submit-token-file", "carol=" + carolFile}
	c := &testCluster{master: start(t, "master", nil, args...)}
	c.startWorkers(t, nil, 1, 4)

	hold := func(tokenFile string, extra ...string) {
		runInBackground(t, []string{"GLINT_TOKEN_FILE=" + tokenFile}, append(append([]string{"submit", "--master", c.master.url,
			"--executor-cores", "1", "--total-executor-cores", "1", "--executor-memory", "256m", "--log-level", "warn"}, extra...),
			"hold", filepath.Join(t.TempDir(), "never"))...)
	}
	hold(aliceFile, "--conf", "spark.modify.acls=carol")
	c.waitFor(t, "alice's executor running", func(s masterJSON) bool { return len(runningExecutors(s)) == 1 })
	hold(bobFile)
	c.waitFor(t, "bob's executor running", func(s masterJSON) bool { return len(runningExecutors(s)) == 2 })
	hold(aliceFile, "--deploy-mode", "cluster", "--driver-memory", "256m", "--conf", "spark.modify.acls=carol")
	c.waitFor(t, "the driver's executor running", func(s masterJSON) bool { return len(runningExecutors(s)) == 3 })

	before := ownersOf(t, c)
	var alices, bobs, driver string
	for id := range before {
		if strings.HasPrefix(id, "driver-") {
			driver = id
		}
	}
	driversApp := before["app of "+driver]
	for id, user := range before {
		switch {
		case !strings.HasPrefix(id, "app-") || id == driversApp:
		case user == "bob":
			bobs = id
		case user == "alice":
			alices = id
		}
	}
	if alices == "" || bobs == "" || driver == "" || before[driver] != "alice" || before[driversApp] != "alice" {
		t.Fatalf("owners %v, want alice's application, bob's, and alice's driver and its application", before)
	}

	// The master is killed; its file holds the driver's token, which the
	// test takes as an attacker who got it would.
	c.killMaster(t)
	store, err := store.OpenFileStore(recovery)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := store.Load()
	store.Close()
	if err != nil {
		t.Fatal(err)
	}
	driverToken := ""
	for _, d := range kept.Drivers {
		if d.GetId() == driver {
			driverToken = d.GetSubmitToken()
		}
	}
	c.master = start(t, "master-restarted", nil, args...)
	// What a failed check leaves running is killed (as admin) before the
	// master stops, so that its drivers stop at once.
	t.Cleanup(func() {
		for _, a := range c.state(t).ActiveApps {
			hostileCall(t, c.master.url+"/glint.master.v1.MasterService/KillApplication",
				jsonBody(t, &masterv1.KillApplicationRequest{AppId: a.ID})(), http.Header{"Content-Type": {"application/json"}})
		}
	})
	c.waitFor(t, "the master ALIVE with the three applications", func(s masterJSON) bool {
		return s.Status == "ALIVE" && len(runningExecutors(s)) == 3
	})
	if after := ownersOf(t, c); !reflect.DeepEqual(after, before) {
		t.Fatalf("owners after the restart %v, before %v", after, before)
	}
	out, _, err := runGlint(t, "status", "--master", c.master.url)
	if err != nil {
		t.Fatal(err)
	}
	for id, user := range map[string]string{alices: "alice", bobs: "bob", driver: "alice", driversApp: "alice"} {
		if !strings.Contains(out, id+"  hold") || !regexpRow(out, id, user) {
			t.Errorf("glint status does not show %s as %s's:\n%s", id, user, out)
		}
	}

	m := func(p string) string { return c.master.url + "/glint.master.v1.MasterService/" + p }
	const denied, invalid = "permission_denied", "invalid_argument"
	for _, tc := range []struct {
		name, url, token string
		body             proto.Message
		want             string
	}{
		{"kill another's application", m("KillApplication"), bob, &masterv1.KillApplicationRequest{AppId: alices}, denied},
		{"ask for another's executors", m("RequestExecutors"), bob, &masterv1.RequestExecutorsRequest{AppId: alices, RequestedTotal: 100}, denied},
		{"kill another's executors", m("KillExecutors"), bob, &masterv1.KillExecutorsRequest{AppId: alices, ExecutorIds: []int32{0}}, denied},
		{"report on another's executor", m("ReportExecutorLaunch"), bob, &masterv1.ReportExecutorLaunchRequest{AppId: alices, ExecutorId: 0}, denied},
		{"unregister another's application", m("UnregisterApplication"), bob, &masterv1.UnregisterApplicationRequest{AppId: alices}, denied},
		{"read another's driver's status", m("DriverStatus"), bob, &masterv1.DriverStatusRequest{DriverId: driver}, denied},
		{"kill another's driver", m("KillDriver"), bob, &masterv1.KillDriverRequest{DriverId: driver}, denied},
		{"kill another's application with a driver's token", m("KillApplication"), driverToken, &masterv1.KillApplicationRequest{AppId: bobs}, denied},
		{"kill its owner's other application with a driver's token", m("KillApplication"), driverToken, &masterv1.KillApplicationRequest{AppId: alices}, denied},
		{"ask for another's executors with a driver's token", m("RequestExecutors"), driverToken, &masterv1.RequestExecutorsRequest{AppId: bobs, RequestedTotal: 100}, denied},
		{"submit a driver with a driver's token", m("SubmitDriver"), driverToken, &masterv1.SubmitDriverRequest{Description: &masterv1.DriverDescription{
			Name: "evil", Cores: 1, MemoryMib: 64, Command: &masterv1.Command{Args: []string{"/bin/sh", "-c", "touch /tmp/pwned"}}}}, denied},
		{"ask for 2^31-1 executors of its own", m("RequestExecutors"), alice, &masterv1.RequestExecutorsRequest{AppId: alices, RequestedTotal: math.MaxInt32}, invalid},
		{"ask for 2^31-1 executors as admin", m("RequestExecutors"), testToken, &masterv1.RequestExecutorsRequest{AppId: bobs, RequestedTotal: math.MaxInt32}, invalid},
	} {
		before := observe(t, c)
		t.Run(tc.name, func(t *testing.T) {
			code, msg := hostileCall(t, tc.url, jsonBody(t, tc.body)(), http.Header{"Authorization": {"Bearer " + tc.token}, "Content-Type": {"application/json"}})
			if code != tc.want {
				t.Fatalf("code %q (%s), want %q", code, msg, tc.want)
			}
			if after := observe(t, c); after != before {
				t.Errorf("the cluster changed:\n%v\nwas\n%v", after, before)
			}
		})
	}

	for _, tc := range []struct {
		name, url, token string
		body             proto.Message
	}{
		{"the owner reads its driver's status", m("DriverStatus"), alice, &masterv1.DriverStatusRequest{DriverId: driver}},
		{"a name in spark.modify.acls reads the driver's status", m("DriverStatus"), carol, &masterv1.DriverStatusRequest{DriverId: driver}},
		{"a name in spark.modify.acls asks for the application's executors", m("RequestExecutors"), carol, &masterv1.RequestExecutorsRequest{AppId: alices, RequestedTotal: 1}},
		{"a name in the driver's spark.modify.acls asks for its application's executors", m("RequestExecutors"), carol, &masterv1.RequestExecutorsRequest{AppId: driversApp, RequestedTotal: 1}},
		{"the driver's token asks for its application's executors", m("RequestExecutors"), driverToken, &masterv1.RequestExecutorsRequest{AppId: driversApp, RequestedTotal: 1}},
		{"the owner kills its application", m("KillApplication"), alice, &masterv1.KillApplicationRequest{AppId: alices}},
		{"the cluster token (admin) kills another's application", m("KillApplication"), testToken, &masterv1.KillApplicationRequest{AppId: bobs}},
		{"the owner kills its driver", m("KillDriver"), alice, &masterv1.KillDriverRequest{DriverId: driver}},
	} {
		if code, msg := hostileCall(t, tc.url, jsonBody(t, tc.body)(), http.Header{"Authorization": {"Bearer " + tc.token}, "Content-Type": {"application/json"}}); code != "" {
			t.Errorf("%s: %s %s", tc.name, code, msg)
		}
	}
	c.waitFor(t, "every application ended", func(s masterJSON) bool { return len(s.ActiveApps) == 0 })
}

// regexpRow reports whether out has a row that starts with id and names user.
func regexpRow(out, id, user string) bool {
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, id+" ") && strings.Contains(line, " "+user+" ") {
			return true
		}
	}
	return false
}

// A token file readable by its group or others is refused, saying chmod 600,
// wherever glint reads one: a client's --token-file, a master's
// --token-file and --submit-token-file; 0600 and 0400 are read.
func TestATokenFileOthersMayReadIsRefused(t *testing.T) {
	t.Parallel()
	for _, mode := range []os.FileMode{0o644, 0o640} {
		_, path := writeToken(t, mode)
		for _, args := range [][]string{
			{"status", "--master", "http://127.0.0.1:1", "--token-file", path, "--retry-timeout", "0s"},
			{"master", "--listen", "127.0.0.1:0", "--token-file", path},
			{"master", "--listen", "127.0.0.1:0", "--submit-token-file", "alice=" + path},
		} {
			_, stderr, err := runGlint(t, args...)
			if exitCode(err) == 0 || !strings.Contains(stderr, "chmod 600 "+path) {
				t.Errorf("glint %v with a token file of mode %#o: exit %d, stderr %q; want a refusal saying chmod 600 %s", args, mode, exitCode(err), stderr, path)
			}
		}
	}
	for _, mode := range []os.FileMode{0o600, 0o400} {
		_, path := writeToken(t, mode)
		_, stderr, err := runGlint(t, "status", "--master", "http://127.0.0.1:1", "--token-file", path, "--retry-timeout", "0s")
		if strings.Contains(stderr, "--token-file") {
			t.Errorf("a token file of mode %#o: %v %q, want it read", mode, err, stderr)
		}
	}
}
