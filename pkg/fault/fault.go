// Package fault names the kinds of failure Glint's domain code reports:
// sentinel errors that ids, resources, lifecycle and the services wrap with
// what failed, and that the transport (pkg/rpc) alone maps to status codes.
// It imports nothing of Glint's, so the domain and the transport both stand on
// it without knowing each other.
package fault

import "errors"

// The kinds of failure, each wrapped as fmt.Errorf("launch executor %d: %w", id, fault.ErrNotFound).
var (
	ErrNotFound           = errors.New("not found")
	ErrAlreadyExists      = errors.New("already exists")
	ErrInvalidArgument    = errors.New("invalid argument")
	ErrFailedPrecondition = errors.New("failed precondition")
	ErrResourceExhausted  = errors.New("resource exhausted")
	ErrUnavailable        = errors.New("unavailable")
	// ErrPermissionDenied is a valid caller asking for what is not its
	// own: another submitter's application.
	ErrPermissionDenied = errors.New("permission denied")
)

// New returns a sentinel error of its own, with message msg, that is also of
// kind (errors.Is(err, kind) holds): ids.ErrInvalid is an ErrInvalidArgument
// that reads "invalid id".
func New(kind error, msg string) error { return &kindError{msg: msg, kind: kind} }

type kindError struct {
	msg  string
	kind error
}

func (e *kindError) Error() string        { return e.msg }
func (e *kindError) Is(target error) bool { return target == e.kind }
