package rpc

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

func TestAFailoverClientGoesOnToTheMasterThatAnswers(t *testing.T) {
	standby := serveH2C(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"code":"unavailable","message":"a standby"}`, http.StatusServiceUnavailable)
	}))
	var got string
	leader := serveH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = r.URL.Path + " " + string(b)
		io.WriteString(w, "ok")
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + ln.Addr().String()
	ln.Close()

	c, err := NewFailoverHTTPClient([]string{gone, standby.URL, leader.URL})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Post(gone+"/glint.master.v1.MasterService/GetClusterState", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || got != "/glint.master.v1.MasterService/GetClusterState {}" {
		t.Fatalf("status %d, the leader got %q; want the call, body and all, answered by the leader", resp.StatusCode, got)
	}
	// When none answers, the last one's answer stands.
	c, _ = NewFailoverHTTPClient([]string{gone, standby.URL})
	resp, err = c.Post(gone+"/x", "application/json", strings.NewReader("{}"))
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("no leader: %v %v, want the standby's 503", resp, err)
	}
	resp.Body.Close()
}

// serveH2C serves h as Glint's processes do (NewServer) until the test ends.
func serveH2C(t *testing.T, h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	srv.Config = NewServer(h)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// A call goes first to the master its URL names (the one known to lead),
// then to the others in the list's order.
func TestAFailoverCallGoesFirstToTheMasterItNames(t *testing.T) {
	var order []string
	var mu sync.Mutex
	master := func(name string, status int) *httptest.Server {
		return serveH2C(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			w.WriteHeader(status)
		}))
	}
	a, b, c := master("a", http.StatusServiceUnavailable), master("b", http.StatusServiceUnavailable), master("c", http.StatusOK)
	client, err := NewFailoverHTTPClient([]string{a.URL, b.URL, c.URL})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		first string
		want  string
	}{
		{c.URL, "c"},
		{b.URL, "b a c"},
		{a.URL, "a b c"},
	} {
		order = nil
		resp, err := client.Post(tc.first+"/glint.master.v1.MasterService/GetClusterState", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := strings.Join(order, " "); resp.StatusCode != http.StatusOK || got != tc.want {
			t.Errorf("a call for %s: %d, tried %q, want %q", tc.first, resp.StatusCode, got, tc.want)
		}
	}
}
