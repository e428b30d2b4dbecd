package rpc

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/glint-cluster/glint/pkg/telemetry/prom"
)

func TestAuthenticateAnswersPagesByRole(t *testing.T) {
	tokens := NewTokens()
	cluster, submit := NewToken(), NewToken()
	tokens.Add(Cluster, cluster)
	tokens.Add(Submit, submit)
	h := authenticate(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }), tokens,
		func(r *http.Request) Role {
			return map[string]Role{"/open": Public, "/any": AnyToken, "/cluster": Cluster}[r.URL.Path]
		})
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{"/open", "", http.StatusTeapot},
		{"/cluster", "", http.StatusUnauthorized},
		{"/cluster", NewToken(), http.StatusUnauthorized},
		{"/cluster", submit, http.StatusForbidden},
		{"/cluster", cluster, http.StatusTeapot},
		{"/any", submit, http.StatusTeapot},
		{"/any", "", http.StatusUnauthorized},
	} {
		req := httptest.NewRequest(http.MethodGet, tc.path, nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("GET %s with token %q: %d, want %d", tc.path, tc.token, rec.Code, tc.want)
		}
	}
}

func TestTokensRemovedAreRefused(t *testing.T) {
	tokens := NewTokens()
	token := NewToken()
	tokens.Remove(Submit, token) // never added: nothing happens
	tokens.Add(Submit, token)
	tokens.Add(Submit, token)
	tokens.Remove(Submit, token)
	if !tokens.Allows(token, Submit) {
		t.Errorf("a token added twice and removed once is refused")
	}
	tokens.Remove(Submit, token)
	if tokens.rolesOf(token) != 0 {
		t.Errorf("a removed token is still accepted")
	}
}

func TestMetricsPagesNeedATokenOnlyWithMetricsAuth(t *testing.T) {
	token := NewToken()
	tokens := NewTokens()
	tokens.Add(Cluster, token)
	for _, metricsAuth := range []bool{false, true} {
		h := NewHandler(Endpoints{
			Service: func(...connect.HandlerOption) (string, http.Handler) {
				return "/test.v1.Service/", http.NotFoundHandler()
			},
			Metrics: prom.Handler(prom.NewRegistry()),
			Pages:   map[string]http.HandlerFunc{"GET /sd": func(http.ResponseWriter, *http.Request) {}},
			Access:  Access{"GET /sd": Metrics}, Tokens: tokens, MetricsAuth: metricsAuth,
		})
		for _, path := range []string{"/metrics", "/sd"} {
			for _, withToken := range []bool{false, true} {
				req := httptest.NewRequest(http.MethodGet, path, nil)
				if withToken {
					req.Header.Set("Authorization", "Bearer "+token)
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if want := !metricsAuth || withToken; (rec.Code == http.StatusOK) != want {
					t.Errorf("metrics auth %v, GET %s with token %v: %d", metricsAuth, path, withToken, rec.Code)
				}
			}
		}
	}
}

func TestARefusedTokenIsToldWhatItIsValidFor(t *testing.T) {
	tokens := NewTokens()
	token := NewToken()
	tokens.Add(Submit, token)
	tokens.Add(Cluster, token)
	h := authenticate(http.NotFoundHandler(), tokens, func(*http.Request) Role { return App })
	req := httptest.NewRequest(http.MethodGet, "/x", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	want := "it needs the application token, not a cluster and submit one"
	if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), want) {
		t.Errorf("%d %q, want 403 saying %q", rec.Code, rec.Body.String(), want)
	}
}

// Every call checks its token: the check allocates nothing.
func TestCheckingATokenAllocatesNothing(t *testing.T) {
	tokens := NewTokens()
	token := NewToken()
	tokens.Add(Cluster, token)
	tokens.Add(Submit, NewToken())
	if n := testing.AllocsPerRun(100, func() { tokens.Allows(token, Cluster) }); n != 0 {
		t.Errorf("a token check allocates %v times", n)
	}
}

func TestATokenLongerThanTheLongestIsRefused(t *testing.T) {
	tokens := NewTokens()
	longest := strings.Repeat("t", MaxTokenBytes)
	tokens.Add(Cluster, longest)
	if !tokens.Allows(longest, Cluster) {
		t.Fatal("a token of MaxTokenBytes is refused")
	}
	if tokens.Allows(longest+"x", Cluster) {
		t.Error("a token one byte longer than a valid one, and than MaxTokenBytes, is accepted")
	}
}

func TestARefusalIsWrittenInTheCallersProtocol(t *testing.T) {
	refusal := connect.NewError(connect.CodeUnavailable, errors.New("a standby"))
	for _, tc := range []struct {
		name, contentType string
		status            int
		want              string // in the body, or (gRPC) the grpc-status header
	}{
		{"connect", "application/json", http.StatusServiceUnavailable, `"code":"unavailable"`},
		{"grpc", "application/grpc", http.StatusOK, "14"},
		{"plain", "", http.StatusServiceUnavailable, "a standby"},
	} {
		req := httptest.NewRequest(http.MethodPost, "/test.v1.Service/Call", strings.NewReader("{}"))
		if tc.contentType != "" {
			req.Header.Set("Content-Type", tc.contentType)
		}
		rec := httptest.NewRecorder()
		Refuse(rec, req, refusal)
		got := rec.Body.String() + " grpc-status " + rec.Header().Get("Grpc-Status")
		if rec.Code != tc.status || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %d %q, want %d with %q", tc.name, rec.Code, got, tc.status, tc.want)
		}
	}
}

// A token file others may read is refused with the fix, as ssh refuses a
// private key: of the process's own user, any group or other bit; of another
// owner (a Kubernetes Secret volume's root with an fsGroup), any other bit.
func TestATokenFileOthersMayReadIsRefused(t *testing.T) {
	token := NewToken()
	for _, tc := range []struct {
		mode os.FileMode
		ok   bool
	}{{0o600, true}, {0o400, true}, {0o644, false}, {0o640, false}, {0o604, false}, {0o660, false}, {0o666, false}} {
		path := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, tc.mode); err != nil {
			t.Fatal(err)
		}
		got, err := ReadToken("--token-file", path)
		switch {
		case tc.ok && (err != nil || got != token):
			t.Errorf("mode %#o: %q %v, want the token", tc.mode, got, err)
		case !tc.ok && (err == nil || !strings.Contains(err.Error(), "chmod 600 "+path) || !strings.Contains(err.Error(), "--token-file")):
			t.Errorf("mode %#o: %v, want a refusal saying chmod 600 %s", tc.mode, err, path)
		}
	}
	for _, tc := range []struct {
		mode os.FileMode
		ok   bool
	}{{0o400, true}, {0o440, true}, {0o444, false}, {0o404, false}} {
		if err := checkTokenFileMode("f", tc.mode, false); (err == nil) != tc.ok {
			t.Errorf("a file of another owner, mode %#o: %v, want accepted %v", tc.mode, err, tc.ok)
		}
	}
}

// A call made with a named token carries its name for the role the call
// needed (one token may have a name for each of its roles); a refused call
// reaches no handler.
func TestACallCarriesItsTokensName(t *testing.T) {
	tokens := NewTokens()
	alice, cluster := NewToken(), NewToken()
	tokens.AddNamed(Submit, "alice", alice)
	tokens.AddNamed(Cluster, "the cluster", cluster)
	tokens.AddNamed(Submit, "admin", cluster)
	var caller string
	h := authenticate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { caller = Caller(r.Context()) }), tokens,
		func(r *http.Request) Role { return map[string]Role{"/submit": Submit, "/cluster": Cluster}[r.URL.Path] })
	for _, tc := range []struct{ path, token, want string }{
		{"/submit", alice, "alice"}, {"/submit", cluster, "admin"}, {"/cluster", cluster, "the cluster"}, {"/cluster", alice, "unset"},
	} {
		caller = "unset"
		req := httptest.NewRequest(http.MethodGet, tc.path, nil)
		req.Header.Set("Authorization", "Bearer "+tc.token)
		h.ServeHTTP(httptest.NewRecorder(), req)
		if caller != tc.want {
			t.Errorf("%s: caller %q, want %q", tc.path, caller, tc.want)
		}
	}
	if got := tokens.Name(alice, Submit); got != "alice" {
		t.Errorf("Name: %q, want alice", got)
	}
	if got := tokens.Name(alice, Cluster); got != "" {
		t.Errorf("Name for a role the token has not: %q", got)
	}
}
