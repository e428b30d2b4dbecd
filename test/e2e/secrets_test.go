package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// tokenLength is the length of a token (rpc.NewToken): 32 bytes in
// unpadded URL-safe base64.
var tokenLength = len(rpc.NewToken())

// heldToken finds, as code running as the process's user can, a token that
// process pid holds in its memory and that accepted accepts: it reads each
// of the process's writable mappings from /proc/PID/mem and tries every run
// of tokenLength URL-safe base64 characters with letters of both cases (a
// random token lacks one with a chance of about 1 in 10^10), once.
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
// characters in b that hold a lower-case and an upper-case letter.
func tokenCandidates(b []byte) []string {
	var out []string
	run := 0
	for i := 0; i <= len(b); i++ {
		if i < len(b) && isTokenByte(b[i]) {
			run++
			continue
		}
		if run == tokenLength {
			c := b[i-run : i]
			if bytes.ContainsFunc(c, func(r rune) bool { return r >= 'a' && r <= 'z' }) && bytes.ContainsFunc(c, func(r rune) bool { return r >= 'A' && r <= 'Z' }) {
				out = append(out, string(c))
			}
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

// TestAnExecutorOrDriverWhoseSecretsAreAbsentOrBadExitsWithAClearError: run
// as its worker would run it, but with no secrets message, or a malformed or
// oversized one, `glint executor`, glint-executor and `glint driver` each
// exit 1 at once, saying what is wrong.
func TestAnExecutorOrDriverWhoseSecretsAreAbsentOrBadExitsWithAClearError(t *testing.T) {
	t.Parallel()
	worker := "GLINT_WORKER_PID=" + strconv.Itoa(os.Getpid())
	for _, cmd := range [][]string{{glintBin, "executor"}, {glintBin + child.ExecutorSuffix}, {glintBin, "driver", "pi"}} {
		for _, tc := range []struct {
			name    string
			message []byte // nil: no pipe
			want    string
		}{
			{"absent", nil, "without its secrets (GLINT_SECRETS_FD unset)"},
			{"malformed", []byte("GLINT_APP_TOKEN=s3cr3t"), "secrets message of 22 bytes malformed"},
			{"oversized", bytes.Repeat([]byte("s"), 5000), "secrets message of more than 4096 bytes"},
		} {
			t.Run(filepath.Base(strings.Join(cmd, " "))+" "+tc.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				c := exec.CommandContext(ctx, cmd[0], cmd[1:]...)
				c.Env = append(os.Environ(), worker)
				if tc.message != nil {
					r, w, err := os.Pipe()
					if err != nil {
						t.Fatal(err)
					}
					defer r.Close()
					if _, err := w.Write(tc.message); err != nil {
						t.Fatal(err)
					}
					w.Close()
					c.ExtraFiles = []*os.File{r}
					c.Env = append(c.Env, "GLINT_SECRETS_FD=3")
				}
				out, _ := c.CombinedOutput()
				if ctx.Err() != nil {
					t.Fatalf("still running after a minute: %q", out)
				}
				if code := c.ProcessState.ExitCode(); code != 1 || !strings.Contains(string(out), tc.want) || bytes.Contains(out, []byte("s3cr3t")) || bytes.Contains(out, []byte("sss")) {
					t.Errorf("exit %d, output %q; want 1 and %q, nothing of the message quoted", code, out, tc.want)
				}
			})
		}
	}
}

// TestASecretPropertyIsRefusedForAClusterModeDriver: a cluster-mode
// driver's --conf properties are its command line on its worker, so glint
// submit refuses one that --redaction-regex calls secret, naming its key
// and not its value, before it calls any master.
func TestASecretPropertyIsRefusedForAClusterModeDriver(t *testing.T) {
	t.Parallel()
	for _, conf := range []string{"spark.authenticate.secret=s3cr3t", "spark.jdbc.url=jdbc:db://h/?password=s3cr3t"} {
		_, stderr, err := runGlint(t, "submit", "--master", "http://127.0.0.1:1", "--deploy-mode", "cluster", "--retry-timeout", "0s",
			"--conf", "spark.executor.memory=1g", "--conf", conf, "pi")
		key, _, _ := strings.Cut(conf, "=")
		if err == nil || !strings.Contains(stderr, "--conf "+key+": a secret") || strings.Contains(stderr, "s3cr3t") {
			t.Errorf("cluster-mode submit with --conf %s: %v, stderr %q; want refused, the key named and the value not", key, err, stderr)
		}
	}
}
