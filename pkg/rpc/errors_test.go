package rpc

import (
	"errors"
	"testing"

	"connectrpc.com/connect"

	"github.com/glint-cluster/glint/pkg/fault"
)

// A call that got no answer — it could not connect, the connection broke,
// the call timed out or was cut off — is answerless; every code a Glint
// service refuses with (Error of a fault) but Unavailable is an answer.
func TestOnlyCallsThatGotNoAnswerAreAnswerless(t *testing.T) {
	for _, code := range []connect.Code{connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeCanceled, connect.CodeUnknown} {
		if err := connect.NewError(code, errors.New("no answer")); !Answerless(err) {
			t.Errorf("%v: not answerless", err)
		}
	}
	for _, f := range []error{fault.ErrNotFound, fault.ErrAlreadyExists, fault.ErrInvalidArgument, fault.ErrFailedPrecondition,
		fault.ErrResourceExhausted, fault.ErrPermissionDenied, errors.New("a bug")} {
		if err := Error(f); Answerless(err) {
			t.Errorf("the answer %v: answerless", err)
		}
	}
}
