package cli

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"

	"github.com/glint-cluster/glint/pkg/rpc"
)

// service is the shape of every Glint service: master, worker, driver and
// executor are each New(cfg), Handler() and Run(ctx).
type service interface {
	Handler() http.Handler
	Run(ctx context.Context) error
}

// serve is every long-running process's last step: it serves svc's handler
// on ln, writes url to urlFile once serving, and runs svc until ctx ends or
// Run returns. Stop order: Run returns first (a worker has then killed and
// reported its children, a driver has stopped its executors), and only then
// does the listener close, so the last calls made to the process still get
// answers.
func serve(ctx context.Context, log *slog.Logger, ln net.Listener, url, urlFile string, svc service) error {
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	serveCtx, stopServe := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan error, 1)
	go func() {
		err := rpc.Serve(serveCtx, ln, svc.Handler())
		if err != nil {
			stopRun()
		}
		served <- err
	}()
	log.Info("serving", "url", url)
	err := writeURLFile(urlFile, url)
	if err == nil {
		err = svc.Run(runCtx)
	}
	stopServe()
	return errors.Join(err, <-served)
}
