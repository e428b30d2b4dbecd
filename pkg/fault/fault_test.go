package fault

import (
	"errors"
	"fmt"
	"testing"
)

func TestNewIsItselfAndItsKind(t *testing.T) {
	invalidID := New(ErrInvalidArgument, "invalid id")
	err := fmt.Errorf("executor id -1: %w: must not be negative", invalidID)
	if !errors.Is(err, invalidID) || !errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrNotFound) {
		t.Errorf("%v: is itself %v, is its kind %v, is another kind %v", err,
			errors.Is(err, invalidID), errors.Is(err, ErrInvalidArgument), errors.Is(err, ErrNotFound))
	}
	if err.Error() != "executor id -1: invalid id: must not be negative" {
		t.Errorf("message %q", err)
	}
}
