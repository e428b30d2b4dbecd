package rpc

import (
	"errors"

	"connectrpc.com/connect"

	"github.com/glint-cluster/glint/pkg/ids"
	"github.com/glint-cluster/glint/pkg/resources"
)

// Sentinel errors that domain code wraps; Error maps them to Connect codes.
var (
	ErrNotFound           = errors.New("not found")
	ErrAlreadyExists      = errors.New("already exists")
	ErrInvalidArgument    = errors.New("invalid argument")
	ErrFailedPrecondition = errors.New("failed precondition")
	ErrResourceExhausted  = errors.New("resource exhausted")
	ErrUnavailable        = errors.New("unavailable")
)

// Error turns a domain error into the Connect error a handler returns. It is the
// only place a service's errors get their codes.
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
	case errors.Is(err, ErrNotFound):
		code = connect.CodeNotFound
	case errors.Is(err, ErrAlreadyExists):
		code = connect.CodeAlreadyExists
	case errors.Is(err, ErrInvalidArgument), errors.Is(err, ids.ErrInvalid), errors.Is(err, resources.ErrInvalidSize):
		code = connect.CodeInvalidArgument
	case errors.Is(err, ErrFailedPrecondition):
		code = connect.CodeFailedPrecondition
	case errors.Is(err, ErrResourceExhausted):
		code = connect.CodeResourceExhausted
	case errors.Is(err, ErrUnavailable):
		code = connect.CodeUnavailable
	}
	return connect.NewError(code, err)
}
