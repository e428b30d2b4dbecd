// Package servicetest runs Glint's services in a test's process, each served
// on its own loopback listener as the glint command serves it, and stops them
// when the test ends.
package servicetest

import (
	"context"
	"net"
	"net/http"
	"sync"
	"testing"

	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/services/driver"
	"github.com/glint-cluster/glint/services/executor"
	"github.com/glint-cluster/glint/services/master"
)

// Listen opens a loopback listener on an ephemeral port and returns it with
// its URL.
func Listen(t testing.TB) (net.Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln, "http://" + ln.Addr().String()
}

// serve serves h on ln until the test ends.
func serve(t testing.TB, ln net.Listener, h http.Handler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = rpc.Serve(ctx, ln, h)
	}()
	t.Cleanup(func() { cancel(); <-served })
}

// Master runs a master for cfg (its URL filled in) until the test ends and
// returns its URL.
func Master(t testing.TB, cfg master.Config) string {
	t.Helper()
	ln, url := Listen(t)
	cfg.URL = url
	m, err := master.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = m.Run(ctx) })
	serve(t, ln, m.Handler())
	t.Cleanup(func() { cancel(); wg.Wait() })
	return url
}

// Driver serves a driver for cfg (its URL filled in) and registers its
// application; the test runs tasks with RunTasks. The driver stops (Stop)
// when the test ends.
func Driver(t testing.TB, cfg driver.Config) *driver.Driver {
	t.Helper()
	d, err := NewDriver(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Register(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Stop(context.Background()) })
	return d
}

// NewDriver serves a driver for cfg (its URL filled in) without registering
// it, and returns New's error.
func NewDriver(t testing.TB, cfg driver.Config) (*driver.Driver, error) {
	t.Helper()
	ln, url := Listen(t)
	cfg.URL = url
	d, err := driver.New(cfg)
	if err != nil {
		ln.Close()
		return nil, err
	}
	serve(t, ln, d.Handler())
	return d, nil
}

// RunExecutor runs an executor for cfg (its URL filled in), served on ln,
// until its Run returns, and returns what Run did.
func RunExecutor(ctx context.Context, ln net.Listener, cfg executor.Config) error {
	cfg.URL = "http://" + ln.Addr().String()
	s, err := executor.New(cfg)
	if err != nil {
		ln.Close()
		return err
	}
	serveCtx, stopServing := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- rpc.Serve(serveCtx, ln, s.Handler()) }()
	err = s.Run(ctx)
	stopServing()
	<-served
	return err
}
