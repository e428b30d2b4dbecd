package rpc

import (
	"net/http"
	"net/http/httptest"
	"testing"
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
	if !tokens.rolesOf(token)[Submit] {
		t.Errorf("a token added twice and removed once is refused")
	}
	tokens.Remove(Submit, token)
	if len(tokens.rolesOf(token)) != 0 {
		t.Errorf("a removed token is still accepted")
	}
}
