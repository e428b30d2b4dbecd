package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// driversState is the drivers part of the master's /json.
type driversState struct {
	Status           string        `json:"status"`
	ActiveDrivers    []driverState `json:"activedrivers"`
	CompletedDrivers []driverState `json:"completeddrivers"`
}

type driverState struct {
	ID      string `json:"id"`
	State   string `json:"state"`
	Message string `json:"message"`
}

func (c *testCluster) drivers(t testing.TB) driversState {
	t.Helper()
	resp := getPage(t, c.client, c.master.url+"/json")
	defer resp.Body.Close()
	var s driversState
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// waitForDrivers polls the master's /json until ok holds.
func (c *testCluster) waitForDrivers(t testing.TB, what string, ok func(driversState) bool) driversState {
	t.Helper()
	var s driversState
	if !tooltest.Poll(30*time.Second, 50*time.Millisecond, func() bool { s = c.drivers(t); return ok(s) }) {
		t.Fatalf("timed out waiting for %s; drivers: %+v\nmaster log:\n%s", what, s, readFile(c.master.log))
	}
	return s
}

// workerDrivers are the drivers in a worker's /json.
type workerDrivers struct {
	Drivers         []driverState `json:"drivers"`
	FinishedDrivers []driverState `json:"finisheddrivers"`
}

// waitForWorkerDrivers polls worker i's /json until ok holds.
func (c *testCluster) waitForWorkerDrivers(t testing.TB, i int, what string, ok func(workerDrivers) bool) {
	t.Helper()
	var w workerDrivers
	if !tooltest.Poll(30*time.Second, 50*time.Millisecond, func() bool {
		resp := getPage(t, c.client, c.workers[i].url+"/json")
		w = workerDrivers{}
		err := json.NewDecoder(resp.Body).Decode(&w)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		return ok(w)
	}) {
		t.Fatalf("timed out waiting for %s: %+v\n%s", what, w, readFile(c.workers[i].log))
	}
}

// TestADriverThatFinishedWhileItsMasterWasDownIsNotRunAgain: a supervised
// cluster-mode driver ends (exit 0) while its master (--recovery-mode file)
// is killed, so its worker cannot report the end. The restarted master
// learns the end from the worker's registration: the driver is FINISHED,
// once, and not relaunched as a driver whose worker did not bring it back;
// and a master restarted once more still answers for it. The driver is a
// plain process that waits for a file (a Glint driver would wait for a
// master to take its application's end before it exits).
func TestADriverThatFinishedWhileItsMasterWasDownIsNotRunAgain(t *testing.T) {
	t.Parallel()
	c, args := fileRecoveryCluster(t, 1, 2)

	release := filepath.Join(t.TempDir(), "release")
	master := masterv1connect.NewMasterServiceClient(rpc.NewHTTPClient(), c.master.url, rpc.ClientOptions(noop.NewTracerProvider(), testToken)...)
	resp, err := master.SubmitDriver(context.Background(), connect.NewRequest(&masterv1.SubmitDriverRequest{
		Description: &masterv1.DriverDescription{Name: "waits", Cores: 1, MemoryMib: 64, Supervise: true, Command: &masterv1.Command{
			Args: []string{"/bin/sh", "-c", `while [ ! -e "$0" ]; do sleep 0.02; done; echo released`, release},
		}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	driverID := resp.Msg.GetDriverId()
	c.waitForWorkerDrivers(t, 0, "the driver running", func(w workerDrivers) bool {
		return slices.ContainsFunc(w.Drivers, func(d driverState) bool { return d.ID == driverID && d.State == "RUNNING" })
	})

	c.killMaster(t)
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c.waitForWorkerDrivers(t, 0, "the driver finished on its worker while the master was down", func(w workerDrivers) bool {
		return slices.ContainsFunc(w.FinishedDrivers, func(d driverState) bool { return d.ID == driverID && d.State == "FINISHED" })
	})

	c.master = start(t, "master-restarted", nil, args...)
	s := c.waitForDrivers(t, "the recovered master ALIVE with the driver FINISHED", func(s driversState) bool {
		return s.Status == "ALIVE" && slices.ContainsFunc(s.CompletedDrivers, func(d driverState) bool { return d.ID == driverID })
	})
	if len(s.ActiveDrivers) != 0 || len(s.CompletedDrivers) != 1 || s.CompletedDrivers[0].State != "FINISHED" {
		t.Fatalf("drivers after the recovery: %+v; want only %s, FINISHED", s, driverID)
	}
	dirs, err := filepath.Glob(filepath.Join(c.workDirs[0], "driver-*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) != 1 {
		t.Fatalf("driver work dirs %v: want only %s's", dirs, driverID)
	}
	if out := readFile(filepath.Join(dirs[0], "stdout")); strings.Count(out, "\nreleased\n") != 1 {
		t.Fatalf("driver stdout:\n%s\nwant it released once", out)
	}

	// The end is kept: a master killed and restarted once more still
	// answers for the driver.
	c.killMaster(t)
	c.master = start(t, "master-restarted-again", nil, args...)
	c.waitForDrivers(t, "the master ALIVE again", func(s driversState) bool { return s.Status == "ALIVE" })
	out, errOut, err := runGlint(t, "status", "--master", c.master.url, driverID)
	if err != nil || !strings.Contains(out, "FINISHED") {
		t.Fatalf("glint status %s after a second restart: %v\n%s%s\nwant FINISHED", driverID, err, out, errOut)
	}
}

// TestAWorkerPausedWithALaunchOnItsWayDoesNotRunItWhenItWakes: a driver's
// launch reaches a worker that is paused (SIGSTOP; the kernel takes the
// request). The master declares the worker lost and places the driver on
// another worker, where it runs. When the paused worker wakes, it finds the
// launch and refuses it — its master last answered it long enough ago to
// have declared it lost — so the driver ran once (the soak saw it run on
// both).
func TestAWorkerPausedWithALaunchOnItsWayDoesNotRunItWhenItWakes(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1, "--worker-timeout", "2s")
	resume := pause(t, c.workers[0].cmd.Process.Pid)
	master := masterv1connect.NewMasterServiceClient(rpc.NewHTTPClient(), c.master.url, rpc.ClientOptions(noop.NewTracerProvider(), testToken)...)
	resp, err := master.SubmitDriver(context.Background(), connect.NewRequest(&masterv1.SubmitDriverRequest{
		Description: &masterv1.DriverDescription{Name: "once", Cores: 1, MemoryMib: 64, Command: &masterv1.Command{
			Args: []string{"/bin/sh", "-c", "echo ran"},
		}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	driverID := resp.Msg.GetDriverId()
	c.waitFor(t, "the paused worker DEAD", func(s masterJSON) bool { return len(s.Workers) == 1 && s.Workers[0].State == "DEAD" })
	c.startWorkers(t, nil, 1, 2)
	c.waitForWorkerDrivers(t, 1, "the driver finished on the other worker", func(w workerDrivers) bool {
		return slices.ContainsFunc(w.FinishedDrivers, func(d driverState) bool { return d.ID == driverID && d.State == "FINISHED" })
	})

	resume()
	var answer string
	waitUntil(t, "the woken worker's answer to the launch it found", func() bool {
		for line := range strings.SplitSeq(readFile(c.workers[0].log), "\n") {
			if strings.Contains(line, driverID) && (strings.Contains(line, "refused driver") || strings.Contains(line, "launching driver")) {
				answer = line
			}
		}
		return answer != ""
	})
	// Refused either because its master last answered it too long ago, or,
	// when it registered again before it handled the launch, because the
	// launch was sent for its earlier registration.
	if !strings.Contains(answer, "refused driver") ||
		!strings.Contains(answer, "long enough to have declared it lost") && !strings.Contains(answer, "sent for an earlier registration") {
		t.Fatalf("the woken worker's answer to the launch it found: %s\nwant it refused", answer)
	}
	c.waitFor(t, "the woken worker ALIVE again", func(s masterJSON) bool { return s.alive() == 2 })
	for i, want := range []int{0, 1} {
		dirs, err := filepath.Glob(filepath.Join(c.workDirs[i], driverID))
		if err != nil {
			t.Fatal(err)
		}
		if len(dirs) != want {
			t.Errorf("worker %d holds %d work dirs of %s, want %d", i, len(dirs), driverID, want)
		}
	}
}
