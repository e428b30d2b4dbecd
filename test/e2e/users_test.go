package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/glint-cluster/glint/internal/tooltest"
)

// usersJSON is the part of a worker's /json this test reads.
type usersJSON struct {
	Prestarted int `json:"prestarted"`
	Executors  []struct {
		AppID string `json:"appid"`
		PID   int    `json:"pid"`
	} `json:"executors"`
	Drivers []struct {
		ID  string `json:"id"`
		PID int    `json:"pid"`
	} `json:"drivers"`
	FinishedDrivers []struct {
		ID string `json:"id"`
	} `json:"finisheddrivers"`
}

// uidOf is the real uid of pid, and whether all four of its uids are that.
func uidOf(t *testing.T, pid int) (uint32, bool) {
	t.Helper()
	f := strings.Fields(tooltest.ProcStatus(t, pid, "Uid"))
	var uid uint32
	fmt.Sscan(f[0], &uid)
	return uid, len(f) == 4 && f[1] == f[0] && f[2] == f[0] && f[3] == f[0]
}

// A worker started as root with --executor-users runs a cluster-mode
// driver as a uid of its own, and its application's executors — claimed
// prestarted ones, which drop from root to it at their claim — as another,
// all over mutual TLS with a certificate of their own (the worker's key is
// not theirs to read: without one the worker does not start); once they
// end, their work dirs are the worker's again.
func TestAWorkerAsRootRunsADriverAndItsClaimedExecutorsAsUsersOfTheirOwn(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root starts processes as other users: make test runs as root in CI")
	}
	t.Parallel()
	base := reachableDir(t)
	users := testUsers()
	ca, leaves := writePKI(t, base, 0o600, 0o644)
	env := []string{"GLINT_TLS_CERT_FILE=" + leaves[0][0], "GLINT_TLS_KEY_FILE=" + leaves[0][1], "GLINT_TLS_CA_FILE=" + ca}
	workerArgs := []string{"--executor-users", users.String(), "--prestart-executors", "2"}

	_, stderr, err := glintWithEnv(t, env, append([]string{"worker", "--master", "https://127.0.0.1:1", "--listen", "127.0.0.1:0", "--work-dir", reachableDir(t)}, workerArgs...)...)
	if want := "executors cannot read the worker's --tls-key-file; give them a certificate of their own"; err == nil || !strings.Contains(stderr, want) {
		t.Fatalf("a worker with executor users and TLS but no executor certificate: %v, want it refused with %q:\n%s", err, want, stderr)
	}

	workerArgs = append(workerArgs, "--executor-tls-cert-file", leaves[1][0], "--executor-tls-key-file", leaves[1][1])
	c := startSizedCluster(t, env, 1, 4, workerArgs)
	w, work := c.workers[0], c.workDirs[0]
	workerJSON := func() usersJSON {
		resp := getPage(t, c.client, w.url+"/json")
		defer resp.Body.Close()
		var s usersJSON
		if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if !tooltest.Poll(30*time.Second, 20*time.Millisecond, func() bool { return workerJSON().Prestarted == 2 }) {
		t.Fatal("the worker never had 2 prestarted executors")
	}

	release := filepath.Join(base, "release")
	stdout, stderr, err := glintWithEnv(t, env, "submit", "--master", c.master.url, "--deploy-mode", "cluster", "--driver-memory", "256m",
		"--executor-memory", "256m", "--executor-cores", "1", "--total-executor-cores", "2", "hold", release, "2")
	if err != nil {
		t.Fatalf("submit: %v\n%s%s", err, stdout, stderr)
	}
	driverID := strings.TrimSpace(stdout)
	var s usersJSON
	if !tooltest.Poll(60*time.Second, 20*time.Millisecond, func() bool {
		s = workerJSON()
		return len(s.Drivers) == 1 && s.Drivers[0].PID != 0 && len(s.Executors) == 2 && s.Executors[0].PID != 0 && s.Executors[1].PID != 0
	}) {
		t.Fatalf("never saw the driver and its 2 executors running: %+v", s)
	}
	driverUID, same := uidOf(t, s.Drivers[0].PID)
	if driverUID < users.First || driverUID > users.Last || !same {
		t.Errorf("driver runs as uid %d (all four the same: %v), want one of %s", driverUID, same, users)
	}
	for _, e := range s.Executors {
		uid, same := uidOf(t, e.PID)
		if uid < users.First || uid > users.Last || !same || uid == driverUID {
			t.Errorf("executor %d runs as uid %d (all four the same: %v), want one of %s other than its driver's %d", e.PID, uid, same, users, driverUID)
		}
		if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", e.PID)); strings.Contains(string(cmdline), "--app-id") {
			t.Errorf("executor %d was started for its launch (%q), not claimed", e.PID, cmdline)
		}
	}
	if a, b := s.Executors[0], s.Executors[1]; a.AppID != b.AppID {
		t.Fatalf("two applications' executors: %+v", s.Executors)
	} else if ua, _ := uidOf(t, a.PID); ua != func() uint32 { u, _ := uidOf(t, b.PID); return u }() {
		t.Errorf("one application's executors run as two uids")
	}
	appID := s.Executors[0].AppID

	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if !tooltest.Poll(60*time.Second, 20*time.Millisecond, func() bool {
		s = workerJSON()
		return len(s.FinishedDrivers) == 1 && len(s.Drivers) == 0 && len(s.Executors) == 0
	}) {
		t.Fatalf("the driver %s never finished: %+v", driverID, s)
	}
	for _, dir := range []string{filepath.Join(work, driverID), filepath.Join(work, appID, "0"), filepath.Join(work, appID, "1")} {
		if !tooltest.Poll(30*time.Second, 20*time.Millisecond, func() bool {
			fi, err := os.Stat(dir)
			return err == nil && fi.Sys().(*syscall.Stat_t).Uid == 0 && fi.Mode().Perm() == 0o700
		}) {
			t.Errorf("%s not taken back by the worker once its process ended", dir)
		}
	}
}
