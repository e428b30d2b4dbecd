package executor

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace"

	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/driver/v1/driverv1connect"
	"github.com/glint-cluster/glint/pkg/app"
	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry"
)

// Warm makes, before a prestarted executor's claim, the calls its launch
// begins with (RetrieveSparkProps and RegisterExecutor) to a stand-in driver
// on loopback inside this process, through an executor made by New for it
// with tp: the code and data of that path, the executor's making included,
// are loaded and initialised ahead of the claim instead of on the launch's
// clock, and so is the local time zone. It talks to nothing outside the
// process. With TLS, the stand-in serves with the process's certificate at
// 127.0.0.1: a certificate that does not name it fails the calls (the
// executor then starts without them warm).
func Warm(ctx context.Context, tp trace.TracerProvider) error {
	// The local time zone, read from a file on first use: log lines show it.
	time.Now().Zone()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("warm: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(driverv1connect.NewDriverServiceHandler(standIn{}))
	// Served as every listener of the process is: over TLS when it uses
	// TLS, which the calls then warm too.
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan error, 1)
	go func() { served <- rpc.Serve(serveCtx, ln, mux) }()
	defer func() { stopServing(); <-served }()
	url := rpc.URL(ln.Addr(), "")
	apps, err := app.NewRegistry()
	if err != nil {
		return fmt.Errorf("warm: %w", err)
	}
	s, err := New(Config{
		ExecutorArgs: child.ExecutorArgs{DriverURL: url, AppID: "app-20260101000000-0000", Cores: 1, Hostname: "127.0.0.1"},
		URL:          url, Apps: apps, AppToken: "warm-up",
		Instruments: telemetry.Instruments{TracerProvider: tp},
	})
	if err != nil {
		return fmt.Errorf("warm: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = s.driver.retrieveSparkProps.CallUnary(ctx, connect.NewRequest(&driverv1.RetrieveSparkPropsRequest{AppId: "app-20260101000000-0000"}))
	if err == nil {
		_, err = s.driver.registerExecutor.CallUnary(ctx, connect.NewRequest(&driverv1.RegisterExecutorRequest{AppId: "app-20260101000000-0000", Cores: 1}))
	}
	return err
}

// standIn answers Warm's calls as a driver would, with nothing in them.
type standIn struct {
	driverv1connect.UnimplementedDriverServiceHandler
}

func (standIn) RetrieveSparkProps(context.Context, *connect.Request[driverv1.RetrieveSparkPropsRequest]) (*connect.Response[driverv1.RetrieveSparkPropsResponse], error) {
	return connect.NewResponse(&driverv1.RetrieveSparkPropsResponse{Properties: map[string]string{"spark.app.id": "warm"}}), nil
}

func (standIn) RegisterExecutor(context.Context, *connect.Request[driverv1.RegisterExecutorRequest]) (*connect.Response[driverv1.RegisterExecutorResponse], error) {
	return connect.NewResponse(&driverv1.RegisterExecutorResponse{}), nil
}
