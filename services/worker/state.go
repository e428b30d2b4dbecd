package worker

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// transitions lists, for each state, the states it may move to. Every state
// change of an executor or driver this worker runs goes through one of the
// tables below, so their life cycles on the worker are all in this one place.
type transitions[S comparable] map[S][]S

func (t transitions[S]) check(kind string, from, to S) error {
	if slices.Contains(t[from], to) {
		return nil
	}
	return fmt.Errorf("%s state %v → %v: %w", kind, from, to, rpc.ErrFailedPrecondition)
}

// executorTransitions: an executor is LAUNCHING until its process started.
var executorTransitions = transitions[masterv1.ExecutorState]{
	masterv1.ExecutorState_EXECUTOR_STATE_LAUNCHING: {
		masterv1.ExecutorState_EXECUTOR_STATE_RUNNING, masterv1.ExecutorState_EXECUTOR_STATE_KILLED,
		masterv1.ExecutorState_EXECUTOR_STATE_FAILED,
	},
	masterv1.ExecutorState_EXECUTOR_STATE_RUNNING: {
		masterv1.ExecutorState_EXECUTOR_STATE_KILLED, masterv1.ExecutorState_EXECUTOR_STATE_FAILED,
		masterv1.ExecutorState_EXECUTOR_STATE_EXITED,
	},
}

// driverTransitions: a driver is SUBMITTED until its process started, and
// RELAUNCHING while a supervised driver waits to be restarted.
var driverTransitions = transitions[masterv1.DriverState]{
	masterv1.DriverState_DRIVER_STATE_SUBMITTED: {
		masterv1.DriverState_DRIVER_STATE_RUNNING, masterv1.DriverState_DRIVER_STATE_KILLED,
		masterv1.DriverState_DRIVER_STATE_ERROR,
	},
	masterv1.DriverState_DRIVER_STATE_RUNNING: {
		masterv1.DriverState_DRIVER_STATE_FINISHED, masterv1.DriverState_DRIVER_STATE_FAILED,
		masterv1.DriverState_DRIVER_STATE_KILLED, masterv1.DriverState_DRIVER_STATE_RELAUNCHING,
	},
	masterv1.DriverState_DRIVER_STATE_RELAUNCHING: {
		masterv1.DriverState_DRIVER_STATE_RUNNING, masterv1.DriverState_DRIVER_STATE_KILLED,
		masterv1.DriverState_DRIVER_STATE_ERROR,
	},
}

// Why a process was killed on request; the reason starts its final message.
var (
	errKilledByMaster  = errors.New("killed at the master's request")
	errAppFinished     = errors.New("application finished")
	errShutdown        = errors.New("worker shutting down")
	errUnknownToMaster = errors.New("unknown to the master after the worker registered again")
)

// stateName strips an enum value's type prefix: EXECUTOR_STATE_RUNNING → RUNNING.
func stateName(v fmt.Stringer) string {
	name := v.String()
	for _, prefix := range []string{"EXECUTOR_STATE_", "DRIVER_STATE_"} {
		if rest, ok := strings.CutPrefix(name, prefix); ok {
			return rest
		}
	}
	return name
}
