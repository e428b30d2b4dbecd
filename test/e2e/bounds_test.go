package e2e

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// TestHostileRequestsBounds sends a running master requests meant to crash,
// bloat or wrap it: each is refused with its Connect code, leaves the cluster
// state as it was, and the master's peak memory stays under 200 MiB.
func TestHostileRequestsBounds(t *testing.T) {
	c := startCluster(t, 0)
	worker := func(id string, cores int32, memoryMiB int64) proto.Message {
		return &masterv1.RegisterWorkerRequest{WorkerId: id, Host: "10.0.0.9", Port: 7078, Cores: cores, MemoryMib: memoryMiB, WorkerUrl: "http://10.0.0.9:7078"}
	}
	app := func(name string, args ...string) proto.Message {
		return &masterv1.RegisterApplicationRequest{AppToken: rpc.NewToken(), MasterToken: rpc.NewToken(), DriverUrl: "http://127.0.0.1:1", Description: &masterv1.ApplicationDescription{
			Name: name, MemoryPerExecutorMib: 512, Command: &masterv1.Command{Args: append([]string{"/bin/true"}, args...)}}}
	}
	bomb := gzipBomb(t)
	cases := []struct {
		name, procedure string
		body            func() io.Reader
		header          http.Header
		want            string
	}{
		{"50 MB body", "RegisterWorker", func() io.Reader { return io.LimitReader(zeroReader{}, 50<<20) }, nil, "resource_exhausted"},
		{"gzip bomb, 1 MB to 1 GiB", "RegisterApplication", func() io.Reader { return bytes.NewReader(bomb) },
			http.Header{"Content-Encoding": {"gzip"}}, "resource_exhausted"},
		{"cores 2^31-1", "RegisterWorker", jsonBody(t, worker("worker-20261129140000-10.0.0.9-7078", math.MaxInt32, 1024)), nil, "invalid_argument"},
		{"second worker of 2^31-1 cores", "RegisterWorker", jsonBody(t, worker("worker-20261129140000-10.0.0.9-7079", math.MaxInt32, 1024)), nil, "invalid_argument"},
		{"memory 2^62 MiB", "RegisterWorker", jsonBody(t, worker("worker-20261129140000-10.0.0.9-7078", 4, 1<<62)), nil, "invalid_argument"},
		{"worker id with traversal", "RegisterWorker", jsonBody(t, worker("worker-20261129140000-../../etc-1", 4, 1024)), nil, "invalid_argument"},
		{"app id with traversal", "KillApplication", jsonBody(t, &masterv1.KillApplicationRequest{AppId: "app-20261129140000-0000/../../x"}), nil, "invalid_argument"},
		{"driver id with traversal", "DriverStatus", jsonBody(t, &masterv1.DriverStatusRequest{DriverId: "../driver-20261129140000-0000"}), nil, "invalid_argument"},
		{"1 MiB application name", "RegisterApplication", jsonBody(t, app(strings.Repeat("n", 1<<20))), nil, "invalid_argument"},
		{"2000 arguments", "RegisterApplication", jsonBody(t, app("a", make([]string, 2000)...)), nil, "invalid_argument"},
		{"300 --conf entries", "SubmitDriver", jsonBody(t, &masterv1.SubmitDriverRequest{Description: &masterv1.DriverDescription{
			Name: "d", Cores: 1, MemoryMib: 512, Command: &masterv1.Command{Args: append([]string{"/bin/true"}, strings.Split(strings.Repeat("--conf a=b ", 300), " ")...)}}}),
			nil, "invalid_argument"},
	}
	before := c.rawState(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, msg := hostileCall(t, c.master.url+"/glint.master.v1.MasterService/"+tc.procedure, tc.body(), tc.header)
			t.Logf("%s: %s", code, msg)
			if code != tc.want {
				t.Fatalf("code %q, want %q (%s)", code, tc.want, msg)
			}
			if after := c.rawState(t); !reflect.DeepEqual(after, before) {
				t.Errorf("cluster state changed:\n%v\nwas\n%v", after, before)
			}
		})
	}
	hwm := peakRSS(t, c.master.cmd.Process.Pid)
	t.Logf("master's peak RSS (VmHWM): %d KiB", hwm)
	if hwm > 200<<10 {
		t.Errorf("master's peak RSS %d KiB, want under 200 MiB", hwm)
	}
}

// rawState is the master's /json without the fields that change by themselves.
func (c *testCluster) rawState(t *testing.T) map[string]any {
	t.Helper()
	resp := getPage(t, nil, c.master.url+"/json")
	defer resp.Body.Close()
	var st map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

func jsonBody(t *testing.T, m proto.Message) func() io.Reader {
	b, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return func() io.Reader { return bytes.NewReader(b) }
}

// hostileCall posts body as a Connect unary call (JSON, or proto when gzipped
// or raw) and returns the error code and message of the answer.
func hostileCall(t *testing.T, url string, body io.Reader, header http.Header) (code, message string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if header != nil || req.ContentLength == 0 {
		req.Header.Set("Content-Type", "application/proto")
	}
	// Callers are authenticated with the test's token unless the case says
	// otherwise (an empty Authorization sends none).
	req.Header.Set("Authorization", "Bearer "+testToken)
	for k, v := range header {
		req.Header[k] = v
	}
	if req.Header.Get("Authorization") == "" {
		req.Header.Del("Authorization")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	defer resp.Body.Close()
	var wire struct{ Code, Message string }
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&wire); err != nil {
		return "http " + strconv.Itoa(resp.StatusCode), err.Error()
	}
	return wire.Code, wire.Message
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// gzipBomb is about 1 MB of gzip that inflates to 1 GiB of zeros: a 16 MiB
// member repeated 64 times.
func gzipBomb(t *testing.T) []byte {
	var member bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&member, gzip.BestCompression)
	if _, err := io.Copy(zw, io.LimitReader(zeroReader{}, 16<<20)); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	return bytes.Repeat(member.Bytes(), 64)
}

// peakRSS is a process's VmHWM in KiB.
func peakRSS(t testing.TB, pid int) int { return tooltest.ProcStatusKiB(t, pid, "VmHWM") }
