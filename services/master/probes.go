package master

import (
	"context"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/driver/v1/driverv1connect"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
)

// checkDrivers probes each application's driver; an application whose driver
// has not answered for a worker timeout is removed (Spark notices a
// disconnected driver; Glint's drivers have no connection to lose).
func (s *Server) checkDrivers(ctx context.Context) {
	s.mu.Lock()
	probes := map[*appInfo]driverv1connect.DriverServiceClient{}
	for _, a := range s.apps {
		probes[a] = a.client
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	answered := make(chan *appInfo, len(probes))
	for a, client := range probes {
		wg.Go(func() {
			if s.probe(ctx, client, a.id) {
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
		if !a.finished() && s.silentFor(now, a.driverSeen) > s.cfg.WorkerTimeout {
			s.removeApplicationLocked(ctx, a, masterv1.ApplicationState_APPLICATION_STATE_FAILED,
				fmt.Sprintf("driver at %s unreachable for %s", a.driverURL, now.Sub(a.driverSeen).Round(time.Second)))
		}
	}
}

// probe reports whether the application's driver answers Ping within a
// quarter of the worker timeout (at most 5s). Only that driver does: the
// call carries the application's token and id, so a server that answers
// anything (another driver, the master's own URL) is no proof of life.
func (s *Server) probe(ctx context.Context, client driverv1connect.DriverServiceClient, app string) bool {
	ctx, cancel := context.WithTimeout(ctx, min(s.cfg.WorkerTimeout/4, 5*time.Second))
	defer cancel()
	_, err := client.Ping(ctx, connect.NewRequest(&driverv1.PingRequest{AppId: app}))
	return err == nil
}
