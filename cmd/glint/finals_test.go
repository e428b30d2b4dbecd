package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/glint-cluster/glint/internal/tooltest"
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
	deadline := time.Now().Add(30 * time.Second)
	for {
		s := c.drivers(t)
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; drivers: %+v\nmaster log:\n%s", what, s, readFile(c.master.log))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// finishedDriver is a driver in a worker's /json.
type finishedDriver struct {
	FinishedDrivers []driverState `json:"finisheddrivers"`
}

// TestADriverThatFinishedWhileItsMasterWasDownIsNotRunAgain: a supervised
// cluster-mode driver finishes while its master (--recovery-mode file) is
// killed, so its worker cannot report the end. The restarted master learns
// the end from the worker's registration: the driver is FINISHED, once, and
// not relaunched as a driver whose worker did not bring it back; and a
// master restarted once more still answers for it.
func TestADriverThatFinishedWhileItsMasterWasDownIsNotRunAgain(t *testing.T) {
	t.Parallel()
	port := tooltest.FreePorts(t, 1)[0]
	args := []string{"master", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--worker-timeout", "6s",
		"--recovery-mode", "file", "--recovery-dir", filepath.Join(t.TempDir(), "recovery")}
	c := &testCluster{master: start(t, "master", nil, args...)}
	c.startWorkers(t, nil, 1, 2)

	release := filepath.Join(t.TempDir(), "release")
	stdout, stderr, err := runGlint(t, "submit", "--master", c.master.url, "--deploy-mode", "cluster", "--supervise",
		"--driver-memory", "256m", "--executor-memory", "256m", "--total-executor-cores", "1", "hold", release, "1")
	if err != nil {
		t.Fatalf("submit: %v\n%s", err, stderr)
	}
	driverID := strings.TrimSpace(stdout)
	c.waitFor(t, "the driver's application with a running executor", func(s masterJSON) bool { return len(runningExecutors(s)) == 1 })

	if err := syscall.Kill(c.master.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-c.master.done
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp := getPage(t, c.client, c.workers[0].url+"/json")
		var w finishedDriver
		err := json.NewDecoder(resp.Body).Decode(&w)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(w.FinishedDrivers, func(d driverState) bool { return d.ID == driverID && d.State == "FINISHED" }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the driver did not finish on its worker while the master was down: %+v\n%s", w, readFile(c.workers[0].log))
		}
		time.Sleep(50 * time.Millisecond)
	}

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
	if out := readFile(filepath.Join(dirs[0], "stdout")); strings.Count(out, "Held 1 tasks until") != 1 {
		t.Fatalf("driver stdout:\n%s\nwant its tasks held and released once", out)
	}

	// The end is kept: a master killed and restarted once more still
	// answers for the driver.
	if err := syscall.Kill(c.master.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-c.master.done
	c.master = start(t, "master-restarted-again", nil, args...)
	c.waitForDrivers(t, "the master ALIVE again", func(s driversState) bool { return s.Status == "ALIVE" })
	out, errOut, err := runGlint(t, "status", "--master", c.master.url, driverID)
	if err != nil || !strings.Contains(out, "FINISHED") {
		t.Fatalf("glint status %s after a second restart: %v\n%s%s\nwant FINISHED", driverID, err, out, errOut)
	}
}
