package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"

	"github.com/glint-cluster/glint/pkg/rpc"
)

// Service is the shape of every Glint service: master, worker, driver and
// executor are each New(cfg), Handler() and Run(ctx).
type Service interface {
	Handler() http.Handler
	Run(ctx context.Context) error
}

// Serve is every long-running process's last step: it serves svc's handler
// on ln, writes url to urlFile once serving, and runs svc until ctx ends or
// Run returns. The listener answers to the host of url and to hosts (its
// --host and --allowed-host) besides its own addresses (rpc.Serve). Stop order: Run returns first (a worker has then killed and
// reported its children, a driver has stopped its executors), and only then
// does the listener close, so the last calls made to the process still get
// answers.
func Serve(ctx context.Context, log *slog.Logger, ln net.Listener, url, urlFile string, svc Service, hosts ...string) error {
	if u, err := neturl.Parse(url); err == nil {
		hosts = append(hosts, u.Hostname())
	}
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	serveCtx, stopServe := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan error, 1)
	go func() {
		err := rpc.Serve(serveCtx, ln, svc.Handler(), hosts...)
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

// Listen opens a listener on addr and returns it with the URL peers use to
// reach it: an unspecified host (":7077") is replaced by advertise.
func Listen(addr, advertise string) (net.Listener, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("listen on %s: %w", addr, err)
	}
	return ln, rpc.URL(ln.Addr(), advertise), nil
}

// writeURLFile writes url to path atomically, for scripts and tests that start
// a process on an ephemeral port.
func writeURLFile(path, url string) error {
	if path == "" {
		return nil
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(url+"\n"), 0o644); err != nil {
		return fmt.Errorf("write url file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write url file: %w", err)
	}
	return nil
}
