package rpc

import (
	"fmt"
	"net/http"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace"
)

// Endpoints is what one Glint process serves on its listener.
type Endpoints struct {
	// Service mounts the process's Connect service with the options it is
	// given, as a generated New…ServiceHandler does:
	//
	//	func(o ...connect.HandlerOption) (string, http.Handler) {
	//		return masterv1connect.NewMasterServiceHandler(s, o...)
	//	}
	Service func(...connect.HandlerOption) (string, http.Handler)
	// TracerProvider traces every call the service answers.
	TracerProvider trace.TracerProvider
	// Metrics serves GET /metrics (prom.Handler of the process's registry).
	Metrics http.Handler
	// Pages are further routes, such as "GET /json", and their handlers.
	Pages map[string]http.HandlerFunc
	// Tokens are the tokens the process accepts; nil accepts every call
	// (in-process tests; glint always gives tokens).
	Tokens *Tokens
	// Access is the role each procedure and page needs. /healthz is Public;
	// /metrics is Metrics unless Access says otherwise; a path nothing serves
	// is Public (it is not found); anything else missing from Access needs
	// the Cluster token.
	Access Access
	// MetricsAuth makes the Metrics pages need a token (--metrics-auth).
	MetricsAuth bool
}

// NewHandler builds the one HTTP handler of a Glint process: the Connect
// service with handlerOptions, GET /healthz, GET /metrics and the pages. It is
// the single place where what every listener needs is put in front of them:
// authentication by role before any of the body is read (auth.go), then
// bounded request bodies, and deadlines at most MaxCallTimeout away — a
// call's by limitOptions, once Connect applied the caller's; a page's by
// capped; /healthz answers at once (limits.go).
func NewHandler(e Endpoints) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(e.Service(append(handlerOptions(e.TracerProvider), limitOptions()...)...))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.Handle("GET /metrics", capped(e.Metrics))
	for pattern, h := range e.Pages {
		mux.Handle(pattern, capped(h))
	}
	role := func(r *http.Request) Role {
		if role, ok := e.Access[r.URL.Path]; ok {
			return role
		}
		_, pattern := mux.Handler(r)
		if role, ok := e.Access[pattern]; ok {
			return role
		}
		switch pattern {
		case "GET /metrics":
			return Metrics
		case "GET /healthz", "":
			// Nothing is served at a path no pattern matches: 404 for all.
			return Public
		}
		return Cluster
	}
	need := func(r *http.Request) Role {
		switch role := role(r); {
		case role == Metrics && e.MetricsAuth:
			return AnyToken
		case role == Metrics:
			return Public
		default:
			return role
		}
	}
	return authenticate(limitBody(mux), e.Tokens, need)
}
