package e2e

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"connectrpc.com/connect"

	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/driver/v1/driverv1connect"
	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/rpc/rpctest"
)

// standInDriver answers an executor's start-up calls as a driver would.
type standInDriver struct {
	driverv1connect.UnimplementedDriverServiceHandler
}

func (standInDriver) RetrieveSparkProps(context.Context, *connect.Request[driverv1.RetrieveSparkPropsRequest]) (*connect.Response[driverv1.RetrieveSparkPropsResponse], error) {
	return connect.NewResponse(&driverv1.RetrieveSparkPropsResponse{}), nil
}

func (standInDriver) RegisterExecutor(context.Context, *connect.Request[driverv1.RegisterExecutorRequest]) (*connect.Response[driverv1.RegisterExecutorResponse], error) {
	return connect.NewResponse(&driverv1.RegisterExecutorResponse{}), nil
}

func (standInDriver) LaunchedExecutor(context.Context, *connect.Request[driverv1.LaunchedExecutorRequest]) (*connect.Response[driverv1.LaunchedExecutorResponse], error) {
	return connect.NewResponse(&driverv1.LaunchedExecutorResponse{}), nil
}

func TestARegisteredExecutorStopsCleanlyOnSIGTERM(t *testing.T) {
	t.Parallel()
	_, h := driverv1connect.NewDriverServiceHandler(standInDriver{})
	url := rpctest.Serve(t, http.Handler(h))
	cmd := exec.Command(glintBin+child.ExecutorSuffix, "--driver-url", url, "--executor-id", "0", "--hostname", "127.0.0.1",
		"--cores", "1", "--app-id", "app-20261201120000-0001")
	cmd.Env = append(os.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT=")
	logs, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = w
	err = cmd.Start()
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	// It logs its registration once registered; its log ends if it exits.
	sc := bufio.NewScanner(logs)
	for sc.Scan() && !strings.Contains(sc.Text(), `"msg":"executor registered"`) {
	}
	copied := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, logs); close(copied) }()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	<-copied
	logs.Close()
	if err != nil {
		t.Errorf("a registered executor, sent SIGTERM, ended with %v; want it to stop and exit 0", err)
	}
}

func TestAMasterAndAWorkerStopCleanlyOnSIGTERM(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 1)
	// The worker first: it says goodbye to its master.
	for _, p := range []*proc{c.workers[0], c.master} {
		p.stop(t)
		if p.err != nil {
			t.Errorf("%v, sent SIGTERM, ended with %v; want it to stop and exit 0\n%s", p.cmd.Args[1], p.err, readFile(p.log))
		}
	}
}
