package rpc

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"
)

func TestAListenerAnswersToItsNamesAndAnyIPAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	names := listenerHosts(ln, []string{"master", "Worker-1.example."})
	for host, want := range map[string]bool{
		"localhost": true, "LocalHost:7077": true, "127.0.0.1:7077": true, "[::1]:7077": true, "[::1]": true,
		"10.1.2.3": true, "[2001:db8::1]:7078": true, // NAT, a published port, a Service's cluster IP
		"master": true, "master:7077": true, "MASTER.": true, "worker-1.example:7078": true,
		"rebind.attacker.example": false, "rebind.attacker.example:7077": false, "master.attacker.example": false,
		"localhost.attacker.example": false, "": false, ":7077": false, "master:7077:1": false,
	} {
		if got := names.allows(host); got != want {
			t.Errorf("Host %q allowed: %v, want %v", host, got, want)
		}
	}
	if name, err := os.Hostname(); err == nil && names.allows(name) {
		t.Errorf("a listener on loopback answers to the host name %q", name)
	}
}

func TestAListenerOnAnUnspecifiedAddressAnswersToTheHostName(t *testing.T) {
	name, err := os.Hostname()
	if err != nil {
		t.Skip(err)
	}
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if !listenerHosts(ln, nil).allows(name + ":7077") {
		t.Errorf("a listener on %s does not answer to the host name %q", ln.Addr(), name)
	}
}

// failingBody fails the test if anything reads it.
type failingBody struct{ t *testing.T }

func (b failingBody) Read([]byte) (int, error) {
	b.t.Error("the body of a misdirected request was read")
	return 0, io.EOF
}

// A misdirected request is refused with 421 before the handler (and its
// authentication) sees it, and its body is not read.
func TestAMisdirectedRequestIsRefusedBeforeAnythingElse(t *testing.T) {
	reached := false
	h := checkHost(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true }), hostNames{"localhost": true})
	req := httptest.NewRequest(http.MethodPost, echoProcedure, failingBody{t})
	req.Host = "rebind.attacker.example"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusMisdirectedRequest || reached {
		t.Fatalf("answered %d, handler reached: %v; want 421 before the handler", rec.Code, reached)
	}

	// Served as a process serves: refused before authentication (421, not
	// 401), /healthz included; a request naming the listener passes.
	addr := serveLimited(t, defaultConnLimits(), false)
	for _, tc := range []struct {
		host, method, path, token string
		want                      int
	}{
		{"rebind.attacker.example", http.MethodPost, echoProcedure, "", http.StatusMisdirectedRequest},
		{"rebind.attacker.example:80", http.MethodPost, echoProcedure, limitedToken, http.StatusMisdirectedRequest},
		{"rebind.attacker.example", http.MethodGet, "/healthz", "", http.StatusMisdirectedRequest},
		{addr, http.MethodPost, echoProcedure, "", http.StatusUnauthorized},
		{"localhost", http.MethodPost, echoProcedure, limitedToken, http.StatusOK},
	} {
		req, err := http.NewRequest(tc.method, "http://"+addr+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = tc.host
		req.Header.Set("Content-Type", "application/proto")
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		client := http.Client{Timeout: 10 * time.Second}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s with Host %q: %s, want %d", tc.method, tc.path, tc.host, resp.Status, tc.want)
		}
	}
}
