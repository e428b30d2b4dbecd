package master

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/glint-cluster/glint/internal/etcdtest"
	"github.com/glint-cluster/glint/internal/faultproxy"
	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/services/master/store"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// runningHA is a master under election served on loopback as the glint
// command serves it.
type runningHA struct {
	*HA
	url string
	ran chan error // Run's error, once it returned
}

// startHA runs an HA master for cfg (its URL filled in) on etcd at endpoint
// until the test ends.
func startHA(t *testing.T, endpoint string, cfg HAConfig) *runningHA {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Master.URL = "http://" + ln.Addr().String()
	cfg.Etcd = glintEtcd(t, endpoint)
	h, err := NewHA(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { defer close(served); _ = rpc.Serve(ctx, ln, h.Handler()) }()
	r := &runningHA{HA: h, url: cfg.Master.URL, ran: make(chan error, 1)}
	go func() { r.ran <- h.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-served })
	return r
}

// holdElection makes another candidate, at leaderURL, lead the election
// under prefix until the test ends.
func holdElection(t *testing.T, endpoint, prefix, leaderURL string) {
	t.Helper()
	s, err := concurrency.NewSession(etcdtest.Client(t, endpoint), concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := concurrency.NewElection(s, prefix+"/leader").Campaign(context.Background(), leaderURL); err != nil {
		t.Fatal(err)
	}
}

// get is GET url with token ("" for none): its status and body.
func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	return resp.StatusCode, body.String()
}

// A standby answers every call Unavailable, whatever token it carries: a
// cluster-mode driver's submit token is known only to the leader that made
// it, and the driver must be told to try the next master, not that its
// token is wrong. Only a caller with a token the standby accepts learns
// which master leads; the standby reads nothing of the call.
func TestAStandbyAnswersEveryCallUnavailableWhateverItsToken(t *testing.T) {
	endpoint := etcdtest.Start(t)
	const leader = "http://leader.example:7077"
	holdElection(t, endpoint, "/glint-test", leader)
	cluster, submit := rpc.NewToken(), rpc.NewToken()
	tokens := rpc.NewTokens()
	tokens.Add(rpc.Cluster, cluster)
	tokens.Add(rpc.Submit, submit)
	h := startHA(t, endpoint, HAConfig{Master: Config{Tokens: tokens}, Prefix: "/glint-test", LeaseTTL: 2 * time.Second})
	tooltest.Eventually(t, "the standby seeing the leader", func() bool { return h.leaderName() == leader })

	for _, tc := range []struct {
		name, token string
		toldLeader  bool
	}{
		{"no token", "", false},
		{"a token only the leader knows (a cluster-mode driver's)", rpc.NewToken(), false},
		{"a submit token", submit, true},
		{"the cluster token", cluster, true},
	} {
		client := masterv1connect.NewMasterServiceClient(rpc.NewHTTPClient(), h.url, rpc.ClientOptions(nil, tc.token)...)
		_, err := client.RegisterApplication(context.Background(), connect.NewRequest(&masterv1.RegisterApplicationRequest{}))
		if connect.CodeOf(err) != connect.CodeUnavailable {
			t.Errorf("%s: RegisterApplication: %v, want unavailable", tc.name, err)
			continue
		}
		if told := strings.Contains(err.Error(), leader); told != tc.toldLeader || !tc.toldLeader && !strings.Contains(err.Error(), "try the next master") {
			t.Errorf("%s: %q: told the leader %v, want %v", tc.name, err, told, tc.toldLeader)
		}
	}
	// A body no handler would take, sent as Connect's JSON: still only the
	// refusal.
	req, err := http.NewRequest(http.MethodPost, h.url+masterv1connect.MasterServiceSubmitDriverProcedure, strings.NewReader("not json at all"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a call with a body no handler would take: %s, want 503", resp.Status)
	}

	// The pages keep their roles: /json needs a token and names the leader.
	if code, _ := get(t, h.url+"/json", ""); code != http.StatusUnauthorized {
		t.Errorf("/json without a token: %d, want 401", code)
	}
	code, body := get(t, h.url+"/json", submit)
	var state struct{ Status, Leader string }
	if err := json.Unmarshal([]byte(body), &state); code != http.StatusOK || err != nil || state.Status != statusStandby || state.Leader != leader {
		t.Errorf("/json with a submit token: %d %s, want STANDBY naming %s", code, body, leader)
	}
	if code, _ := get(t, h.url+"/readyz", ""); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz: %d, want 503", code)
	}
}

// A leader answers as one only while its lease is known to be held: cut off
// from etcd, it answers as a standby once a TTL passed since its last
// keep-alive was sent, and steps down.
func TestALeaderCutOffFromEtcdAnswersAsAStandbyOnceItsLeaseMayHaveLapsed(t *testing.T) {
	endpoint := etcdtest.Start(t)
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	proxy := faultproxy.New(t, u.Host)
	h := startHA(t, proxy.URL, HAConfig{Prefix: "/glint-test", LeaseTTL: time.Second})
	tooltest.Eventually(t, "the only candidate leading", func() bool { code, _ := get(t, h.url+"/readyz", ""); return code == http.StatusOK })
	proxy.Cut()
	select {
	case err := <-h.ran:
		if err == nil || !strings.Contains(err.Error(), "lost the leadership") {
			t.Fatalf("Run ended with %v, want the leadership lost", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a leader cut off from etcd did not step down within a minute")
	}
	if code, body := get(t, h.url+"/readyz", ""); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz of a leader whose lease may have lapsed: %d %s, want 503", code, body)
	}
	code, body := get(t, h.url+"/json", "")
	var state struct{ Status string }
	if err := json.Unmarshal([]byte(body), &state); code != http.StatusOK || err != nil || state.Status != statusStandby {
		t.Errorf("/json of a leader whose lease may have lapsed: %d %s, want STANDBY", code, body)
	}
	client := masterv1connect.NewMasterServiceClient(rpc.NewHTTPClient(), h.url, rpc.ClientOptions(nil, "")...)
	_, err = client.GetClusterState(context.Background(), connect.NewRequest(&masterv1.GetClusterStateRequest{}))
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "cannot confirm its leadership") {
		t.Errorf("a call to a leader whose lease may have lapsed: %v, want unavailable", err)
	}
}

// A standby shows the leader's URL as etcd holds it only when it is one:
// etcd's bytes are anyone's who can write there, and callers are told them.
func TestAStandbyShowsOnlyALeaderURLReadFromEtcd(t *testing.T) {
	endpoint := etcdtest.Start(t)
	s, err := concurrency.NewSession(etcdtest.Client(t, endpoint), concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	other := concurrency.NewElection(s, "/glint-test/leader")
	if err := other.Campaign(context.Background(), "http://leader.example:7077"); err != nil {
		t.Fatal(err)
	}
	h := startHA(t, endpoint, HAConfig{Prefix: "/glint-test", LeaseTTL: 2 * time.Second})
	tooltest.Eventually(t, "the standby seeing the leader", func() bool { return h.leaderName() == "http://leader.example:7077" })
	if err := other.Proclaim(context.Background(), "http://a:1\nforged: line"); err != nil {
		t.Fatal(err)
	}
	tooltest.Eventually(t, "the standby no longer naming a leader", func() bool { return h.leaderName() == "not known yet" })

	for value, want := range map[string]string{
		"http://10.0.0.1:7077":        "http://10.0.0.1:7077",
		"https://master-0.glint:7077": "https://master-0.glint:7077",
		"":                            "",
		"not a url":                   "",
		"http://a:1\nforged: line":    "",
		"http://" + strings.Repeat("a", 1100) + ":1": "",
	} {
		if got := store.LeaderURL([]byte(value)); got != want {
			t.Errorf("LeaderURL(%.40q) = %q, want %q", value, got, want)
		}
	}
}

// A standby waiting for election stops when asked, though its etcd is gone.
func TestAStandbyStopsWhenAskedThoughItsEtcdIsGone(t *testing.T) {
	endpoint, stopEtcd := etcdtest.StartStoppable(t)
	cli := etcdtest.Client(t, endpoint)
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(2))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := concurrency.NewElection(s, "/glint-test/leader").Campaign(context.Background(), "http://leader"); err != nil {
		t.Fatal(err)
	}
	h, err := NewHA(HAConfig{Master: Config{URL: "http://standby:7077"}, Etcd: glintEtcd(t, endpoint), Prefix: "/glint-test", LeaseTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- h.Run(ctx) }()
	tooltest.Eventually(t, "the standby answering STANDBY with the leader", func() bool { return h.leaderName() == "http://leader" })
	stopEtcd()
	cancel()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("the standby stopped with %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the standby did not stop within a minute of being asked, its etcd gone")
	}
}

// glintEtcd is the master's client of the etcd at endpoint, closed when the
// test ends.
func glintEtcd(t testing.TB, endpoint string) *clientv3.Client {
	t.Helper()
	cli, err := store.NewEtcdClient([]string{endpoint})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}
