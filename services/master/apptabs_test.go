package master

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/redact"
)

// get is the body of c's page path, which must answer 200.
func (c *cluster) get(t *testing.T, path string) string {
	t.Helper()
	resp, err := http.Get(c.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
	}
	return string(body)
}

func TestTheEnvironmentTabShowsTheApplicationsConfRedacted(t *testing.T) {
	c := newCluster(t, Config{})
	d := appDesc(512, 1)
	d.Command = secretAppCommand()
	d.ModifyAcls = []string{"bob"}
	app := c.registerApp(t, newPeer(t), d)
	page := c.get(t, "/app/"+app+"?tab=environment")
	for _, want := range []string{
		`<tr><td>spark.executor.memory</td><td>1g</td></tr>`,
		`<tr><td>spark.authenticate.secret</td><td>` + redact.Text + `</td></tr>`,
		`<tr><td>spark.ssl.keyPassword</td><td>` + redact.Text + `</td></tr>`,
		`<tr><td>PLAIN</td><td>shown</td></tr>`,
		`<tr><td>MY_TOKEN</td><td>` + redact.Text + `</td></tr>`,
		`<p id="modify-acls">bob</p>`,
		`<a href="?tab=environment" data-tab="environment" class="current" aria-current="page">`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the environment tab lacks %s", want)
		}
	}
	for _, s := range secrets {
		if strings.Contains(page, s) {
			t.Errorf("the environment tab shows the secret %s", s)
		}
	}
	if strings.Contains(page, `id="executors"`) {
		t.Error("the environment tab shows the executors table too")
	}
	executors := c.get(t, "/app/"+app)
	if !strings.Contains(executors, `id="executors"`) || strings.Contains(executors, `id="conf"`) {
		t.Error("the application's page does not open on its executors tab alone")
	}
}

func TestTheApplicationPageRefreshesWhileItRunsOnly(t *testing.T) {
	c := newCluster(t, Config{})
	app := c.registerApp(t, newPeer(t), appDesc(512, 1))
	const refresh = `<meta http-equiv="refresh" content="5" id="refresh">`
	if !strings.Contains(c.get(t, "/app/"+app+"?tab=environment"), refresh) {
		t.Error("a running application's page does not refresh itself")
	}
	if _, err := c.client.UnregisterApplication(context.Background(), connect.NewRequest(&masterv1.UnregisterApplicationRequest{AppId: app})); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(c.get(t, "/app/"+app), refresh) {
		t.Error("an ended application's page still refreshes itself")
	}
}
