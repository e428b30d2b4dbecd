package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"golang.org/x/net/html"

	"github.com/glint-cluster/glint/pkg/redact"
	"github.com/glint-cluster/glint/pkg/web"
)

// browser starts a headless Chromium for t; it is ended when t ends.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("the web UI tests need Chromium: apt-get install -y chromium (make test installs it when run as root): %v", err)
	}
	// Chromium on a loaded machine now and then exits while it starts (the
	// browser, not Glint): it gets three tries. /dev/shm may be small in a
	// container: it is not used.
	for attempt := 1; ; attempt++ {
		opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
			chromedp.ExecPath(path), chromedp.Headless, chromedp.DisableGPU, chromedp.NoSandbox,
			chromedp.Flag("disable-dev-shm-usage", true),
			chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900))
		alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancelTab := chromedp.NewContext(alloc)
		if err := chromedp.Do(ctx); err != nil {
			cancelTab()
			cancelAlloc()
			if attempt < 3 {
				t.Logf("start Chromium, try %d: %v", attempt, err)
				continue
			}
			t.Fatalf("start Chromium: %v", err)
		}
		ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
		t.Cleanup(func() {
			cancelTimeout()
			cancelTab()
			cancelAlloc() // waits for the browser to exit
		})
		return ctx
	}
}

// pages drives one browser for a test: every page it opens is checked to
// parse as HTML and saved as a PNG screenshot under the test's temp dir, or
// under $GLINT_SCREENSHOT_DIR to keep them.
type pages struct {
	t   *testing.T
	ctx context.Context
	dir string
}

func (p *pages) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, steps...); err != nil {
		p.t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](p *pages, expr string) T {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		p.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// shot saves a screenshot of the whole page as name.png and checks the
// page's HTML parses.
func (p *pages) shot(name string) {
	p.t.Helper()
	png, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Fatalf("screenshot %s: %v", name, err)
	}
	if len(png) == 0 || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		p.t.Fatalf("screenshot %s: %d bytes, not a PNG", name, len(png))
	}
	dir := p.dir
	if keep := os.Getenv("GLINT_SCREENSHOT_DIR"); keep != "" {
		dir = keep
	}
	path := filepath.Join(dir, p.t.Name()+"-"+name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot %s: %s (%d bytes)", name, path, len(png))
	doc, err := chromedp.Run(p.ctx, chromedp.OuterHTML(chromedp.CSS("html")))
	if err != nil {
		p.t.Fatalf("page %s: %v", name, err)
	}
	mustParseHTML(p.t, name, doc)
}

// mustParseHTML checks doc is an HTML document with a title and a main part.
func mustParseHTML(t *testing.T, name, doc string) {
	t.Helper()
	root, err := html.Parse(strings.NewReader(doc))
	if err != nil {
		t.Fatalf("page %s does not parse as HTML: %v", name, err)
	}
	found := map[string]bool{}
	for n := range root.Descendants() {
		if n.Type == html.ElementNode {
			found[n.Data] = true
		}
	}
	if !found["title"] || !found["main"] {
		t.Errorf("page %s has no title or no main element:\n%s", name, doc)
	}
}

// login fills in the login form the page shows with the test's token.
func (p *pages) login() {
	p.t.Helper()
	p.do("log in", chromedp.WaitVisible(chromedp.CSS("#token")), chromedp.SetValue(chromedp.CSS("#token"), testToken),
		chromedp.Click(chromedp.CSS("#login")), chromedp.WaitVisible(chromedp.CSS("main h1")))
}

func TestWebUIShowsTheClusterTheLaunchTimelineAndLogs(t *testing.T) {
	if testing.Short() {
		t.Skip("-short is the fast loop (make test-short); make test runs this: it starts Jaeger, a cluster and Chromium")
	}
	t.Parallel()
	j := startJaeger(t)
	c := startClusterWithEnv(t, j.env(), 2, "--jaeger-ui-url", j.query+"/", "--grafana-url", "http://grafana.example:3000")
	// Every executor registers before the tasks start, so each runs one and
	// its timeline has all six steps.
	if out, errOut, err := glintWithEnv(t, j.env(), "submit", "--master", c.master.url, "--executor-cores", "1",
		"--executor-memory", "256m", "--total-executor-cores", "4", "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0",
		"--conf", waitForAll, "--log-level", "warn", "pi", "20"); err != nil {
		t.Fatalf("submit: %v\n%s\n%s", err, out, errOut)
	}
	s := c.waitFor(t, "pi completed", func(s masterJSON) bool { return len(s.CompletedApps) == 1 })
	app := s.CompletedApps[0]
	if app.TraceID == "" {
		t.Fatalf("app %s has no trace id", app.ID)
	}
	p := &pages{t: t, ctx: browser(t), dir: t.TempDir()}

	// The master's page needs a login; then it lists both workers ALIVE.
	p.do("open the master", chromedp.Navigate(c.master.url+"/"))
	p.shot("login")
	p.login()
	p.do("master page", chromedp.WaitVisible(chromedp.CSS("#workers")))
	if n := eval[int](p, `document.querySelectorAll('#workers tbody tr.worker[data-state="ALIVE"]').length`); n != 2 {
		t.Errorf("workers table has %d ALIVE rows, want 2", n)
	}
	p.shot("master")

	// The application's row links to its page.
	p.do("open the app", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#completed-apps tr[data-app=%q] a`, app.ID))),
		chromedp.WaitVisible(chromedp.CSS("#timeline")))
	if loc, _ := chromedp.Run(p.ctx, chromedp.Location()); loc != c.master.url+"/app/"+app.ID {
		t.Errorf("the app's link went to %s", loc)
	}
	// One timeline row per executor, each with the six launch phases in order.
	rows := eval[[][]string](p, `[...document.querySelectorAll('#timeline g.executor')].map(g => [...g.querySelectorAll('rect.bar')].map(r => r.dataset.phase))`)
	if len(rows) != len(app.Executors) || len(rows) != 4 {
		t.Errorf("timeline has %d rows, want one per executor (4, /json lists %d)", len(rows), len(app.Executors))
	}
	for i, phases := range rows {
		if !slices.Equal(phases, web.Phases[:]) {
			t.Errorf("timeline row %d has bars %q, want %q", i, phases, web.Phases)
		}
	}
	// Every bar carries its exact times, shown on hover; in each row a step
	// starts when the one before it ended, and none ends before it starts,
	// so the bars are the launch's steps in the order they happened.
	titles := eval[[]string](p, `[...document.querySelectorAll('#timeline rect.bar title')].map(t => t.textContent)`)
	if len(titles) != 4*len(web.Phases) || !strings.Contains(titles[0], "→") {
		t.Errorf("bar titles %q: want exact times on every bar", titles)
	}
	span := regexp.MustCompile(`: (\S+) → (\S+) \(`)
	for i := 0; i+len(web.Phases) <= len(titles); i += len(web.Phases) {
		prevEnd := ""
		for _, title := range titles[i : i+len(web.Phases)] {
			m := span.FindStringSubmatch(title)
			if m == nil || m[1] > m[2] || (prevEnd != "" && m[1] != prevEnd) {
				t.Errorf("timeline row %d: bar %q does not start where the step before it ended (%s), or ends before it starts", i/len(web.Phases), title, prevEnd)
				break
			}
			prevEnd = m[2]
		}
	}
	trace := eval[string](p, `document.querySelector('#trace').href`)
	if want := j.query + "/trace/" + app.TraceID; trace != want {
		t.Errorf("trace link %q, want %q", trace, want)
	}
	if metrics := eval[string](p, `document.querySelector('#metrics').href`); !strings.HasPrefix(metrics, "http://grafana.example:3000/d/glint-launch?") {
		t.Errorf("metrics link %q", metrics)
	}
	p.shot("app")
	p.do("dark, on a phone", chromedp.EmulateViewport(390, 844), chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}})
		return err
	}))
	if bg := eval[string](p, `getComputedStyle(document.body).backgroundColor`); bg != "rgb(13, 17, 23)" {
		t.Errorf("dark mode background %s, want rgb(13, 17, 23)", bg)
	}
	p.shot("app-dark-phone")
	p.do("light, wide", chromedp.EmulateViewport(1280, 900), chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{})
		return err
	}))

	// An executor's stdout link opens its log on its worker, after a login there.
	p.do("open a log", chromedp.Click(chromedp.CSS(`#executors tr[data-executor="0"] a.stdout`)))
	p.login()
	p.do("log page", chromedp.WaitVisible(chromedp.CSS("#log")))
	if text := eval[string](p, `document.querySelector('#log').textContent`); !strings.Contains(text, "Launch command: ") {
		t.Errorf("log page shows %q, want the executor's stdout", text)
	}
	p.shot("log")
	// The log page leads back to its worker and its application.
	if back := eval[string](p, `document.querySelector('#app').href`); back != c.master.url+"/app/"+app.ID {
		t.Errorf("the log page's application link %q, want %s", back, c.master.url+"/app/"+app.ID)
	}
	p.do("worker page", chromedp.Click(chromedp.CSS("#worker")), chromedp.WaitVisible(chromedp.CSS("#finished-executors")))
	if n := eval[int](p, `document.querySelectorAll('#finished-executors tr.executor').length`); n == 0 {
		t.Error("the worker's page lists no finished executor")
	}
	// Each executor's application links to its page on the master.
	if href := eval[string](p, `document.querySelector('#finished-executors tr.executor a.app').href`); href != c.master.url+"/app/"+app.ID {
		t.Errorf("the worker's executor row links %q, want the application's page %s", href, c.master.url+"/app/"+app.ID)
	}
	p.shot("worker")
}

func TestWebUIKillButtonEndsARunningAppOnlyAfterLogin(t *testing.T) {
	if testing.Short() {
		t.Skip("-short is the fast loop (make test-short); make test runs this: it starts a cluster and Chromium")
	}
	t.Parallel()
	c := startCluster(t, 1)
	release := filepath.Join(t.TempDir(), "release")
	submit := exec.Command(glintBin, "submit", "--master", c.master.url, "--executor-cores", "1", "--executor-memory", "256m",
		"--log-level", "warn", "hold", release, "2")
	submit.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := submit.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = submit.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = os.WriteFile(release, nil, 0o644)
		_ = submit.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-submit.Process.Pid, syscall.SIGKILL)
		}
	})
	s := c.waitFor(t, "app running", func(s masterJSON) bool {
		return len(s.ActiveApps) == 1 && s.ActiveApps[0].State == "RUNNING"
	})
	id := s.ActiveApps[0].ID
	kill := c.master.url + "/app/" + id + "/kill"

	// Without a login, and with a login but without the form's CSRF token,
	// the kill is refused and the application keeps running.
	if code, body := post(t, http.DefaultClient, kill, url.Values{}); code != http.StatusUnauthorized {
		t.Errorf("kill without login: %d %s, want 401", code, body)
	}
	jar, _ := cookiejar.New(nil)
	session := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if code, body := postLogin(t, session, c.master.url, url.Values{"token": {"not-the-token-but-long-enough"}}); code != http.StatusUnauthorized {
		t.Errorf("login with a wrong token: %d %s, want 401", code, body)
	}
	if code, body := postLogin(t, session, c.master.url, url.Values{"token": {testToken}, "next": {"//evil.example/"}}); code != http.StatusSeeOther {
		t.Fatalf("login: %d %s", code, body)
	}
	if code, body := post(t, session, kill, url.Values{}); code != http.StatusForbidden || !strings.Contains(body, "CSRF") {
		t.Errorf("kill without the CSRF token: %d %s, want 403 naming the CSRF token", code, body)
	}
	if code, body := post(t, session, kill, url.Values{"csrf": {"forged"}}); code != http.StatusForbidden {
		t.Errorf("kill with a forged CSRF token: %d %s, want 403", code, body)
	}
	if s := c.state(t); len(s.ActiveApps) != 1 || s.ActiveApps[0].State != "RUNNING" {
		t.Fatalf("refused kills changed the app: %+v", s.ActiveApps)
	}

	p := &pages{t: t, ctx: browser(t), dir: t.TempDir()}
	// A log page in follow mode shows what is written to the log after it opened.
	p.do("open a log", chromedp.Navigate(c.workers[0].url+"/log/"+id+"/0/stdout?follow=1"))
	p.login()
	p.do("log page", chromedp.WaitVisible(chromedp.CSS("#log")))
	f, err := os.OpenFile(filepath.Join(c.workDirs[0], id, "0", "stdout"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString("written after the page opened\n")
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(p.ctx, chromedp.Poll[bool](`document.querySelector('#log').textContent.includes('written after the page opened')`)); err != nil {
		t.Fatalf("follow mode did not show the new line: %v", err)
	}
	p.shot("log-follow")

	// After a login in the browser, its kill button ends the application.
	p.do("open the master", chromedp.Navigate(c.master.url+"/"))
	p.login()
	p.do("master page", chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#active-apps tr[data-app=%q] button.kill`, id))))
	p.shot("master-running")
	p.do("kill", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#active-apps tr[data-app=%q] button.kill`, id))),
		chromedp.WaitVisible(chromedp.CSS("#app-state")))
	c.waitFor(t, "app killed", func(s masterJSON) bool {
		return len(s.ActiveApps) == 0 && len(s.CompletedApps) == 1 && s.CompletedApps[0].State == "KILLED"
	})
	p.do("reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#app-state")))
	if state := eval[string](p, `document.querySelector('#app-state').textContent`); state != "KILLED" {
		t.Errorf("app page says %s after the kill", state)
	}
	p.shot("app-killed")
	select {
	case <-exited:
		if exitCode(waitErr) == 0 {
			t.Error("submit of a killed app exited 0")
		}
	case <-time.After(30 * time.Second):
		t.Error("submit did not end after its app was killed")
	}
}

// post sends a form through client and returns the status and body.
func post(t *testing.T, client *http.Client, target string, form url.Values) (int, string) {
	t.Helper()
	resp, err := client.PostForm(target, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// postLogin posts the login form of the page server at base with form, as
// a browser does: with the CSRF token of the form client was given first.
func postLogin(t *testing.T, client *http.Client, base string, form url.Values) (int, string) {
	t.Helper()
	resp, err := client.Get(base + "/login")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(page)
	if m == nil {
		t.Fatalf("the login form has no CSRF token:\n%s", page)
	}
	form.Set("csrf", string(m[1]))
	return post(t, client, base+"/login", form)
}

// get GETs target with the test's token and returns the status and body.
func get(t *testing.T, target string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestWebUIAnswersHostileInputWithAClear4xx(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1)
	if out, errOut, err := runGlint(t, "submit", "--master", c.master.url, "--executor-cores", "1",
		"--executor-memory", "256m", "--log-level", "warn", "pi", "2"); err != nil {
		t.Fatalf("submit: %v\n%s\n%s", err, out, errOut)
	}
	app := c.waitFor(t, "pi completed", func(s masterJSON) bool { return len(s.CompletedApps) == 1 }).CompletedApps[0]
	secret := filepath.Join(c.workDirs[0], "secret")
	if err := os.WriteFile(secret, []byte("not for the web"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A link an executor made that points out of its directory (to another
	// application's log, or any of the worker's files) is not followed.
	if err := os.Remove(filepath.Join(c.workDirs[0], app.ID, "0", "stderr")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(c.workDirs[0], app.ID, "0", "stderr")); err != nil {
		t.Fatal(err)
	}
	w := c.workers[0].url
	log := w + "/log/" + app.ID + "/0/stdout"
	for _, tc := range []struct {
		url  string
		code int
		says string
	}{
		{log, http.StatusOK, "Launch command: "},
		{log + "?offset=0", http.StatusOK, "Launch command: "},
		{log + "?offset=99999999999", http.StatusRequestedRangeNotSatisfiable, "past the end"},
		{log + "?offset=99999999999999999999999", http.StatusBadRequest, "not a byte offset"},
		{log + "?offset=-1", http.StatusBadRequest, "not a byte offset"},
		{w + "/log/" + app.ID + "/0/stderr", http.StatusForbidden, "inside its work dir"},
		{w + "/log/" + app.ID + "/0/environ", http.StatusBadRequest, "stdout and stderr"},
		{w + "/log/" + app.ID + "/00/stdout", http.StatusBadRequest, "executor id"},
		{w + "/log/" + app.ID + "/-1/stdout", http.StatusBadRequest, "executor id"},
		{w + "/log/" + app.ID + "/7/stdout", http.StatusNotFound, "has no stdout"},
		{w + "/log/..%2F..%2Fsecret/0/stdout", http.StatusBadRequest, "invalid"},
		{w + "/log/app-20260101000000-0000%2F..%2F..%2Fsecret/0/stdout", http.StatusBadRequest, "invalid"},
		{w + "/log/driver-20260101000000-0000/stdout", http.StatusNotFound, "has no stdout"},
		{w + "/log/driver-x/stdout", http.StatusBadRequest, "invalid"},
		{c.master.url + "/app/app-20260101000000-0000", http.StatusNotFound, "no application"},
		{c.master.url + "/app/%3Cscript%3E", http.StatusBadRequest, "invalid"},
		{c.master.url + "/nothing-here", http.StatusNotFound, ""},
	} {
		code, body := get(t, tc.url)
		if code != tc.code || !strings.Contains(body, tc.says) {
			t.Errorf("GET %s: %d %.300q; want %d saying %q", tc.url, code, body, tc.code, tc.says)
		}
		if strings.Contains(body, "not for the web") || strings.Contains(body, "<script>") {
			t.Errorf("GET %s leaked: %.300q", tc.url, body)
		}
		if strings.HasPrefix(body, "<!doctype html>") {
			mustParseHTML(t, tc.url, body)
		}
	}
	// A path with .. segments is cleaned to one that is not a log page.
	if code, body := get(t, w+"/log/../../secret/0/stdout"); code == http.StatusOK || strings.Contains(body, "not for the web") {
		t.Errorf("GET a path with ..: %d %.300q", code, body)
	}
	// Pages need a login; a bad or missing CSRF token or no login stops a button.
	if code, _ := post(t, http.DefaultClient, c.master.url+"/driver/driver-20260101000000-0000/kill", nil); code != http.StatusUnauthorized {
		t.Errorf("driver kill without login: %d, want 401", code)
	}
	resp, err := http.Get(log)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("log page without login: %d, want 401", resp.StatusCode)
	}
}

func TestUIPublicOpensTheReadOnlyPagesOnly(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 0, "--ui-public")
	w := start(t, "worker", nil, "worker", "--master", c.master.url, "--listen", "127.0.0.1:0", "--cores", "1",
		"--memory", "1g", "--work-dir", t.TempDir(), "--ui-public")
	for _, page := range []string{c.master.url + "/", w.url + "/"} {
		resp, err := http.Get(page)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s without login with --ui-public: %s %.200q", page, resp.Status, body)
		}
		mustParseHTML(t, page, string(body))
	}
	if code, body := post(t, http.DefaultClient, c.master.url+"/app/app-20260101000000-0000/kill", url.Values{}); code != http.StatusUnauthorized {
		t.Errorf("kill without login with --ui-public: %d %.200q, want 401", code, body)
	}
	// Links the UI makes must be web addresses.
	for _, flag := range []string{"--jaeger-ui-url", "--grafana-url"} {
		_, stderr, err := runGlint(t, "master", "--listen", "127.0.0.1:0", flag, "javascript:alert(1)")
		if exitCode(err) == 0 || !strings.Contains(stderr, flag) {
			t.Errorf("master %s javascript:…: exit %d, %q; want a refusal naming the flag", flag, exitCode(err), stderr)
		}
	}
}

func TestWebUIApplicationTabsShowItsEnvironmentRedactedAndItsEvents(t *testing.T) {
	if testing.Short() {
		t.Skip("-short is the fast loop (make test-short); make test runs this: it starts a cluster and Chromium")
	}
	t.Parallel()
	c := startCluster(t, 1)
	if out, errOut, err := glintWithEnv(t, nil, "submit", "--master", c.master.url, "--executor-cores", "1",
		"--executor-memory", "256m", "--total-executor-cores", "1", "--conf", "spark.authenticate.secret=s3cr3t-ui",
		"--conf", "spark.glint.example=shown", "--log-level", "warn", "pi", "4"); err != nil {
		t.Fatalf("submit: %v\n%s\n%s", err, out, errOut)
	}
	s := c.waitFor(t, "pi completed", func(s masterJSON) bool { return len(s.CompletedApps) == 1 })
	app := s.CompletedApps[0]
	p := &pages{t: t, ctx: browser(t), dir: t.TempDir()}
	p.do("open the app", chromedp.Navigate(c.master.url+"/app/"+app.ID))
	p.login()
	p.do("executors tab", chromedp.WaitVisible(chromedp.CSS("#executors")))
	if n := eval[int](p, `document.querySelectorAll('#refresh').length`); n != 0 {
		t.Error("an ended application's page refreshes itself")
	}
	p.do("environment tab", chromedp.Click(chromedp.CSS(`#tabs a[data-tab="environment"]`)), chromedp.WaitVisible(chromedp.CSS("#command")))
	if cmd := eval[string](p, `document.querySelector('#command').textContent`); cmd == "" {
		t.Error("the environment tab shows no command")
	}
	if html := eval[string](p, `document.documentElement.outerHTML`); strings.Contains(html, "s3cr3t-ui") {
		t.Error("the environment tab shows the secret")
	}
	// The properties are the driver's, its secret hidden.
	conf := eval[map[string]string](p, `Object.fromEntries([...document.querySelectorAll('#conf tbody tr')].map(tr => [tr.cells[0].textContent, tr.cells[1].textContent]))`)
	if conf["spark.glint.example"] != "shown" || conf["spark.authenticate.secret"] != redact.Text {
		t.Errorf("Spark properties %q: want spark.glint.example shown and spark.authenticate.secret hidden", conf)
	}
	p.shot("app-environment")
	p.do("events tab", chromedp.Click(chromedp.CSS(`#tabs a[data-tab="events"]`)), chromedp.WaitVisible(chromedp.CSS("#events")))
	kinds := eval[[]string](p, `[...document.querySelectorAll('#events tr.event')].map(r => r.cells[2].textContent)`)
	if want := 2 * len(app.Executors); len(kinds) != want || kinds[0] != "added" || kinds[len(kinds)-1] != "removed" {
		t.Errorf("events %q, want each of the %d executors added then removed", kinds, len(app.Executors))
	}
	p.shot("app-events")
	p.do("jobs tab", chromedp.Click(chromedp.CSS(`#tabs a[data-tab="jobs"]`)), chromedp.WaitVisible(chromedp.CSS("#progress-error")))
	p.do("worker link", chromedp.Navigate(c.master.url+"/app/"+app.ID+"?tab=events"), chromedp.WaitVisible(chromedp.CSS("#events")))
	if href := eval[string](p, `document.querySelector('#events a').href`); href != c.workers[0].url+"/" {
		t.Errorf("the event's worker links %q, want %q", href, c.workers[0].url+"/")
	}
}
