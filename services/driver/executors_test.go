package driver

import (
	"errors"
	"testing"

	"connectrpc.com/connect"

	"github.com/glint-cluster/glint/pkg/fault"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// A call to an executor that got no answer — it could not connect, the
// connection broke, the call timed out or was cut off — shows the executor
// unreachable; every code an executor answers with (rpc.Error of a fault)
// is a refusal.
func TestOnlyCallsThatGotNoAnswerShowAnExecutorUnreachable(t *testing.T) {
	for _, code := range []connect.Code{connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeCanceled, connect.CodeUnknown} {
		if err := connect.NewError(code, errors.New("no answer")); !unreachable(err) {
			t.Errorf("%v: not unreachable", err)
		}
	}
	for _, f := range []error{fault.ErrNotFound, fault.ErrAlreadyExists, fault.ErrInvalidArgument, fault.ErrFailedPrecondition,
		fault.ErrResourceExhausted, errors.New("a bug")} {
		if err := rpc.Error(f); unreachable(err) {
			t.Errorf("the answer %v: unreachable", err)
		}
	}
}
