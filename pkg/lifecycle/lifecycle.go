// Package lifecycle holds what the services share about the cluster model's
// states: tables of allowed transitions, and the names users see (ALIVE,
// RUNNING, …) for the API's enum values.
package lifecycle

import (
	"fmt"
	"slices"
	"strings"

	"github.com/glint-cluster/glint/pkg/rpc"
)

// Transitions lists, for each state, the states it may move to. A state
// missing from the table is final.
type Transitions[S comparable] map[S][]S

// Check returns an error wrapping rpc.ErrFailedPrecondition unless what may
// move from from to to.
func (t Transitions[S]) Check(what string, from, to S) error {
	if slices.Contains(t[from], to) {
		return nil
	}
	return fmt.Errorf("%s state %v → %v: %w", what, Name(from), Name(to), rpc.ErrFailedPrecondition)
}

// Label is a state as a Prometheus label value: WORKER_STATE_ALIVE → alive.
func Label(state any) string { return strings.ToLower(Name(state)) }

// Name strips an enum value's type prefix: WORKER_STATE_ALIVE → ALIVE,
// EXECUTOR_STATE_RUNNING → RUNNING.
func Name(v any) string {
	name := fmt.Sprint(v)
	for _, prefix := range []string{"WORKER_STATE_", "APPLICATION_STATE_", "EXECUTOR_STATE_", "DRIVER_STATE_", "TASK_STATE_"} {
		if rest, ok := strings.CutPrefix(name, prefix); ok {
			return rest
		}
	}
	return name
}
