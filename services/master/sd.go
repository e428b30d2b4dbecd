package master

import (
	"encoding/json"
	"net/http"
	"net/url"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
)

// sdTarget is one entry of Prometheus' HTTP service discovery format.
type sdTarget struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// serveSD serves GET /sd in Prometheus' http_sd format: the /metrics targets
// of every live worker, every active application's driver and every executor
// that runs. Drivers and executors listen on ephemeral ports and come and go;
// this is how Prometheus finds them.
func (s *Server) serveSD(w http.ResponseWriter, _ *http.Request) {
	targets := []sdTarget{}
	s.mu.Lock()
	for wk := range s.workers.all() {
		if wk.state == masterv1.WorkerState_WORKER_STATE_DEAD {
			continue
		}
		targets = append(targets, sdTarget{
			Targets: []string{hostPort(wk.url)},
			Labels:  map[string]string{"role": "worker", "worker": wk.id},
		})
	}
	for _, a := range s.appQueue {
		targets = append(targets, sdTarget{
			Targets: []string{hostPort(a.driverURL)},
			Labels:  map[string]string{"role": "driver", "app": a.id},
		})
		for _, e := range a.executors {
			if e.url == "" || e.state != masterv1.ExecutorState_EXECUTOR_STATE_RUNNING {
				continue
			}
			targets = append(targets, sdTarget{
				Targets: []string{hostPort(e.url)},
				Labels:  map[string]string{"role": "executor", "app": a.id, "worker": e.worker.id},
			})
		}
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(targets)
}

// hostPort is the host:port of a normalized URL.
func hostPort(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.Host
}
