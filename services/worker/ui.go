package worker

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/glint-cluster/glint/pkg/fault"
	"github.com/glint-cluster/glint/pkg/ids"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/web"
)

// LogPageBytes is how much of a log one page shows (Spark's logPage shows
// 100 KiB by default).
const LogPageBytes = 64 << 10

// newSite is the worker's web UI: its pages need the cluster token, the only
// token the worker accepts, unless they are public.
func newSite(cfg Config) *web.Site {
	return web.New(web.Config{Service: "worker", Tokens: cfg.Tokens, Read: rpc.Cluster, Act: rpc.Cluster, Public: cfg.UIPublic, Now: cfg.Now})
}

// uiPages are the worker's web UI routes.
func (s *Server) uiPages() map[string]http.HandlerFunc {
	pages := map[string]http.HandlerFunc{
		"GET /{$}":                           s.site.Page(s.serveIndex),
		"GET /log/{app}/{executor}/{stream}": s.site.Page(s.serveExecutorLog),
		"GET /log/{driver}/{stream}":         s.site.Page(s.serveDriverLog),
	}
	maps.Copy(pages, s.site.Routes())
	return pages
}

// workerPage is the worker's page: /json's view, with each exit in words.
type workerPage struct {
	workerJSON
	Executors, FinishedExecutors []executorRow
	Drivers, FinishedDrivers     []driverRow
}

type executorRow struct {
	executorJSON
	Exit string
	// AppURL is its application's page on the master, when the worker has one.
	AppURL string
}

type driverRow struct {
	driverJSON
	Exit string
}

func (s *Server) serveIndex(w http.ResponseWriter, r *http.Request, v web.Viewer) {
	st := s.status()
	p := workerPage{workerJSON: st}
	execs := func(in []executorJSON) []executorRow {
		out := make([]executorRow, 0, len(in))
		for _, e := range in {
			out = append(out, executorRow{executorJSON: e, Exit: web.ExitText(e.ExitStatus, e.Message), AppURL: appURL(st.MasterURL, e.AppID)})
		}
		return out
	}
	drivers := func(in []driverJSON) []driverRow {
		out := make([]driverRow, 0, len(in))
		for _, d := range in {
			out = append(out, driverRow{driverJSON: d, Exit: web.ExitText(d.ExitStatus, d.Message)})
		}
		return out
	}
	p.Executors, p.FinishedExecutors = execs(st.Executors), execs(st.FinishedExecutors)
	p.Drivers, p.FinishedDrivers = drivers(st.Drivers), drivers(st.FinishedDrivers)
	s.site.Render(w, r, http.StatusOK, "worker", "Overview", v, p)
}

// serveExecutorLog serves an executor's stdout or stderr: the path is made
// of the validated ids only, in their canonical form.
func (s *Server) serveExecutorLog(w http.ResponseWriter, r *http.Request, v web.Viewer) {
	app, exec := r.PathValue("app"), r.PathValue("executor")
	if err := ids.ValidateApp(app); err != nil {
		s.site.Fail(w, r, rpc.Error(err))
		return
	}
	id, err := strconv.ParseInt(exec, 10, 32)
	if err == nil {
		err = ids.ValidateExecutor(int32(id))
	}
	if err != nil || strconv.FormatInt(id, 10) != exec {
		s.site.Fail(w, r, rpc.Error(fmt.Errorf("executor id %.32q: %w: want a number from 0", exec, fault.ErrInvalidArgument)))
		return
	}
	s.serveLog(w, r, v, filepath.Join(app, exec), fmt.Sprintf("executor %s of %s", exec, app), appURL(s.status().MasterURL, app))
}

// appURL is application app's page on the master at master; "" when the
// worker has no master.
func appURL(master, app string) string {
	if master == "" {
		return ""
	}
	return strings.TrimRight(master, "/") + "/app/" + app
}

// serveDriverLog serves a cluster-mode driver's stdout or stderr.
func (s *Server) serveDriverLog(w http.ResponseWriter, r *http.Request, v web.Viewer) {
	id := r.PathValue("driver")
	if err := ids.ValidateDriver(id); err != nil {
		s.site.Fail(w, r, rpc.Error(err))
		return
	}
	s.serveLog(w, r, v, id, "driver "+id, "")
}

// logPage is one page of a log.
type logPage struct {
	// AppURL is the page of the application whose executor's log it is.
	Owner, Stream, Text, AppURL string
	Offset, End, Size           int64
	PrevOffset                  int64
	Prev, Next, Follow          bool
}

// serveLog serves LogPageBytes of dir's log stream from ?offset (default:
// the last page), as a page, or as plain text with ?raw=1 (follow mode's
// polls; X-Log-End says where the next poll starts). The file is opened
// inside its owner's directory through an os.Root, so no link its process
// made can lead out of it (to another application's log, or the worker's
// files).
func (s *Server) serveLog(w http.ResponseWriter, r *http.Request, v web.Viewer, dir, owner, appURL string) {
	stream := r.PathValue("stream")
	if stream != "stdout" && stream != "stderr" {
		s.site.Error(w, r, http.StatusBadRequest, fmt.Sprintf("no log %.32q: the logs are stdout and stderr", stream))
		return
	}
	q := r.URL.Query()
	root, err := os.OpenRoot(filepath.Join(s.cfg.WorkDir, dir))
	if errors.Is(err, fs.ErrNotExist) {
		s.site.Error(w, r, http.StatusNotFound, fmt.Sprintf("%s has no %s on this worker", owner, stream))
		return
	}
	if err != nil {
		s.site.Fail(w, r, fmt.Errorf("open the work dir of %s: %w", owner, err))
		return
	}
	defer root.Close()
	f, err := root.Open(stream)
	if errors.Is(err, fs.ErrNotExist) {
		s.site.Error(w, r, http.StatusNotFound, fmt.Sprintf("%s has no %s on this worker", owner, stream))
		return
	}
	if err != nil {
		// A link that leads out of its directory, or a file the worker may not read.
		s.site.Error(w, r, http.StatusForbidden, fmt.Sprintf("the %s of %s cannot be opened inside its work dir: %v", stream, owner, err))
		return
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() {
		s.site.Error(w, r, http.StatusNotFound, fmt.Sprintf("%s has no %s on this worker", owner, stream))
		return
	}
	size := info.Size()
	offset := max(size-LogPageBytes, 0)
	if raw := q.Get("offset"); raw != "" {
		offset, err = strconv.ParseInt(raw, 10, 64)
		if err != nil || offset < 0 {
			s.site.Error(w, r, http.StatusBadRequest, fmt.Sprintf("offset %.32q is not a byte offset: want a number from 0", raw))
			return
		}
		if offset > size {
			s.site.Error(w, r, http.StatusRequestedRangeNotSatisfiable, fmt.Sprintf("offset %d is past the end of the %s of %s (%d bytes)", offset, stream, owner, size))
			return
		}
	}
	buf := make([]byte, min(size-offset, LogPageBytes))
	n, err := f.ReadAt(buf, offset)
	if err != nil && !errors.Is(err, io.EOF) {
		s.site.Fail(w, r, fmt.Errorf("read %s of %s: %w", stream, owner, err))
		return
	}
	buf = buf[:n]
	end := offset + int64(n)
	if q.Get("raw") == "1" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Log-End", strconv.FormatInt(end, 10))
		_, _ = w.Write(buf)
		return
	}
	s.site.Render(w, r, http.StatusOK, "log", stream+" of "+owner, v, logPage{
		Owner: owner, Stream: stream, Text: string(buf), Offset: offset, End: end, Size: size, AppURL: appURL,
		PrevOffset: max(offset-LogPageBytes, 0), Prev: offset > 0, Next: end < size, Follow: q.Get("follow") == "1",
	})
}
