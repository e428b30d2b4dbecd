package executor

import (
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"

	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/driver/v1/driverv1connect"
)

// driverClient calls the four DriverService procedures an executor calls.
// The generated client makes a connect.Client for each of the service's
// nine, which was a large part of an executor's making on its launch's
// path, in a warm process and more so in a prestarted executor just claimed.
type driverClient struct {
	retrieveSparkProps *connect.Client[driverv1.RetrieveSparkPropsRequest, driverv1.RetrieveSparkPropsResponse]
	registerExecutor   *connect.Client[driverv1.RegisterExecutorRequest, driverv1.RegisterExecutorResponse]
	launchedExecutor   *connect.Client[driverv1.LaunchedExecutorRequest, driverv1.LaunchedExecutorResponse]
	statusUpdate       *connect.Client[driverv1.StatusUpdateRequest, driverv1.StatusUpdateResponse]
}

func newDriverClient(httpClient connect.HTTPClient, baseURL string, opts ...connect.ClientOption) *driverClient {
	baseURL = strings.TrimRight(baseURL, "/")
	methods := driverv1.File_glint_driver_v1_driver_proto.Services().ByName("DriverService").Methods()
	return &driverClient{
		retrieveSparkProps: newClient[driverv1.RetrieveSparkPropsRequest, driverv1.RetrieveSparkPropsResponse](httpClient, baseURL, driverv1connect.DriverServiceRetrieveSparkPropsProcedure, methods, opts),
		registerExecutor:   newClient[driverv1.RegisterExecutorRequest, driverv1.RegisterExecutorResponse](httpClient, baseURL, driverv1connect.DriverServiceRegisterExecutorProcedure, methods, opts),
		launchedExecutor:   newClient[driverv1.LaunchedExecutorRequest, driverv1.LaunchedExecutorResponse](httpClient, baseURL, driverv1connect.DriverServiceLaunchedExecutorProcedure, methods, opts),
		statusUpdate:       newClient[driverv1.StatusUpdateRequest, driverv1.StatusUpdateResponse](httpClient, baseURL, driverv1connect.DriverServiceStatusUpdateProcedure, methods, opts),
	}
}

// newClient is the client of procedure ("/service/Method") at baseURL, as
// the generated code makes it.
func newClient[Req, Res any](httpClient connect.HTTPClient, baseURL, procedure string, methods protoreflect.MethodDescriptors, opts []connect.ClientOption) *connect.Client[Req, Res] {
	method := methods.ByName(protoreflect.Name(procedure[strings.LastIndexByte(procedure, '/')+1:]))
	return connect.NewClient[Req, Res](httpClient, baseURL+procedure, connect.WithSchema(method), connect.WithClientOptions(opts...))
}
