package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// tokenLength is the length of a token (rpc.NewToken): 32 bytes in
// unpadded URL-safe base64.
var tokenLength = len(rpc.NewToken())

// heldToken finds, as code running as the process's user can, a token that
// process pid holds in its memory and that accepted accepts: it reads each
// of the process's writable mappings from /proc/PID/mem and tries every run
// of tokenLength URL-safe base64 characters, with a digit and letters of
// both cases (as a random token has, and little else does), once.
func heldToken(t *testing.T, pid int, accepted func(token string) bool) string {
	t.Helper()
	maps, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer maps.Close()
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	tried := map[string]bool{}
	lines := bufio.NewScanner(maps)
	for lines.Scan() {
		fields := strings.Fields(lines.Text())
		if len(fields) < 2 || !strings.HasPrefix(fields[1], "rw") || len(fields) > 5 && strings.HasPrefix(fields[5], "[v") {
			continue
		}
		from, to, _ := strings.Cut(fields[0], "-")
		start, err1 := strconv.ParseUint(from, 16, 64)
		end, err2 := strconv.ParseUint(to, 16, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("/proc/%d/maps line %q", pid, lines.Text())
		}
		b := make([]byte, end-start)
		n, _ := mem.ReadAt(b, int64(start))
		for _, c := range tokenCandidates(b[:n]) {
			if !tried[c] {
				tried[c] = true
				if accepted(c) {
					return c
				}
			}
		}
	}
	t.Fatalf("process %d holds no token that is accepted (%d tried)", pid, len(tried))
	return ""
}

// tokenCandidates are the runs of exactly tokenLength URL-safe base64
// characters in b that hold a digit, a lower-case and an upper-case letter.
func tokenCandidates(b []byte) []string {
	var out []string
	run := 0
	for i := 0; i <= len(b); i++ {
		if i < len(b) && isTokenByte(b[i]) {
			run++
			continue
		}
		if c := b[i-run : i]; run == tokenLength && bytes.ContainsAny(c, "0123456789") &&
			bytes.ContainsFunc(c, func(r rune) bool { return r >= 'a' && r <= 'z' }) && bytes.ContainsFunc(c, func(r rune) bool { return r >= 'A' && r <= 'Z' }) {
			out = append(out, string(c))
		}
		run = 0
	}
	return out
}

func isTokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// acceptedBy says whether a Connect call of url with body and token is
// answered without an error: whether url's service takes token.
func acceptedBy(t *testing.T, url string, body proto.Message) func(token string) bool {
	b, err := proto.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return func(token string) bool {
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/proto")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
}

// assertNotShown checks that no secret is in the environment or on the
// command line of process pid, which any process of its user can read.
func assertNotShown(t *testing.T, what string, pid int, secrets ...string) {
	t.Helper()
	for _, f := range []string{"environ", "cmdline"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range secrets {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s: /proc/%d/%s holds a token it uses:\n%q", what, pid, f, bytes.ReplaceAll(b, []byte(s), []byte("<token>")))
			}
		}
	}
}

// workerProcesses are the pids of the executors and drivers that worker i
// of c runs.
type workerProcesses struct {
	Executors []struct {
		AppID string `json:"appid"`
		PID   int    `json:"pid"`
	} `json:"executors"`
	Drivers []struct {
		ID  string `json:"id"`
		PID int    `json:"pid"`
	} `json:"drivers"`
}

func (c *testCluster) processes(t *testing.T, i int) workerProcesses {
	t.Helper()
	resp := getPage(t, c.client, c.workers[i].url+"/json")
	defer resp.Body.Close()
	var w workerProcesses
	if err := json.NewDecoder(resp.Body).Decode(&w); err != nil {
		t.Fatal(err)
	}
	return w
}

// TestNoTokenIsInTheEnvironmentOrOnTheCommandLineOfAnExecutorOrAClusterModeDriver:
// a cluster-mode driver, held running, reached the master with the submit
// token the master made for it, and its executor runs its task with the
// application's token; each holds its token, and neither token is in
// either process's /proc/PID/environ or /proc/PID/cmdline.
func TestNoTokenIsInTheEnvironmentOrOnTheCommandLineOfAnExecutorOrAClusterModeDriver(t *testing.T) {
	t.Parallel()
	submitFile := filepath.Join(t.TempDir(), "submit.token")
	if err := os.WriteFile(submitFile, []byte(rpc.NewToken()), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startSizedCluster(t, nil, 1, 2, nil, "--submit-token-file", submitFile)
	release := filepath.Join(t.TempDir(), "release")
	if _, _, err := glintWithEnv(t, []string{"GLINT_TOKEN_FILE=" + submitFile}, "submit", "--master", c.master.url, "--deploy-mode", "cluster",
		"--driver-cores", "1", "--driver-memory", "256m", "--executor-cores", "1", "--total-executor-cores", "1",
		"--executor-memory", "256m", "--log-level", "warn", "hold", release); err != nil {
		t.Fatal(err)
	}
	var app appJSON
	c.waitFor(t, "the driver's application with its executor running", func(s masterJSON) bool {
		for _, a := range s.ActiveApps {
			if len(a.Executors) == 1 && a.Executors[0].State == "RUNNING" {
				app = a
				return true
			}
		}
		return false
	})
	for _, g := range byRole(discover(t, c.master.url), "executor") {
		if g.Labels["app"] == app.ID {
			waitForSample(t, "http://"+g.Targets[0], "glint_executor_tasks_running", 1)
		}
	}
	procs := c.processes(t, 0)
	if len(procs.Executors) != 1 || len(procs.Drivers) != 1 {
		t.Fatalf("the worker runs %+v, want one executor and one driver", procs)
	}
	executor, driver := procs.Executors[0].PID, procs.Drivers[0].PID
	appToken := heldToken(t, executor, acceptedBy(t, app.DriverURL+"/glint.driver.v1.DriverService/RetrieveSparkProps", &driverv1.RetrieveSparkPropsRequest{AppId: app.ID}))
	submitToken := heldToken(t, driver, acceptedBy(t, c.master.url+"/glint.master.v1.MasterService/GetClusterState", &masterv1.GetClusterStateRequest{}))
	assertNotShown(t, "the executor", executor, appToken, submitToken)
	assertNotShown(t, "the cluster-mode driver", driver, appToken, submitToken)
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c.waitForDrivers(t, "the driver FINISHED", func(s driversState) bool {
		return len(s.CompletedDrivers) == 1 && s.CompletedDrivers[0].State == "FINISHED"
	})
}
