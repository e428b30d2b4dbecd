package rpc

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"

	"connectrpc.com/connect"
)

// Role is who may make a call: each procedure and page of a service names
// the one role whose tokens it accepts.
type Role int

const (
	// Public calls need no token: /healthz always, and /metrics and /sd
	// unless the process is told otherwise.
	Public Role = iota
	// AnyToken calls need a valid token of any role (/metrics and /sd with
	// --metrics-auth).
	AnyToken
	// Cluster is the cluster token's: the master and its workers.
	Cluster
	// Submit is the submit tokens': registering and killing applications,
	// submitting and killing drivers, reading the cluster's state.
	Submit
	// App is an application's own token: its driver and its executors.
	App
	// Metrics is the metrics pages' (/metrics, the master's /sd): Public,
	// or AnyToken when the process has Endpoints.MetricsAuth.
	Metrics
	// Master is the master's voice to a driver: a token the driver makes
	// and gives only to the master (RegisterApplication's master_token),
	// never to its executors. The master's calls to the driver need it.
	Master
	// numRoles counts the roles.
	numRoles
)

func (r Role) String() string {
	return [...]string{"public", "any token", "cluster", "submit", "application", "metrics", "master"}[r]
}

// MinTokenBytes is the shortest token accepted: 128 bits of a random token
// in base64 is 22 characters. MaxTokenBytes is the longest.
const (
	MinTokenBytes = 16
	MaxTokenBytes = 256
)

// ReadToken reads a token from path: the file's content without surrounding
// white space, at least 16 bytes. what names the token in errors
// ("--token-file"). A file its process's user owns must be readable by that
// user alone, and one of another owner by no one outside its group (see
// checkTokenFileMode), as ssh asks of private keys.
func ReadToken(what, path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	owner := -1
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		owner = int(st.Uid)
	}
	if err := checkTokenFileMode(path, info.Mode(), owner == os.Geteuid()); err != nil {
		return "", fmt.Errorf("%s %s: %w", what, path, err)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFileBytes))
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	token := strings.TrimSpace(string(b))
	if len(token) > MaxTokenBytes {
		return "", fmt.Errorf("%s %s: the token has more than %d bytes", what, path, MaxTokenBytes)
	}
	if len(token) < MinTokenBytes {
		return "", fmt.Errorf("%s %s: the token has %d bytes, want at least %d (make one with `glint token > %s && chmod 600 %s`)", what, path, len(token), MinTokenBytes, path, path)
	}
	if strings.ContainsAny(token, " \t\r\n") {
		return "", fmt.Errorf("%s %s: the token has white space inside", what, path)
	}
	return token, nil
}

// maxTokenFileBytes is how much of a token file ReadToken reads: a token of
// MaxTokenBytes with room for white space around it.
const maxTokenFileBytes = 4 * MaxTokenBytes

// checkTokenFileMode refuses a token file that others may read, saying how
// to fix it. A file of the process's own user (ownFile) must be readable by
// no one else (mode & 0o077 == 0: 0600, 0400), so that code running as
// another user — an executor given a user of its own — cannot read it. A
// file of another owner (root's, as a Kubernetes Secret volume with an
// fsGroup makes it: its mode always gains group read) may be readable by
// its group, through which the process reads it, but not by others; ssh
// checks only the first case.
func checkTokenFileMode(path string, mode fs.FileMode, ownFile bool) error {
	perm := mode.Perm()
	switch {
	case ownFile && perm&0o077 != 0:
		return fmt.Errorf("permissions %#o are too open: a token file must be readable by its owner only: chmod 600 %s", perm, path)
	case perm&0o007 != 0:
		return fmt.Errorf("permissions %#o are too open: a token file must not be readable by others: chmod 600 %s", perm, path)
	}
	return nil
}

// NewToken returns a new random token: 32 random bytes in URL-safe base64.
func NewToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	return base64.RawURLEncoding.EncodeToString(b)
}

// Tokens are the tokens a listener accepts, by role, each with a name (a
// master's submit tokens: who owns what they register). Tokens may be added
// and removed while it serves (the master adds each cluster-mode driver's).
type Tokens struct {
	mu     sync.RWMutex
	byRole map[Role]map[[sha256.Size]byte]*tokenEntry
}

// tokenEntry is one accepted token of a role: its name, and how many times
// it was added.
type tokenEntry struct {
	name  string
	count int
}

// NewTokens returns an empty set: no call but a Public one is accepted.
func NewTokens() *Tokens {
	return &Tokens{byRole: map[Role]map[[sha256.Size]byte]*tokenEntry{}}
}

// Add accepts token for role, without a name.
func (t *Tokens) Add(role Role, token string) { t.AddNamed(role, "", token) }

// AddNamed accepts token for role under name: a call it makes carries the
// name in its context (Caller). Adding a token again keeps its first name.
func (t *Tokens) AddNamed(role Role, name, token string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byRole[role] == nil {
		t.byRole[role] = map[[sha256.Size]byte]*tokenEntry{}
	}
	h := sha256.Sum256([]byte(token))
	if e := t.byRole[role][h]; e != nil {
		e.count++
		return
	}
	t.byRole[role][h] = &tokenEntry{name: name, count: 1}
}

// Remove stops accepting token for role (once for each Add).
func (t *Tokens) Remove(role Role, token string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := sha256.Sum256([]byte(token))
	e := t.byRole[role][h]
	if e == nil {
		return
	}
	if e.count--; e.count <= 0 {
		delete(t.byRole[role], h)
	}
}

// match returns the roles a presented token is valid for (one token may
// hold several: the cluster token is also a submit token) and its name for
// each. Tokens are compared as SHA-256 digests in constant time, so neither
// a token's content nor its length shows in how long the check takes; one
// longer than MaxTokenBytes is no token, refused at once.
func (t *Tokens) match(token string) (roleSet, [numRoles]string) {
	var names [numRoles]string
	if len(token) > MaxTokenBytes {
		return 0, names
	}
	var b [MaxTokenBytes]byte
	presented := sha256.Sum256(b[:copy(b[:], token)])
	t.mu.RLock()
	defer t.mu.RUnlock()
	var roles roleSet
	for r, set := range t.byRole {
		for h, e := range set {
			if subtle.ConstantTimeCompare(presented[:], h[:]) == 1 {
				roles |= 1 << r
				names[r] = e.name
			}
		}
	}
	return roles, names
}

// rolesOf returns the roles a presented token is valid for.
func (t *Tokens) rolesOf(token string) roleSet {
	roles, _ := t.match(token)
	return roles
}

// Allows reports whether token may make a call that needs role need, as the
// middleware decides for a bearer token; with t nil (in-process tests) every token
// may. The web UI asks it for the token behind a browser's session.
func (t *Tokens) Allows(token string, need Role) bool {
	if t == nil || need == Public {
		return true
	}
	return t.rolesOf(token).allows(need)
}

// Name is the name token was added under for role: "" when it has none, or
// is not a token of role (or t is nil).
func (t *Tokens) Name(token string, role Role) string {
	if t == nil {
		return ""
	}
	_, names := t.match(token)
	return names[role]
}

// callerKey is the context key of a call's Caller.
type callerKey struct{}

// Caller is the name of the token a call was made with, for the role the
// call needed (Tokens.AddNamed): a master's handler learns from it who made
// the call. "" for a token without a name, and without authentication.
func Caller(ctx context.Context) string {
	name, _ := ctx.Value(callerKey{}).(string)
	return name
}

// WithCaller returns ctx as the context of a call made by the token named
// name: the web UI's buttons act as their session's token.
func WithCaller(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, callerKey{}, name)
}

// roleSet is a set of roles, a bit for each: what one token is valid for,
// worked out on every call without allocating.
type roleSet uint8

// allows reports whether a token valid for s may make a call that needs
// need.
func (s roleSet) allows(need Role) bool {
	return s&(1<<need) != 0 || (need == AnyToken && s != 0)
}

// String lists the roles for an error message, in Role's order.
func (s roleSet) String() string {
	var out []string
	for r := Public; r <= Master; r++ {
		if s&(1<<r) != 0 {
			out = append(out, r.String())
		}
	}
	return strings.Join(out, " and ")
}

// Access says which role each of a service's procedures and pages needs:
// keys are procedure paths ("/glint.master.v1.MasterService/RegisterWorker")
// and page patterns as the handler mounts them ("GET /json").
type Access map[string]Role

// Grant gives role the procedures (or pages) and returns a.
func (a Access) Grant(role Role, procedures ...string) Access {
	for _, p := range procedures {
		a[p] = role
	}
	return a
}

var (
	errNoToken    = errors.New("no bearer token: pass --token-file or set GLINT_TOKEN_FILE")
	errBadToken   = errors.New("the bearer token is not one this process accepts")
	errNotAllowed = errors.New("this call is not open to that token")
)

// authenticate is the middleware that checks every call's bearer token
// against tokens before anything of the request's body is read: a missing
// or unknown token is Unauthenticated, a valid token of the wrong role
// PermissionDenied. need gives each request's role; with tokens nil every
// call passes (in-process tests). A call it lets through that needed a token
// authenticates its connection (conns.go); a Public one (/healthz) does not.
// A call made with a named token carries the name in its context (Caller).
func authenticate(next http.Handler, tokens *Tokens, need func(*http.Request) Role) http.Handler {
	refuse := func(w http.ResponseWriter, r *http.Request, code connect.Code, err error) {
		Refuse(w, r, connect.NewError(code, fmt.Errorf("%s %s: %w", r.Method, r.URL.Path, err)))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		role := need(r)
		if role == Public {
			next.ServeHTTP(w, r)
			return
		}
		if tokens == nil {
			authenticated(r.Context())
			next.ServeHTTP(w, r)
			return
		}
		token, ok := BearerToken(r)
		if !ok {
			refuse(w, r, connect.CodeUnauthenticated, errNoToken)
			return
		}
		have, names := tokens.match(token)
		switch {
		case have == 0:
			refuse(w, r, connect.CodeUnauthenticated, errBadToken)
		case !have.allows(role):
			refuse(w, r, connect.CodePermissionDenied, fmt.Errorf("%w: it needs the %s token, not a %s one", errNotAllowed, role, have))
		default:
			authenticated(r.Context())
			if names[role] != "" {
				r = r.WithContext(WithCaller(r.Context(), names[role]))
			}
			next.ServeHTTP(w, r)
		}
	})
}

// BearerToken is the token a request presents (Authorization: Bearer …);
// false when it presents none.
func BearerToken(r *http.Request) (string, bool) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return token, ok && token != ""
}

// errorWriter writes Connect errors in each caller's protocol.
var errorWriter = connect.NewErrorWriter()

// Refuse answers a request with err, its code given as Error gives it,
// without reading the request's body: in the caller's protocol for a
// Connect, gRPC or gRPC-Web call, else as plain text with the HTTP status of
// the code (401, 403, 503; 500 for the others). The middleware refuses with
// it; so does a master standing by.
func Refuse(w http.ResponseWriter, r *http.Request, err error) {
	var ce *connect.Error
	errors.As(Error(err), &ce)
	if errorWriter.IsSupported(r) {
		_ = errorWriter.Write(w, r, ce)
		return
	}
	status := http.StatusInternalServerError
	switch ce.Code() {
	case connect.CodeUnauthenticated:
		status = http.StatusUnauthorized
	case connect.CodePermissionDenied:
		status = http.StatusForbidden
	case connect.CodeUnavailable:
		status = http.StatusServiceUnavailable
	}
	http.Error(w, ce.Error(), status)
}

// bearer is the client side: it sends token with every call.
type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if b != "" && req.Spec().IsClient {
			req.Header().Set("Authorization", "Bearer "+string(b))
		}
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		if b != "" {
			conn.RequestHeader().Set("Authorization", "Bearer "+string(b))
		}
		return conn
	}
}

func (bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
