package web

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/glint-cluster/glint/pkg/rpc"
)

// Sessions: a browser logs in once with a token and then holds a session id in
// an HttpOnly, SameSite=Strict cookie. The cookie never holds the token itself:
// browsers send a host's cookies to every port of that host (a driver's, an
// executor's), and a session id is good only on the process that made it, for
// SessionTTL, and ends at logout, where a leaked token would be good anywhere
// until it is replaced.
const (
	// SessionTTL is how long a session lasts after login.
	SessionTTL = 12 * time.Hour
	// MaxSessions bounds the sessions a process keeps; the oldest go first.
	MaxSessions = 1024
	// maxFormBytes bounds a login or button form's body.
	maxFormBytes = 8 << 10
)

// Login attempts are throttled per client address: a burst of loginBurst,
// then one every loginRefill, so that guessing tokens is slow; at most
// maxThrottled addresses are tracked.
const (
	loginBurst   = 10
	loginRefill  = 6 * time.Second
	maxThrottled = 4096
)

// Config configures a Site.
type Config struct {
	// Service names the process in page titles: "master", "worker".
	Service string
	// Tokens are the tokens the process accepts; nil: no authentication
	// (in-process tests), every page and button is open.
	Tokens *rpc.Tokens
	// Read is the role whose token may read the pages, Act the role whose
	// token may press their buttons.
	Read, Act rpc.Role
	// Public opens the read-only pages to anyone (--ui-public); buttons still
	// need a login.
	Public bool
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Site serves a process's pages to browsers: who may see and do what.
type Site struct {
	cfg Config
	// cookie is the session cookie's name, this process's own: browsers do not
	// keep cookies apart by port, and a master and its workers share hosts.
	cookie string
	// secret signs CSRF tokens.
	secret []byte

	mu       sync.Mutex
	sessions map[[sha256.Size]byte]*session
	// logins are the login attempts left to each client address.
	logins map[string]*attempts
}

// attempts are a client address's login attempts left, as of when.
type attempts struct {
	left float64
	when time.Time
}

// session is one browser's login; the token stays on the server and is
// checked again on every request, so a token the process stops accepting
// ends its sessions.
type session struct {
	token   string
	expires time.Time
}

// Viewer is who is looking at a page.
type Viewer struct {
	// LoggedIn: the request carries a session or a bearer token.
	LoggedIn bool
	// CanAct: the viewer may press the page's buttons.
	CanAct bool
	// Auth: the process checks tokens at all (false in in-process tests without tokens).
	Auth bool
	// CSRF is the token each of the page's forms must send back.
	CSRF string
	// canRead: the viewer may see the pages.
	canRead bool
}

// New returns a Site for cfg.
func New(cfg Config) *Site {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	id := make([]byte, 4)
	secret := make([]byte, 32)
	_, _ = rand.Read(id) // crypto/rand.Read never fails on Linux
	_, _ = rand.Read(secret)
	return &Site{cfg: cfg, cookie: "glint-" + cfg.Service + "-" + hex.EncodeToString(id), secret: secret,
		sessions: map[[sha256.Size]byte]*session{}, logins: map[string]*attempts{}}
}

// Routes are the login and logout pages, to serve beside the process's own.
func (s *Site) Routes() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"GET /login":   s.loginForm,
		"POST /login":  s.login,
		"POST /logout": s.logout,
	}
}

// Access is a with every route of pages Public: the transport's middleware
// checks bearer tokens, which browsers do not send, so the Site checks its
// routes itself (Page, Action).
func Access(a rpc.Access, pages map[string]http.HandlerFunc) rpc.Access {
	for pattern := range pages {
		a[pattern] = rpc.Public
	}
	return a
}

// Page wraps a read-only page: it is served to a viewer who may read, and
// anyone else gets the login form (401).
func (s *Site) Page(h func(http.ResponseWriter, *http.Request, Viewer)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v := s.viewer(r)
		if !v.canRead {
			s.refuse(w, r, v, "log in to see this page")
			return
		}
		h(w, r, v)
	}
}

// Action wraps a button's POST: it runs for a viewer who may act and sent
// the CSRF token of their page (a bearer-token caller needs none: no browser
// adds that header by itself), as its token's caller (rpc.Caller). Anyone
// else is refused: 401 without a login, 403 with the wrong role or without
// the CSRF token.
func (s *Site) Action(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v := s.viewer(r)
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		switch {
		case !v.CanAct && !v.LoggedIn:
			s.refuse(w, r, v, "log in to do that")
		case !v.CanAct:
			s.Error(w, r, http.StatusForbidden, "your token may not do that: it needs the "+s.cfg.Act.String()+" token")
		case bearerToken(r) == "" && !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(v.CSRF)):
			s.Error(w, r, http.StatusForbidden, "the form's CSRF token is missing or wrong: reload the page and try again")
		default:
			if name := s.cfg.Tokens.Name(s.token(r), s.cfg.Act); name != "" {
				r = r.WithContext(rpc.WithCaller(r.Context(), name))
			}
			h(w, r)
		}
	}
}

// refuse answers 401 with the login form, which returns to the page asked for.
func (s *Site) refuse(w http.ResponseWriter, r *http.Request, v Viewer, why string) {
	next := r.URL.RequestURI()
	if r.Method != http.MethodGet {
		next = "/"
	}
	s.renderLogin(w, r, http.StatusUnauthorized, v, why, next)
}

// loginPage is the login form's data.
type loginPage struct {
	Error string
	Next  string
	// CSRF is the login form's own CSRF token (loginCSRF).
	CSRF string
}

// renderLogin answers with the login form, which carries its CSRF token.
func (s *Site) renderLogin(w http.ResponseWriter, r *http.Request, code int, v Viewer, why, next string) {
	s.Render(w, r, code, "login", "Log in", v, loginPage{Error: why, Next: next, CSRF: s.loginCSRF(w, r)})
}

// loginCSRF is the login form's CSRF token: an HMAC of a random value kept
// in a cookie of the form's own, set here when the browser has none. A login
// is taken only with both, so another site cannot log a browser in under a
// token of its choosing: it can read neither, and SameSite=Strict keeps the
// cookie off its posts.
func (s *Site) loginCSRF(w http.ResponseWriter, r *http.Request) string {
	value := ""
	if c, err := r.Cookie(s.cookie + "-login"); err == nil && len(c.Value) == 43 {
		value = c.Value
	} else {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		value = base64.RawURLEncoding.EncodeToString(b)
		http.SetCookie(w, &http.Cookie{
			Name: s.cookie + "-login", Value: value, Path: "/login", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
		})
	}
	return s.mac("login\x00" + value)
}

// mac is the site's HMAC of v, as a form value.
func (s *Site) mac(v string) string {
	m := hmac.New(sha256.New, s.secret)
	m.Write([]byte(v))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (s *Site) loginForm(w http.ResponseWriter, r *http.Request) {
	s.renderLogin(w, r, http.StatusOK, s.viewer(r), "", safeNext(r.URL.Query().Get("next")))
}

// login checks the form's CSRF token and token, and starts a session for it.
func (s *Site) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		s.Error(w, r, http.StatusBadRequest, "the login form could not be read: "+err.Error())
		return
	}
	next := safeNext(r.PostFormValue("next"))
	if wait, ok := s.attempt(r); !ok {
		w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds()+1)))
		s.Error(w, r, http.StatusTooManyRequests, fmt.Sprintf("too many logins from your address: try again in %s", wait.Round(time.Second)+time.Second))
		return
	}
	c, err := r.Cookie(s.cookie + "-login")
	if err != nil || !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(s.mac("login\x00"+c.Value))) {
		s.renderLogin(w, r, http.StatusForbidden, s.viewer(r), "the login form's CSRF token is missing or wrong: log in from this page", next)
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	switch {
	case s.cfg.Tokens == nil:
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	case token == "" || len(token) > rpc.MaxTokenBytes || !s.cfg.Tokens.Allows(token, rpc.AnyToken):
		s.renderLogin(w, r, http.StatusUnauthorized, s.viewer(r), "that token is not one this "+s.cfg.Service+" accepts", next)
		return
	case !s.cfg.Tokens.Allows(token, s.cfg.Read):
		s.renderLogin(w, r, http.StatusForbidden, s.viewer(r), "that token may not read this "+s.cfg.Service+"'s pages: it needs the "+s.cfg.Read.String()+" token", next)
		return
	}
	id := make([]byte, 32)
	_, _ = rand.Read(id)
	value := base64.RawURLEncoding.EncodeToString(id)
	now := s.cfg.Now()
	s.mu.Lock()
	s.dropSessionsLocked(now)
	s.sessions[sha256.Sum256([]byte(value))] = &session{token: token, expires: now.Add(SessionTTL)}
	s.mu.Unlock()
	http.SetCookie(w, &http.Cookie{
		Name: s.cookie, Value: value, Path: "/", MaxAge: int(SessionTTL.Seconds()),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// attempt takes one login attempt of r's client address, or says how long
// until it has one.
func (s *Site) attempt(r *http.Request) (time.Duration, bool) {
	addr := r.RemoteAddr
	if host, _, err := net.SplitHostPort(addr); err == nil {
		addr = host
	}
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.logins[addr]
	if !ok {
		if len(s.logins) >= maxThrottled {
			s.dropAttemptsLocked(now)
		}
		a = &attempts{left: loginBurst, when: now}
		s.logins[addr] = a
	}
	a.left = min(loginBurst, a.left+float64(now.Sub(a.when))/float64(loginRefill))
	a.when = now
	if a.left < 1 {
		return time.Duration((1 - a.left) * float64(loginRefill)), false
	}
	a.left--
	return 0, true
}

// dropAttemptsLocked forgets the addresses whose attempts have refilled,
// and, if none has, one of them.
func (s *Site) dropAttemptsLocked(now time.Time) {
	for addr, a := range s.logins {
		if a.left+float64(now.Sub(a.when))/float64(loginRefill) >= loginBurst {
			delete(s.logins, addr)
		}
	}
	for addr := range s.logins {
		if len(s.logins) < maxThrottled {
			return
		}
		delete(s.logins, addr)
	}
}

// dropSessionsLocked removes expired sessions and, while there are
// MaxSessions, the one that expires first.
func (s *Site) dropSessionsLocked(now time.Time) {
	for k, ses := range s.sessions {
		if !now.Before(ses.expires) {
			delete(s.sessions, k)
		}
	}
	for len(s.sessions) >= MaxSessions {
		var oldest [sha256.Size]byte
		var first time.Time
		for k, ses := range s.sessions {
			if first.IsZero() || ses.expires.Before(first) {
				oldest, first = k, ses.expires
			}
		}
		delete(s.sessions, oldest)
	}
}

// logout ends the browser's session (with its CSRF token: no other site can
// log a user out).
func (s *Site) logout(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	v := s.viewer(r)
	if !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(v.CSRF)) {
		s.Error(w, r, http.StatusForbidden, "the form's CSRF token is missing or wrong: reload the page and try again")
		return
	}
	if c, err := r.Cookie(s.cookie); err == nil {
		s.mu.Lock()
		delete(s.sessions, sha256.Sum256([]byte(c.Value)))
		s.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{Name: s.cookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// safeNext is where to go after login: a path on this site, else "/". It
// is parsed, and refused with a control character or backslash anywhere
// (browsers drop tabs and newlines from URLs and read "\\" as "/", so
// "/\t/evil.example" would go to evil.example), percent-encoded or not, and
// with a scheme, a host or a path that starts with "//" after decoding.
func safeNext(next string) string {
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" ||
		!strings.HasPrefix(u.Path, "/") || strings.HasPrefix(u.Path, "//") ||
		strings.ContainsFunc(next+u.Path, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }) {
		return "/"
	}
	return next
}

// viewer says who sent r.
func (s *Site) viewer(r *http.Request) Viewer {
	sid := ""
	if c, err := r.Cookie(s.cookie); err == nil {
		sid = c.Value
	}
	token := s.token(r)
	return Viewer{
		LoggedIn: s.cfg.Tokens != nil && s.holds(token, rpc.AnyToken),
		CanAct:   s.holds(token, s.cfg.Act),
		Auth:     s.cfg.Tokens != nil,
		CSRF:     s.mac(sid),
		canRead:  s.cfg.Public || s.holds(token, s.cfg.Read),
	}
}

// holds reports whether token is one of role (any token, with no
// authentication).
func (s *Site) holds(token string, role rpc.Role) bool {
	return s.cfg.Tokens == nil || token != "" && s.cfg.Tokens.Allows(token, role)
}

// token is the token behind r: its bearer token, else its live session's.
func (s *Site) token(r *http.Request) string {
	if t := bearerToken(r); t != "" {
		return t
	}
	c, err := r.Cookie(s.cookie)
	if err != nil {
		return ""
	}
	key := sha256.Sum256([]byte(c.Value))
	s.mu.Lock()
	defer s.mu.Unlock()
	ses, ok := s.sessions[key]
	if !ok {
		return ""
	}
	if !s.cfg.Now().Before(ses.expires) {
		delete(s.sessions, key)
		return ""
	}
	return ses.token
}

func bearerToken(r *http.Request) string {
	t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || len(t) > rpc.MaxTokenBytes {
		return ""
	}
	return t
}
