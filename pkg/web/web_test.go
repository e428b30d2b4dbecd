package web

import (
	"compress/gzip"
	"io"
	"math"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/glint-cluster/glint/internal/fakeclock"
	"github.com/glint-cluster/glint/pkg/fault"
	"github.com/glint-cluster/glint/pkg/rpc"
)

const (
	clusterToken = "cluster-token-0123456789abcdef"
	submitToken  = "submit-token-0123456789abcdef"
)

// site serves a Site with a page (/page, which prints the viewer's CSRF
// token) and a button (/act) on a loopback listener.
type site struct {
	*Site
	url    string
	tokens *rpc.Tokens
	clock  *fakeclock.Clock
}

func newSite(t *testing.T, public bool) *site {
	t.Helper()
	tokens := rpc.NewTokens()
	tokens.Add(rpc.Cluster, clusterToken)
	tokens.Add(rpc.Submit, submitToken)
	clock := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	s := New(Config{Service: "master", Tokens: tokens, Read: rpc.AnyToken, Act: rpc.Submit, Public: public, Now: clock.Now})
	mux := http.NewServeMux()
	for pattern, h := range s.Routes() {
		mux.HandleFunc(pattern, h)
	}
	mux.HandleFunc("GET /page", s.Page(func(w http.ResponseWriter, _ *http.Request, v Viewer) { io.WriteString(w, "csrf="+v.CSRF) }))
	mux.HandleFunc("POST /act", s.Action(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "done") }))
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return &site{Site: s, url: hs.URL, tokens: tokens, clock: clock}
}

// browser is a client with a cookie jar that does not follow redirects.
func browser(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func do(t *testing.T, c *http.Client, method, target string, form url.Values, bearer string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, target, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

var loginCSRFPattern = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// postLogin posts the login form of the site at base with form, as a
// browser does: with the CSRF token of the form it was given first.
func postLogin(t *testing.T, c *http.Client, base string, form url.Values, bearer string) (*http.Response, string) {
	t.Helper()
	_, page := do(t, c, http.MethodGet, base+"/login", nil, "")
	m := loginCSRFPattern.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("the login form has no CSRF token:\n%s", page)
	}
	form.Set("csrf", m[1])
	return do(t, c, http.MethodPost, base+"/login", form, bearer)
}

// login logs c in with token and returns the page's CSRF token.
func (s *site) login(t *testing.T, c *http.Client, token string) string {
	t.Helper()
	if resp, body := postLogin(t, c, s.url, url.Values{"token": {token}}, ""); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %s %s", resp.Status, body)
	}
	resp, body := do(t, c, http.MethodGet, s.url+"/page", nil, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("page after login: %s %s", resp.Status, body)
	}
	return strings.TrimPrefix(body, "csrf=")
}

func TestPagesNeedALoginOrABearerTokenUnlessPublic(t *testing.T) {
	s := newSite(t, false)
	if resp, body := do(t, browser(t), http.MethodGet, s.url+"/page", nil, ""); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `name="token"`) {
		t.Errorf("page without login: %s, want 401 with the login form: %s", resp.Status, body)
	}
	if resp, _ := do(t, browser(t), http.MethodGet, s.url+"/page", nil, "not-a-token-we-know-of"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("page with an unknown bearer token: %s, want 401", resp.Status)
	}
	if resp, _ := do(t, browser(t), http.MethodGet, s.url+"/page", nil, clusterToken); resp.StatusCode != http.StatusOK {
		t.Errorf("page with a bearer token: %s, want 200", resp.Status)
	}
	public := newSite(t, true)
	if resp, _ := do(t, browser(t), http.MethodGet, public.url+"/page", nil, ""); resp.StatusCode != http.StatusOK {
		t.Errorf("public page without login: %s, want 200", resp.Status)
	}
	if resp, _ := do(t, browser(t), http.MethodPost, public.url+"/act", nil, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("button of a public site without login: %s, want 401", resp.Status)
	}
}

func TestLoginKeepsTheTokenOnTheServerAndASessionIDInAStrictCookie(t *testing.T) {
	s := newSite(t, false)
	c := browser(t)
	if resp, body := postLogin(t, c, s.url, url.Values{"token": {"wrong-token-0123456789"}}, ""); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "not one this master accepts") {
		t.Errorf("login with a wrong token: %s %s, want 401", resp.Status, body)
	}
	resp, _ := postLogin(t, c, s.url, url.Values{"token": {submitToken}, "next": {"/page?x=1"}}, "")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/page?x=1" {
		t.Fatalf("login: %s to %q, want 303 to /page?x=1", resp.Status, resp.Header.Get("Location"))
	}
	cookies := resp.Cookies()
	if len(cookies) != 1 {
		t.Fatalf("login set %d cookies, want 1", len(cookies))
	}
	ck := cookies[0]
	if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" || ck.MaxAge != int(SessionTTL.Seconds()) {
		t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/, Max-Age of the session", ck)
	}
	if strings.Contains(ck.Value, submitToken) || strings.Contains(ck.Name, submitToken) {
		t.Errorf("the cookie holds the token: %+v", ck)
	}
	if resp, _ := do(t, c, http.MethodGet, s.url+"/page", nil, ""); resp.StatusCode != http.StatusOK {
		t.Errorf("page with the session: %s, want 200", resp.Status)
	}
	// Credentials of another scheme do not hide the session.
	req, _ := http.NewRequest(http.MethodGet, s.url+"/page", nil)
	req.Header.Set("Authorization", "Basic dXNlcjpwYXNz")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("page with the session and a Basic authorization: %s, want 200", resp.Status)
	}
}

func TestLoginRefusesATokenThatMayNotRead(t *testing.T) {
	tokens := rpc.NewTokens()
	tokens.Add(rpc.Cluster, clusterToken)
	tokens.Add(rpc.Submit, submitToken)
	s := New(Config{Service: "worker", Tokens: tokens, Read: rpc.Cluster, Act: rpc.Cluster})
	mux := http.NewServeMux()
	for pattern, h := range s.Routes() {
		mux.HandleFunc(pattern, h)
	}
	hs := httptest.NewServer(mux)
	defer hs.Close()
	resp, body := postLogin(t, browser(t), hs.URL, url.Values{"token": {submitToken}}, "")
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "needs the cluster token") || len(resp.Cookies()) != 0 {
		t.Errorf("login with a submit token on a worker: %s %s, want 403 and no session", resp.Status, body)
	}
}

func TestLoginReturnsOnlyToAPageOfTheSameSite(t *testing.T) {
	s := newSite(t, false)
	for next, want := range map[string]string{
		"/app/app-1":           "/app/app-1",
		"//evil.example/":      "/",
		"https://evil.example": "/",
		`/\evil.example`:       "/",
		"":                     "/",
		"/\t/evil.example":     "/",
		"/%09/evil.example":    "/",
		"/%2F/evil.example":    "/",
		"/%5Cevil.example":     "/",
		"/\n/evil.example":     "/",
		"http:/evil.example":   "/",
		"/page?next=%2F%2Fx":   "/page?next=%2F%2Fx",
	} {
		s.clock.Advance(loginRefill) // one login from this address more
		resp, _ := postLogin(t, browser(t), s.url, url.Values{"token": {clusterToken}, "next": {next}}, "")
		if got := resp.Header.Get("Location"); got != want {
			t.Errorf("login with next %q went to %q, want %q", next, got, want)
		}
	}
}

func TestTheLoginFormsNextIsAPageOfTheSameSite(t *testing.T) {
	s := newSite(t, false)
	_, page := do(t, browser(t), http.MethodGet, s.url+"/login?next=%2F%09%2Fevil.example", nil, "")
	if !strings.Contains(page, `name="next" value="/"`) {
		t.Errorf("the login form for next=/<TAB>/evil.example:\n%s\nwant next /", page)
	}
}

// sessions counts the session cookies resp sets (not the login form's).
func sessions(resp *http.Response) int {
	n := 0
	for _, c := range resp.Cookies() {
		if !strings.HasSuffix(c.Name, "-login") {
			n++
		}
	}
	return n
}

func TestALoginNeedsItsFormsCSRFToken(t *testing.T) {
	s := newSite(t, false)
	c := browser(t)
	if resp, body := do(t, c, http.MethodPost, s.url+"/login", url.Values{"token": {clusterToken}}, ""); resp.StatusCode != http.StatusForbidden ||
		!strings.Contains(body, "CSRF") || sessions(resp) != 0 {
		t.Errorf("a login posted without its form: %s %s, want 403 and no session", resp.Status, body)
	}
	other := browser(t)
	_, page := do(t, other, http.MethodGet, s.url+"/login", nil, "")
	theirs := loginCSRFPattern.FindStringSubmatch(page)[1]
	_, _ = do(t, c, http.MethodGet, s.url+"/login", nil, "")
	if resp, _ := do(t, c, http.MethodPost, s.url+"/login", url.Values{"token": {clusterToken}, "csrf": {theirs}}, ""); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a login with another browser's form token: %s, want 403", resp.Status)
	}
}

func TestLoginsFromOneAddressAreThrottled(t *testing.T) {
	s := newSite(t, false)
	c := browser(t)
	for i := range loginBurst {
		if resp, _ := postLogin(t, c, s.url, url.Values{"token": {"wrong-token-0123456789"}}, ""); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong login %d: %s, want 401", i+1, resp.Status)
		}
	}
	resp, body := postLogin(t, c, s.url, url.Values{"token": {clusterToken}}, "")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || sessions(resp) != 0 {
		t.Fatalf("login %d within the burst: %s %s, want 429 with Retry-After and no session", loginBurst+1, resp.Status, body)
	}
	s.clock.Advance(loginRefill)
	if resp, body := postLogin(t, c, s.url, url.Values{"token": {clusterToken}}, ""); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login after the wait: %s %s, want 303", resp.Status, body)
	}
}

func TestButtonsNeedTheRoleAndTheirSessionsCSRFToken(t *testing.T) {
	s := newSite(t, false)
	if resp, _ := do(t, browser(t), http.MethodPost, s.url+"/act", url.Values{}, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("button without login: %s, want 401", resp.Status)
	}
	submitter := browser(t)
	csrf := s.login(t, submitter, submitToken)
	other := browser(t)
	otherCSRF := s.login(t, other, submitToken)
	for name, tc := range map[string]struct {
		form url.Values
		code int
	}{
		"no CSRF token":            {url.Values{}, http.StatusForbidden},
		"a forged CSRF token":      {url.Values{"csrf": {"forged"}}, http.StatusForbidden},
		"another session's token":  {url.Values{"csrf": {otherCSRF}}, http.StatusForbidden},
		"the session's CSRF token": {url.Values{"csrf": {csrf}}, http.StatusOK},
	} {
		if resp, body := do(t, submitter, http.MethodPost, s.url+"/act", tc.form, ""); resp.StatusCode != tc.code {
			t.Errorf("button with %s: %s %s, want %d", name, resp.Status, body, tc.code)
		}
	}
	// A token that may read but not act sees the page and cannot press.
	reader := browser(t)
	readerCSRF := s.login(t, reader, clusterToken)
	if resp, body := do(t, reader, http.MethodPost, s.url+"/act", url.Values{"csrf": {readerCSRF}}, ""); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "submit token") {
		t.Errorf("button with a read-only token: %s %s, want 403 naming the submit token", resp.Status, body)
	}
	// A bearer token is no browser's ambient credential: it needs no CSRF token.
	if resp, _ := do(t, browser(t), http.MethodPost, s.url+"/act", url.Values{}, submitToken); resp.StatusCode != http.StatusOK {
		t.Errorf("button with a bearer token: %s, want 200", resp.Status)
	}
}

func TestSessionsEndAtLogoutAfterTheirTTLAndWithTheirToken(t *testing.T) {
	s := newSite(t, false)
	page := func(c *http.Client) int {
		resp, _ := do(t, c, http.MethodGet, s.url+"/page", nil, "")
		return resp.StatusCode
	}
	c := browser(t)
	csrf := s.login(t, c, submitToken)
	site, _ := url.Parse(s.url)
	copied := c.Jar.Cookies(site)
	if resp, _ := do(t, c, http.MethodPost, s.url+"/logout", url.Values{}, ""); resp.StatusCode != http.StatusForbidden {
		t.Errorf("logout without the CSRF token: %s, want 403", resp.Status)
	}
	if resp, _ := do(t, c, http.MethodPost, s.url+"/logout", url.Values{"csrf": {csrf}}, ""); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("logout: %s", resp.Status)
	}
	if code := page(c); code != http.StatusUnauthorized {
		t.Errorf("page after logout: %d, want 401", code)
	}
	// The session ended on the server: a copy of its cookie is worth nothing.
	replay := browser(t)
	replay.Jar.SetCookies(site, copied)
	if code := page(replay); code != http.StatusUnauthorized {
		t.Errorf("page with a copy of a logged-out session's cookie: %d, want 401", code)
	}

	s.login(t, c, submitToken)
	s.clock.Advance(SessionTTL - time.Second)
	if code := page(c); code != http.StatusOK {
		t.Errorf("page just before the session's end: %d, want 200", code)
	}
	s.clock.Advance(time.Second)
	if code := page(c); code != http.StatusUnauthorized {
		t.Errorf("page after the session's end: %d, want 401", code)
	}

	s.login(t, c, submitToken)
	s.tokens.Remove(rpc.Submit, submitToken)
	if code := page(c); code != http.StatusUnauthorized {
		t.Errorf("page after its token was removed: %d, want 401", code)
	}
}

func TestSessionsAreBoundedTheFirstToEndGoesFirst(t *testing.T) {
	s := newSite(t, false)
	first := browser(t)
	s.login(t, first, clusterToken)
	for range MaxSessions - 1 {
		s.clock.Advance(loginRefill) // one login from this address more
		if resp, _ := postLogin(t, browser(t), s.url, url.Values{"token": {clusterToken}}, ""); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("login: %s", resp.Status)
		}
	}
	if resp, _ := do(t, first, http.MethodGet, s.url+"/page", nil, ""); resp.StatusCode != http.StatusOK {
		t.Errorf("first session at the bound: %s, want 200", resp.Status)
	}
	s.login(t, browser(t), clusterToken)
	if resp, _ := do(t, first, http.MethodGet, s.url+"/page", nil, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("first session after one more login: %s, want 401 (dropped)", resp.Status)
	}
	if n := len(s.sessions); n != MaxSessions {
		t.Errorf("%d sessions, want %d", n, MaxSessions)
	}
}

func TestTimelineDrawsEachKnownPhaseInOrderFromItsOwnRequest(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	tl := NewTimeline([]Launch{
		{Executor: 0, Cause: "initial", At: [8]time.Time{ms(0), ms(10), ms(20), ms(40), ms(50), ms(60), ms(70), ms(100)}},
		// Asked for 3 s later; its first task is not known yet, and its
		// worker's clock is behind.
		{Executor: 1, Cause: "dynamic allocation", At: [8]time.Time{ms(3000), ms(3010), ms(3005), ms(3030), ms(3040), ms(3050), ms(3060), {}}},
	})
	if len(tl.Rows) != 2 || tl.Total != 100*time.Millisecond {
		t.Fatalf("timeline %+v: want 2 rows over 100ms, each from its own request", tl)
	}
	full := tl.Rows[0].Bars
	if len(full) != len(Phases) {
		t.Fatalf("row 0 has %d bars, want %d", len(full), len(Phases))
	}
	x := float64(timelineLabel)
	for i, b := range full {
		if b.Phase != Phases[i] || b.X != x {
			t.Errorf("bar %d: %s at %v, want %s at %v", i, b.Phase, b.X, Phases[i], x)
		}
		x = b.X + b.W
	}
	if x != timelineLabel+timelinePlot {
		t.Errorf("last bar ends at %v, want the axis' end %v", x, timelineLabel+timelinePlot)
	}
	if !strings.Contains(full[4].Title, "12:00:00.050000 → 12:00:00.060000 (10ms)") {
		t.Errorf("bar title %q: want its exact times", full[4].Title)
	}
	if got := tl.Rows[0].Durations; got[2] != "20ms" || got[6] != "30ms" || tl.Rows[0].Total != "100ms" {
		t.Errorf("row 0's numbers %q, total %q", got, tl.Rows[0].Total)
	}
	partial := tl.Rows[1].Bars
	if len(partial) != len(Phases)-1 || partial[0].X != timelineLabel {
		t.Errorf("row 1 has %d bars from %v, want %d from the axis' start (its own request)", len(partial), partial[0].X, len(Phases)-1)
	}
	if skewed := partial[1]; skewed.W != timelineMinBar {
		t.Errorf("a phase that ends before it starts is %v wide, want %v", skewed.W, timelineMinBar)
	}
	if tl.Rows[1].Durations[6] != "" || tl.Rows[1].Cause != "dynamic allocation" {
		t.Errorf("row 1: first task %q, cause %q", tl.Rows[1].Durations[6], tl.Rows[1].Cause)
	}
}

// A launch without a boot (a prestarted executor's) goes from its process'
// start to its RetrieveSparkProps.
func TestALaunchWithoutABootRetrievesItsPropertiesFromItsStart(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	tl := NewTimeline([]Launch{{Executor: 0, At: [8]time.Time{ms(0), ms(1), ms(2), ms(3), {}, ms(4), ms(5), ms(6)}}})
	bars := tl.Rows[0].Bars
	if len(bars) != len(Phases)-1 || bars[3].Phase != "RetrieveSparkProps" || tl.Rows[0].Durations[4] != "1ms" || tl.Rows[0].Durations[3] != "" {
		t.Errorf("bars %+v, numbers %q: want no boot, RetrieveSparkProps from the process' start", bars, tl.Rows[0].Durations)
	}
}

// A launch that failed has the phase it was in marked, up to its end, with
// why.
func TestAFailedLaunchIsMarkedInThePhaseItFailedIn(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	tl := NewTimeline([]Launch{{Executor: 2, At: [8]time.Time{ms(0), ms(10), ms(20)}, Failed: "exec: no such file", Ended: ms(25)}})
	row := tl.Rows[0]
	last := row.Bars[len(row.Bars)-1]
	if len(row.Bars) != 3 || !last.Failed || last.Phase != "process start" || !strings.Contains(last.Title, "no such file") {
		t.Fatalf("bars %+v: want schedule, LaunchExecutor and a failed process start", row.Bars)
	}
	if row.FailedIn != "process start" || row.Failed != "exec: no such file" || row.Total != "25ms" {
		t.Errorf("row %+v: want failed in process start, 25ms in all", row)
	}
}

func TestTheAxisTicksAtRoundValues(t *testing.T) {
	for _, tc := range []struct {
		longest time.Duration
		total   time.Duration
		ticks   []string
	}{
		{80900 * time.Microsecond, 100 * time.Millisecond, []string{"0s", "20ms", "40ms", "60ms", "80ms", "100ms"}},
		{36560 * time.Millisecond, 40 * time.Second, []string{"0s", "10s", "20s", "30s", "40s"}},
		{7 * time.Millisecond, 8 * time.Millisecond, []string{"0s", "2ms", "4ms", "6ms", "8ms"}},
		// A time no clock holds draws an axis just past maxSpan, and returns.
		{time.Duration(math.MaxInt64), 4e17, []string{"0s", "27777h46m40s", "55555h33m20s", "83333h20m0s", "111111h6m40s"}},
	} {
		t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
		tl := NewTimeline([]Launch{{At: [8]time.Time{t0, t0.Add(tc.longest)}}})
		var labels []string
		for _, tick := range tl.Ticks {
			labels = append(labels, tick.Label)
		}
		if tl.Total != tc.total || !slices.Equal(labels, tc.ticks) {
			t.Errorf("a launch of %v: axis %v with ticks %q, want %v with %q", tc.longest, tl.Total, labels, tc.total, tc.ticks)
		}
	}
}

func TestErrorsOfWorkAreAnsweredWithTheirStatus(t *testing.T) {
	s := newSite(t, false)
	for _, tc := range []struct {
		err  error
		code int
	}{
		{rpc.Error(errNotFound), http.StatusNotFound},
		{rpc.Error(errInvalid), http.StatusBadRequest},
		{rpc.Error(errPrecondition), http.StatusConflict},
	} {
		rec := httptest.NewRecorder()
		s.Fail(rec, httptest.NewRequest(http.MethodGet, "/", nil), tc.err)
		if rec.Code != tc.code || !strings.Contains(rec.Body.String(), "thing") {
			t.Errorf("%v answered %d %q, want %d with the message", tc.err, rec.Code, rec.Body.String(), tc.code)
		}
	}
}

var (
	errNotFound     = fault.New(fault.ErrNotFound, "no such thing")
	errInvalid      = fault.New(fault.ErrInvalidArgument, "a bad thing")
	errPrecondition = fault.New(fault.ErrFailedPrecondition, "the thing ended")
)

func TestPagesAreGzippedForClientsThatTakeIt(t *testing.T) {
	s := newSite(t, false)
	for accept, gzipped := range map[string]bool{"gzip, deflate, br": true, "br": false, "gzip;q=0": false, "": false} {
		req, _ := http.NewRequest(http.MethodGet, s.url+"/login", nil)
		req.Header.Set("Accept-Encoding", accept) // set by hand, the client does not unpack
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		body := io.Reader(resp.Body)
		if got := resp.Header.Get("Content-Encoding") == "gzip"; got != gzipped {
			t.Errorf("Accept-Encoding %q: gzipped %v, want %v", accept, got, gzipped)
		} else if got {
			if body, err = gzip.NewReader(resp.Body); err != nil {
				t.Fatal(err)
			}
		}
		page, _ := io.ReadAll(body)
		resp.Body.Close()
		if !strings.Contains(string(page), `name="token"`) {
			t.Errorf("Accept-Encoding %q: page %.200q", accept, page)
		}
	}
}

func TestExitTextSaysHowAProcessEndedOnce(t *testing.T) {
	one := int32(1)
	for _, tc := range []struct {
		status  *int32
		message string
		want    string
	}{
		{&one, "exited with code 1", "exited with code 1"},
		{&one, "", "exit 1"},
		{nil, "killed at the master's request", "killed at the master's request"},
		{nil, "", ""},
	} {
		if got := ExitText(tc.status, tc.message); got != tc.want {
			t.Errorf("ExitText(%v, %q) = %q, want %q", tc.status, tc.message, got, tc.want)
		}
	}
}
