package rpc

import (
	"errors"

	"connectrpc.com/connect"

	"github.com/glint-cluster/glint/pkg/fault"
)

// Error turns a domain error into the Connect error a handler returns, by the
// fault it wraps. It is the only place a service's errors get their codes.
func Error(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	code := connect.CodeInternal
	switch {
	case errors.Is(err, fault.ErrNotFound):
		code = connect.CodeNotFound
	case errors.Is(err, fault.ErrAlreadyExists):
		code = connect.CodeAlreadyExists
	case errors.Is(err, fault.ErrInvalidArgument):
		code = connect.CodeInvalidArgument
	case errors.Is(err, fault.ErrFailedPrecondition):
		code = connect.CodeFailedPrecondition
	case errors.Is(err, fault.ErrResourceExhausted):
		code = connect.CodeResourceExhausted
	case errors.Is(err, fault.ErrUnavailable):
		code = connect.CodeUnavailable
	case errors.Is(err, fault.ErrPermissionDenied):
		code = connect.CodePermissionDenied
	}
	return connect.NewError(code, err)
}

// Answerless reports whether a call failed without the peer's answer (it
// could not be reached, the connection broke, the call timed out), so that it
// may or may not have taken effect — rather than by the peer's refusal. Glint's
// services answer only with the codes Error gives pkg/fault's kinds, never
// Unknown, Canceled or DeadlineExceeded.
func Answerless(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeDeadlineExceeded, connect.CodeUnavailable, connect.CodeCanceled, connect.CodeUnknown:
		return true
	}
	return false
}
