package master

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// owned is a master with named submit tokens, as `glint master` makes it:
// the cluster token as admin, alice's, bob's and ops's (an admin by
// Config.Admins), and a client for each.
type owned struct {
	*cluster
	tokens                       map[string]string
	admin, alice, bob, ops, anon masterv1connect.MasterServiceClient
}

func newOwned(t *testing.T, cfg Config) *owned {
	t.Helper()
	o := &owned{tokens: map[string]string{}}
	cfg.Tokens = rpc.NewTokens()
	for _, name := range []string{AdminName, "alice", "bob", "ops"} {
		o.tokens[name] = rpc.NewToken()
		cfg.Tokens.AddNamed(rpc.Submit, name, o.tokens[name])
	}
	cfg.Tokens.Add(rpc.Cluster, o.tokens[AdminName])
	cfg.ClusterToken, cfg.Admins = o.tokens[AdminName], []string{"ops"}
	o.cluster = newCluster(t, cfg)
	o.admin, o.alice, o.bob, o.ops = o.client(o.tokens[AdminName]), o.client(o.tokens["alice"]), o.client(o.tokens["bob"]), o.client(o.tokens["ops"])
	return o
}

// client calls the master with token.
func (o *owned) client(token string) masterv1connect.MasterServiceClient {
	return masterv1connect.NewMasterServiceClient(rpc.NewHTTPClient(), o.url, rpc.ClientOptions(nil, token)...)
}

// register registers an application with appToken through client, for
// driver (empty: in client mode), and returns its id.
func register(t *testing.T, client masterv1connect.MasterServiceClient, p *peer, driver, appToken string) string {
	t.Helper()
	resp, err := client.RegisterApplication(context.Background(), connect.NewRequest(&masterv1.RegisterApplicationRequest{
		AppToken: appToken, MasterToken: rpc.NewToken(), Description: appDesc(512, 1), DriverUrl: p.url, DriverId: driver}))
	if err != nil {
		t.Fatalf("register application: %v", err)
	}
	return resp.Msg.GetAppId()
}

// submit submits a driver through client as submission and returns its id
// and the token the master made for it.
func (o *owned) submit(t *testing.T, client masterv1connect.MasterServiceClient, submission string) (id, token string) {
	t.Helper()
	resp, err := client.SubmitDriver(context.Background(), connect.NewRequest(&masterv1.SubmitDriverRequest{SubmissionId: submission,
		Description: &masterv1.DriverDescription{Name: "d", Cores: 1, MemoryMib: 256, Command: &masterv1.Command{Args: []string{"/bin/true"}}}}))
	if err != nil {
		t.Fatalf("submit driver: %v", err)
	}
	id = resp.Msg.GetDriverId()
	o.srv.mu.Lock()
	defer o.srv.mu.Unlock()
	return id, o.srv.drivers[id].submitToken
}

// state is what a refused call must not change: the cluster's state and
// each application's executor limit.
func (o *owned) state() string {
	o.srv.mu.Lock()
	limits := map[string]int{}
	for id, a := range o.srv.apps {
		limits[id] = a.executorLimit
	}
	o.srv.mu.Unlock()
	st, _ := proto.Marshal(o.srv.clusterState())
	return fmt.Sprintf("%x %v", st, limits)
}

// owners are the owners GetClusterState shows, by application and driver id.
func owners(st *masterv1.GetClusterStateResponse) map[string]string {
	out := map[string]string{}
	for _, a := range append(st.GetActiveApps(), st.GetCompletedApps()...) {
		out[a.GetId()] = a.GetOwner()
	}
	for _, d := range append(st.GetActiveDrivers(), st.GetCompletedDrivers()...) {
		out[d.GetId()] = d.GetOwner()
	}
	return out
}

// TestApplicationsBelongToTheirSubmitter: each call that ends, resizes or
// reports on an application or driver is refused (PermissionDenied, nothing
// changed) to any token but its owner's or an admin's; a cluster-mode
// driver's token acts only on its own driver and applications; then the
// owner's and the admins' same calls succeed.
func TestApplicationsBelongToTheirSubmitter(t *testing.T) {
	o := newOwned(t, Config{MaxExecutorRetries: -1, DefaultCores: 1})
	wp, dp := newPeer(t), newPeer(t)
	worker := fmt.Sprintf("worker-20261129140000-127.0.0.1-%d", 7078)
	if _, err := o.admin.RegisterWorker(context.Background(), connect.NewRequest(&masterv1.RegisterWorkerRequest{
		WorkerId: worker, Host: "127.0.0.1", Port: 7078, Cores: 8, MemoryMib: 8192, WorkerUrl: wp.url,
	})); err != nil {
		t.Fatal(err)
	}
	alicesToken := rpc.NewToken()
	alices := register(t, o.alice, dp, "", alicesToken)
	bobs := register(t, o.bob, dp, "", rpc.NewToken())
	wp.expectAll(t, "LaunchExecutor "+alices+"/0", "LaunchExecutor "+bobs+"/0")
	driver, driverToken := o.submit(t, o.alice, "alices-submission")
	other, _ := o.submit(t, o.alice, "")
	asDriver := o.client(driverToken)
	driversApp := register(t, asDriver, dp, driver, rpc.NewToken())

	if got, want := owners(o.srv.clusterState()), map[string]string{alices: "alice", bobs: "bob", driver: "alice", other: "alice", driversApp: "alice"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("owners %v, want %v", got, want)
	}

	bg := context.Background()
	kill := func(c masterv1connect.MasterServiceClient, app string) error {
		_, err := c.KillApplication(bg, connect.NewRequest(&masterv1.KillApplicationRequest{AppId: app}))
		return err
	}
	resize := func(c masterv1connect.MasterServiceClient, app string, n int32) error {
		_, err := c.RequestExecutors(bg, connect.NewRequest(&masterv1.RequestExecutorsRequest{AppId: app, RequestedTotal: n}))
		return err
	}
	killExecutors := func(c masterv1connect.MasterServiceClient, app string) error {
		_, err := c.KillExecutors(bg, connect.NewRequest(&masterv1.KillExecutorsRequest{AppId: app, ExecutorIds: []int32{0}}))
		return err
	}
	report := func(c masterv1connect.MasterServiceClient, app string) error {
		_, err := c.ReportExecutorLaunch(bg, connect.NewRequest(&masterv1.ReportExecutorLaunchRequest{AppId: app, ExecutorId: 0}))
		return err
	}
	unregister := func(c masterv1connect.MasterServiceClient, app string) error {
		_, err := c.UnregisterApplication(bg, connect.NewRequest(&masterv1.UnregisterApplicationRequest{AppId: app}))
		return err
	}
	status := func(c masterv1connect.MasterServiceClient, d string) error {
		_, err := c.DriverStatus(bg, connect.NewRequest(&masterv1.DriverStatusRequest{DriverId: d}))
		return err
	}
	killDriver := func(c masterv1connect.MasterServiceClient, d string) error {
		_, err := c.KillDriver(bg, connect.NewRequest(&masterv1.KillDriverRequest{DriverId: d}))
		return err
	}
	resubmit := func(c masterv1connect.MasterServiceClient, submission string) error {
		_, err := c.SubmitDriver(bg, connect.NewRequest(&masterv1.SubmitDriverRequest{SubmissionId: submission,
			Description: &masterv1.DriverDescription{Name: "d", Cores: 1, MemoryMib: 256, Command: &masterv1.Command{Args: []string{"/bin/true"}}}}))
		return err
	}
	registerAs := func(c masterv1connect.MasterServiceClient, d, appToken string) error {
		_, err := c.RegisterApplication(bg, connect.NewRequest(&masterv1.RegisterApplicationRequest{
			AppToken: appToken, MasterToken: rpc.NewToken(), Description: appDesc(512, 1), DriverUrl: dp.url, DriverId: d}))
		return err
	}
	registerFor := func(c masterv1connect.MasterServiceClient, d string) error { return registerAs(c, d, rpc.NewToken()) }
	button := func(token, path string) error {
		req, _ := http.NewRequest(http.MethodPost, o.url+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusForbidden {
			page, _ := io.ReadAll(resp.Body)
			return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("POST %s: %s: %s", path, resp.Status, page))
		}
		if resp.StatusCode != http.StatusSeeOther {
			return fmt.Errorf("POST %s: %s", path, resp.Status)
		}
		return nil
	}
	const denied, invalid = connect.CodePermissionDenied, connect.CodeInvalidArgument
	for _, tc := range []struct {
		name string
		call func() error
		want connect.Code
	}{
		{"another submitter kills an application", func() error { return kill(o.bob, alices) }, denied},
		{"another submitter kills it with the UI's button", func() error { return button(o.tokens["bob"], "/app/"+alices+"/kill") }, denied},
		{"another submitter asks for its executors", func() error { return resize(o.bob, alices, 5) }, denied},
		{"another submitter kills its executors", func() error { return killExecutors(o.bob, alices) }, denied},
		{"another submitter reports on its executor", func() error { return report(o.bob, alices) }, denied},
		{"another submitter unregisters it", func() error { return unregister(o.bob, alices) }, denied},
		{"another submitter reads a driver's status", func() error { return status(o.bob, driver) }, denied},
		{"another submitter kills a driver", func() error { return killDriver(o.bob, driver) }, denied},
		{"another submitter kills a driver with the UI's button", func() error { return button(o.tokens["bob"], "/driver/"+driver+"/kill") }, denied},
		{"another submitter repeats a submission id", func() error { return resubmit(o.bob, "alices-submission") }, denied},
		{"another submitter registers for a driver", func() error { return registerFor(o.bob, driver) }, denied},
		{"another submitter repeats a registration", func() error { return registerAs(o.bob, "", alicesToken) }, denied},
		{"another submitter kills the driver's application", func() error { return kill(o.bob, driversApp) }, denied},
		{"a driver's token kills its owner's other application", func() error { return kill(asDriver, alices) }, denied},
		{"a driver's token asks for another application's executors", func() error { return resize(asDriver, bobs, 5) }, denied},
		{"a driver's token reports on another application", func() error { return report(asDriver, alices) }, denied},
		{"a driver's token reads another driver's status", func() error { return status(asDriver, other) }, denied},
		{"a driver's token kills another driver", func() error { return killDriver(asDriver, other) }, denied},
		{"a driver's token submits a driver", func() error { return resubmit(asDriver, "") }, denied},
		{"a driver's token registers for another driver", func() error { return registerFor(asDriver, other) }, denied},
		{"a driver's token registers an application of no driver", func() error { return registerFor(asDriver, "") }, denied},
		{"the owner asks for 2^31-1 executors", func() error { return resize(o.alice, alices, math.MaxInt32) }, invalid},
		{"an admin asks for 2^31-1 executors", func() error { return resize(o.admin, bobs, math.MaxInt32) }, invalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := o.state()
			err := tc.call()
			if connect.CodeOf(err) != tc.want {
				t.Fatalf("%v, want %v", err, tc.want)
			}
			if tc.want == denied && !strings.Contains(err.Error(), "only") {
				t.Errorf("%v: the refusal does not say who may", err)
			}
			if after := o.state(); after != before {
				t.Errorf("the refused call changed the master's state")
			}
		})
	}

	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"the owner asks for executors", func() error { return resize(o.alice, alices, 1) }},
		{"the owner reports on its executor", func() error { return report(o.alice, alices) }},
		{"the owner reads its driver's status", func() error { return status(o.alice, driver) }},
		{"a driver's token asks for its application's executors", func() error { return resize(asDriver, driversApp, 2) }},
		{"a driver's token reads its own status", func() error { return status(asDriver, driver) }},
		{"an admin asks for another's executors", func() error { return resize(o.admin, alices, 3) }},
		{"the owner kills its executors", func() error { return killExecutors(o.alice, alices) }},
		{"the owner kills the driver's application", func() error { return kill(o.alice, driversApp) }},
		{"the owner kills a driver with the UI's button", func() error { return button(o.tokens["alice"], "/driver/"+other+"/kill") }},
		{"an admin by --admin-acls kills another's application", func() error { return kill(o.ops, alices) }},
		{"the cluster token kills another's application with the UI's button", func() error { return button(o.tokens[AdminName], "/app/"+bobs+"/kill") }},
	} {
		if err := tc.call(); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	st := o.srv.clusterState()
	if got := len(st.GetActiveApps()); got != 0 {
		t.Errorf("%d applications still active, want all killed", got)
	}
	if got := owners(st); got[alices] != "alice" || got[bobs] != "bob" || got[driversApp] != "alice" {
		t.Errorf("owners of the ended applications %v, want them kept", got)
	}
}

// An application's and a driver's owner survive the master's restart: the
// recovered master refuses another submitter as before, and the driver's
// token still acts on its own application.
func TestOwnersSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	dp := newPeer(t)
	tokens := map[string]string{AdminName: rpc.NewToken(), "alice": rpc.NewToken(), "bob": rpc.NewToken()}
	cfg := func() Config {
		t := rpc.NewTokens()
		t.Add(rpc.Cluster, tokens[AdminName])
		for name, token := range tokens {
			t.AddNamed(rpc.Submit, name, token)
		}
		return Config{Tokens: t, ClusterToken: tokens[AdminName]}
	}
	first := cfg()
	first.Store = mustOpen(t, dir)
	o := &owned{cluster: newCluster(t, first)}
	o.alice = o.client(tokens["alice"])
	app := register(t, o.alice, dp, "", rpc.NewToken())
	driver, driverToken := o.submit(t, o.alice, "")
	driversApp := register(t, o.client(driverToken), dp, driver, rpc.NewToken())
	o.srv.mu.Lock()
	if err := first.Store.Close(); err != nil {
		t.Fatal(err)
	}
	o.srv.mu.Unlock()

	r := &owned{cluster: recoveringCluster(t, dir, cfg())}
	if got := owners(r.srv.clusterState()); got[app] != "alice" || got[driver] != "alice" || got[driversApp] != "alice" {
		t.Fatalf("owners after the restart %v, want alice's application, driver and driver's application", got)
	}
	_, err := r.client(tokens["bob"]).KillApplication(context.Background(), connect.NewRequest(&masterv1.KillApplicationRequest{AppId: app}))
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("another submitter kills a recovered application: %v, want permission denied", err)
	}
	if _, err := r.client(driverToken).RequestExecutors(context.Background(), connect.NewRequest(&masterv1.RequestExecutorsRequest{AppId: driversApp, RequestedTotal: 1})); err != nil {
		t.Errorf("a recovered driver's token asks for its application's executors: %v", err)
	}
	if _, err := r.client(tokens["alice"]).KillApplication(context.Background(), connect.NewRequest(&masterv1.KillApplicationRequest{AppId: app})); err != nil {
		t.Errorf("the owner kills its recovered application: %v", err)
	}
}

func TestTokenNames(t *testing.T) {
	for name, ok := range map[string]bool{
		"alice": true, "team.data-eng_2": true, "svc@example.com": true, AdminName: true, DefaultTokenName: true,
		"": false, strings.Repeat("a", 65): false, "al ice": false, "a/b": false, "a=b": false,
		"driver-20261129140000-0001": false, "driver-x": true,
	} {
		if err := CheckTokenName(name); (err == nil) != ok {
			t.Errorf("CheckTokenName(%q): %v, want accepted %v", name, err, ok)
		}
	}
}

// TestModifyACLsLetOthersAct: an application's spark.modify.acls (its
// description's modify_acls) lets the names it lists act on it as its
// owner may, and no one else; "*" lets every submitter; a driver's does the
// same for the driver; a name that is no token name is refused at the door.
func TestModifyACLsLetOthersAct(t *testing.T) {
	o := newOwned(t, Config{MaxExecutorRetries: -1})
	dp := newPeer(t)
	registerWith := func(c masterv1connect.MasterServiceClient, acls ...string) (string, error) {
		desc := appDesc(512, 1)
		desc.ModifyAcls = acls
		resp, err := c.RegisterApplication(context.Background(), connect.NewRequest(&masterv1.RegisterApplicationRequest{
			AppToken: rpc.NewToken(), MasterToken: rpc.NewToken(), Description: desc, DriverUrl: dp.url}))
		if err != nil {
			return "", err
		}
		return resp.Msg.GetAppId(), nil
	}
	kill := func(c masterv1connect.MasterServiceClient, app string) error {
		_, err := c.KillApplication(context.Background(), connect.NewRequest(&masterv1.KillApplicationRequest{AppId: app}))
		return err
	}
	forBob, err := registerWith(o.alice, "bob")
	if err != nil {
		t.Fatal(err)
	}
	forAll, err := registerWith(o.alice, "*")
	if err != nil {
		t.Fatal(err)
	}
	anonymous := o.client(rpc.NewToken())
	o.tokens["carol"] = rpc.NewToken()
	o.srv.cfg.Tokens.AddNamed(rpc.Submit, "carol", o.tokens["carol"])
	carol := o.client(o.tokens["carol"])
	if err := kill(carol, forBob); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("carol kills alice's application that names bob: %v, want permission_denied", err)
	}
	if err := kill(o.bob, forBob); err != nil {
		t.Fatalf("bob kills alice's application that names him: %v", err)
	}
	if err := kill(anonymous, forAll); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("a token the master does not know kills an application of \"*\": %v, want unauthenticated", err)
	}
	if err := kill(carol, forAll); err != nil {
		t.Fatalf("carol kills alice's application of \"*\": %v", err)
	}

	resp, err := o.alice.SubmitDriver(context.Background(), connect.NewRequest(&masterv1.SubmitDriverRequest{
		Description: &masterv1.DriverDescription{Name: "d", Cores: 1, MemoryMib: 256, Command: &masterv1.Command{Args: []string{"/bin/true"}}, ModifyAcls: []string{"bob"}}}))
	if err != nil {
		t.Fatal(err)
	}
	killDriver := func(c masterv1connect.MasterServiceClient) error {
		_, err := c.KillDriver(context.Background(), connect.NewRequest(&masterv1.KillDriverRequest{DriverId: resp.Msg.GetDriverId()}))
		return err
	}
	if err := killDriver(carol); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("carol kills alice's driver that names bob: %v, want permission_denied", err)
	}
	if err := killDriver(o.bob); err != nil {
		t.Fatalf("bob kills alice's driver that names him: %v", err)
	}

	for _, acls := range [][]string{{"bob smith"}, {""}, {"driver-20261129140000-0001"}, slices.Repeat([]string{"bob"}, MaxModifyACLs+1)} {
		if _, err := registerWith(o.alice, acls...); connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "modify_acls") {
			t.Errorf("modify_acls %.40q: %v, want invalid_argument naming modify_acls", acls, err)
		}
	}
}
