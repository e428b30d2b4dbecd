package web

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
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

// Config configures a Site.
type Config struct {
	// Service names the process in page titles: "master", "worker".
	Service string
	// Tokens are the tokens the process accepts; nil: no authentication
	// (--insecure), every page and button is open.
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
	// Auth: the process checks tokens at all (false with --insecure).
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
	return &Site{cfg: cfg, cookie: "glint-" + cfg.Service + "-" + hex.EncodeToString(id), secret: secret, sessions: map[[sha256.Size]byte]*session{}}
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
// adds that header by itself). Anyone else is refused: 401 without a login,
// 403 with the wrong role or without the CSRF token.
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
	s.Render(w, r, http.StatusUnauthorized, "login", "Log in", v, loginPage{Error: why, Next: next})
}

// loginPage is the login form's data.
type loginPage struct {
	Error string
	Next  string
}

func (s *Site) loginForm(w http.ResponseWriter, r *http.Request) {
	s.Render(w, r, http.StatusOK, "login", "Log in", s.viewer(r), loginPage{Next: safeNext(r.URL.Query().Get("next"))})
}

// login checks the form's token and starts a session for it.
func (s *Site) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		s.Error(w, r, http.StatusBadRequest, "the login form could not be read: "+err.Error())
		return
	}
	next := safeNext(r.PostFormValue("next"))
	token := strings.TrimSpace(r.PostFormValue("token"))
	switch {
	case s.cfg.Tokens == nil:
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	case token == "" || len(token) > rpc.MaxTokenBytes || !s.cfg.Tokens.Allows(token, rpc.AnyToken):
		s.Render(w, r, http.StatusUnauthorized, "login", "Log in", s.viewer(r), loginPage{Error: "that token is not one this " + s.cfg.Service + " accepts", Next: next})
		return
	case !s.cfg.Tokens.Allows(token, s.cfg.Read):
		s.Render(w, r, http.StatusForbidden, "login", "Log in", s.viewer(r), loginPage{Error: "that token may not read this " + s.cfg.Service + "'s pages: it needs the " + s.cfg.Read.String() + " token", Next: next})
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

// safeNext is where to go after login: a path on this site, else "/".
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
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
	mac := hmac.New(sha256.New, s.secret)
	mac.Write([]byte(sid))
	token := s.token(r)
	return Viewer{
		LoggedIn: s.cfg.Tokens != nil && s.holds(token, rpc.AnyToken),
		CanAct:   s.holds(token, s.cfg.Act),
		Auth:     s.cfg.Tokens != nil,
		CSRF:     base64.RawURLEncoding.EncodeToString(mac.Sum(nil)),
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
