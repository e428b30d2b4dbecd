// Package web is what the master's and the worker's web UIs share: the page
// templates and stylesheet (embedded, no build step), browser sessions (a login
// form, a session cookie, CSRF tokens), and the drawing of launch timelines.
package web

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/glint-cluster/glint/pkg/resources"
)

//go:embed templates/*.html templates/glint.css
var files embed.FS

// pages are the templates a Site renders, each with the layout, parsed on
// first use: every glint process links this package, and an executor, which
// renders no page, should not pay for parsing them at start.
var pages = sync.OnceValue(func() map[string]*template.Template {
	return parsePages("error", "login", "master", "app", "worker", "log")
})

// funcs are the helpers templates use.
var funcs = template.FuncMap{
	"mib":      resources.FormatMiB,
	"bytes":    resources.FormatBytes,
	"duration": FormatDuration,
	"stamp":    func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
	"phases":   func() [len(Phases)]string { return Phases },
	// table passes a table's rows, its element id and the viewer to a
	// table template.
	"table": func(rows any, v Viewer, id string) tableData { return tableData{Rows: rows, Viewer: v, ID: id} },
}

func parsePages(names ...string) map[string]*template.Template {
	css, err := fs.ReadFile(files, "templates/glint.css")
	if err != nil {
		panic(err)
	}
	layout := template.Must(template.New("layout.html").Funcs(funcs).Funcs(template.FuncMap{
		"css": func() template.CSS { return template.CSS(css) },
	}).ParseFS(files, "templates/layout.html"))
	out := map[string]*template.Template{}
	for _, name := range names {
		out[name] = template.Must(template.Must(layout.Clone()).ParseFS(files, "templates/"+name+".html"))
	}
	return out
}

// FormatDuration shows d rounded for people: 850µs, 12.3ms, 4.56s, 3m20s.
func FormatDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(100 * time.Microsecond).String()
	case d < time.Minute:
		return d.Round(10 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

// tableData is what a table template is given.
type tableData struct {
	Rows   any
	Viewer Viewer
	ID     string
}

// view is what the layout is given: the page's own data and who looks.
type view struct {
	Title   string
	Service string
	Viewer  Viewer
	Page    any
	// Nonce lets the page's own style and script run, and nothing else.
	Nonce string
}

// Render answers r with page name showing data to the viewer v, with status,
// gzipped when the client takes it. The page is rendered into memory first,
// so a template error is a clean 500.
func (s *Site) Render(w http.ResponseWriter, r *http.Request, status int, name, title string, v Viewer, data any) {
	var buf bytes.Buffer
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce) // crypto/rand.Read never fails on Linux
	vw := view{Title: title, Service: s.cfg.Service, Viewer: v, Page: data, Nonce: base64.RawStdEncoding.EncodeToString(nonce)}
	if err := pages()[name].ExecuteTemplate(&buf, "layout.html", vw); err != nil {
		http.Error(w, fmt.Sprintf("render %s: %v", name, err), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", fmt.Sprintf("default-src 'none'; style-src 'nonce-%[1]s'; script-src 'nonce-%[1]s'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'", vw.Nonce))
	h.Set("Referrer-Policy", "no-referrer")
	h.Add("Vary", "Accept-Encoding")
	if !acceptsGzip(r) {
		w.WriteHeader(status)
		_, _ = w.Write(buf.Bytes())
		return
	}
	// A page of a thousand workers is mostly repeated markup, which gzip
	// shrinks many times over.
	h.Set("Content-Encoding", "gzip")
	w.WriteHeader(status)
	gz, _ := gzip.NewWriterLevel(w, gzip.BestSpeed) // a valid level never fails
	_, _ = gz.Write(buf.Bytes())
	_ = gz.Close()
}

// acceptsGzip reports whether r's client takes gzip-encoded answers.
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		coding, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.TrimSpace(coding) == "gzip" && strings.ReplaceAll(q, " ", "") != "q=0" {
			return true
		}
	}
	return false
}

// Error answers a page request with a short page saying what was wrong.
func (s *Site) Error(w http.ResponseWriter, r *http.Request, status int, msg string) {
	s.Render(w, r, status, "error", http.StatusText(status), s.viewer(r), msg)
}

// Fail answers a page or button whose work failed with err: a page saying
// what went wrong, with the HTTP status of err's Connect code (rpc.Error).
func (s *Site) Fail(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument:
		status = http.StatusBadRequest
	case connect.CodeNotFound:
		status = http.StatusNotFound
	case connect.CodeFailedPrecondition, connect.CodeAlreadyExists:
		status = http.StatusConflict
	case connect.CodeUnauthenticated:
		status = http.StatusUnauthorized
	case connect.CodePermissionDenied:
		status = http.StatusForbidden
	case connect.CodeResourceExhausted:
		status = http.StatusRequestEntityTooLarge
	case connect.CodeUnavailable:
		status = http.StatusServiceUnavailable
	}
	msg := err.Error()
	var ce *connect.Error
	if errors.As(err, &ce) {
		msg = ce.Message()
	}
	s.Error(w, r, status, msg)
}

// ExitText is how a process ended, in words: its message (which names the
// exit code where there is one), else its exit code, else nothing.
func ExitText(status *int32, message string) string {
	if message != "" || status == nil {
		return message
	}
	return fmt.Sprintf("exit %d", *status)
}
