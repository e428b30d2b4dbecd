package master

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
)

// checkDrivers probes each application's driver; an application whose driver
// has not answered for a worker timeout is removed (Spark notices a
// disconnected driver; Glint's drivers have no connection to lose).
func (s *Server) checkDrivers(ctx context.Context) {
	s.mu.Lock()
	probes := map[*appInfo]string{}
	for _, a := range s.apps {
		probes[a] = a.driverURL
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	answered := make(chan *appInfo, len(probes))
	for a, url := range probes {
		wg.Go(func() {
			if s.probe(ctx, url) {
				answered <- a
			}
		})
	}
	wg.Wait()
	close(answered)
	s.mu.Lock()
	defer s.scheduleAndUnlock(ctx)
	now := s.now()
	for a := range answered {
		a.driverSeen = now
	}
	for a := range probes {
		if !a.finished() && now.Sub(a.driverSeen) > s.cfg.WorkerTimeout {
			s.removeApplicationLocked(ctx, a, masterv1.ApplicationState_APPLICATION_STATE_FAILED,
				fmt.Sprintf("driver at %s unreachable for %s", a.driverURL, now.Sub(a.driverSeen).Round(time.Second)))
		}
	}
}

// probe reports whether the driver at url answers GET /healthz within a quarter
// of the worker timeout (at most 5s).
func (s *Server) probe(ctx context.Context, url string) bool {
	ctx, cancel := context.WithTimeout(ctx, min(s.cfg.WorkerTimeout/4, 5*time.Second))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/healthz", nil)
	if err != nil {
		return false
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
