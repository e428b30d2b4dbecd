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
	"github.com/glint-cluster/glint/pkg/rpc"
)

// Warm makes, before a prestarted executor's claim, the calls its launch
// begins with (RetrieveSparkProps and RegisterExecutor) to a stand-in driver
// on loopback inside this process, through a client built as the executor's
// is with tp: the code and data of that path are loaded and initialised
// ahead of the claim instead of on the launch's clock, and so is the local
// time zone. It talks to nothing outside the process.
func Warm(ctx context.Context, tp trace.TracerProvider) error {
	// The local time zone, read from a file on first use: log lines show it.
	time.Now().Zone()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("warm: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(driverv1connect.NewDriverServiceHandler(standIn{}))
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: &protocols, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	httpClient := rpc.NewHTTPClient()
	defer httpClient.CloseIdleConnections()
	client := driverv1connect.NewDriverServiceClient(httpClient, "http://"+ln.Addr().String(), rpc.ClientOptions(tp, "warm-up")...)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = client.RetrieveSparkProps(ctx, connect.NewRequest(&driverv1.RetrieveSparkPropsRequest{AppId: "app-20260101000000-0000"}))
	if err == nil {
		_, err = client.RegisterExecutor(ctx, connect.NewRequest(&driverv1.RegisterExecutorRequest{AppId: "app-20260101000000-0000", Cores: 1}))
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
