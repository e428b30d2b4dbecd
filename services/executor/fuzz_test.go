package executor_test

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	executorv1 "github.com/glint-cluster/glint/pkg/api/glint/executor/v1"
	"github.com/glint-cluster/glint/pkg/app"
	"github.com/glint-cluster/glint/pkg/child"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/rpc/rpctest"
	"github.com/glint-cluster/glint/services/executor"
)

// FuzzExecutorHandlers posts any body, with the application's token or
// without, to any ExecutorService procedure of an executor whose tasks
// return at once: answers are success or a client's error, Unauthenticated
// without the token.
func FuzzExecutorHandlers(f *testing.F) {
	apps, err := app.NewRegistry(&app.App{
		Name:  "t",
		Run:   func(context.Context, app.Context, []string) error { return nil },
		Tasks: map[string]app.TaskFunc{"echo": func(_ context.Context, in []byte) ([]byte, error) { return in, nil }},
	})
	if err != nil {
		f.Fatal(err)
	}
	token := rpc.NewToken()
	rpctest.Fuzz(f, rpctest.Target{
		Service: executorv1.File_glint_executor_v1_executor_proto.Services().ByName("ExecutorService"),
		Handler: func(t *testing.T) http.Handler {
			s, err := executor.New(executor.Config{
				ExecutorArgs: child.ExecutorArgs{DriverURL: "http://127.0.0.1:1", ExecutorID: 0, Hostname: "127.0.0.1",
					Cores: 2, AppID: "app-20261130120000-0001"},
				URL: "http://127.0.0.1:2", Apps: apps, AppToken: token,
			})
			if err != nil {
				t.Fatal(err)
			}
			return s.Handler()
		},
		Token: token,
		Seeds: []proto.Message{
			&executorv1.LaunchTaskRequest{Tasks: []*executorv1.TaskDescription{{TaskId: 1, Name: "t.echo", Input: []byte("x")}}},
			&executorv1.KillTaskRequest{TaskId: 1},
		},
		Codes: []connect.Code{connect.CodeInvalidArgument, connect.CodeNotFound, connect.CodeAlreadyExists, connect.CodeResourceExhausted},
	})
}
