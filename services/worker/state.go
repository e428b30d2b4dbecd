package worker

import (
	"errors"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/lifecycle"
)

// The tables below list every state change of an executor or driver this
// worker runs, so their life cycles on the worker are all in one place.

// executorTransitions: an executor is LAUNCHING until its process started.
var executorTransitions = lifecycle.Transitions[masterv1.ExecutorState]{
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
// RESTARTING while a supervised driver waits to be restarted — after it
// failed, or its launch did (RELAUNCHING is the master's: a driver
// relaunched elsewhere under a new id).
var driverTransitions = lifecycle.Transitions[masterv1.DriverState]{
	masterv1.DriverState_DRIVER_STATE_SUBMITTED: {
		masterv1.DriverState_DRIVER_STATE_RUNNING, masterv1.DriverState_DRIVER_STATE_KILLED,
		masterv1.DriverState_DRIVER_STATE_ERROR, masterv1.DriverState_DRIVER_STATE_RESTARTING,
	},
	masterv1.DriverState_DRIVER_STATE_RUNNING: {
		masterv1.DriverState_DRIVER_STATE_FINISHED, masterv1.DriverState_DRIVER_STATE_FAILED,
		masterv1.DriverState_DRIVER_STATE_KILLED, masterv1.DriverState_DRIVER_STATE_RESTARTING,
	},
	masterv1.DriverState_DRIVER_STATE_RESTARTING: {
		masterv1.DriverState_DRIVER_STATE_RUNNING, masterv1.DriverState_DRIVER_STATE_KILLED,
		masterv1.DriverState_DRIVER_STATE_ERROR,
	},
}

// executorKind: an executor's runner moves LAUNCHING → RUNNING → EXITED,
// FAILED or KILLED; one that cannot start is FAILED.
var executorKind = kind[masterv1.ExecutorState]{
	noun:         "executor",
	transitions:  executorTransitions,
	initial:      masterv1.ExecutorState_EXECUTOR_STATE_LAUNCHING,
	running:      masterv1.ExecutorState_EXECUTOR_STATE_RUNNING,
	killed:       masterv1.ExecutorState_EXECUTOR_STATE_KILLED,
	launchFailed: masterv1.ExecutorState_EXECUTOR_STATE_FAILED,
	exited:       masterv1.ExecutorState_EXECUTOR_STATE_EXITED,
	failed:       masterv1.ExecutorState_EXECUTOR_STATE_FAILED,
}

// driverKind: a driver's runner moves SUBMITTED → RUNNING → FINISHED, FAILED
// or KILLED, through RESTARTING when supervised; one that cannot start is
// ERROR.
var driverKind = kind[masterv1.DriverState]{
	noun:         "driver",
	transitions:  driverTransitions,
	initial:      masterv1.DriverState_DRIVER_STATE_SUBMITTED,
	running:      masterv1.DriverState_DRIVER_STATE_RUNNING,
	restarting:   masterv1.DriverState_DRIVER_STATE_RESTARTING,
	killed:       masterv1.DriverState_DRIVER_STATE_KILLED,
	launchFailed: masterv1.DriverState_DRIVER_STATE_ERROR,
	exited:       masterv1.DriverState_DRIVER_STATE_FINISHED,
	failed:       masterv1.DriverState_DRIVER_STATE_FAILED,
}

// Why a process was killed on request; the reason starts its final message.
var (
	errKilledByMaster  = errors.New("killed at the master's request")
	errAppFinished     = errors.New("application finished")
	errShutdown        = errors.New("worker shutting down")
	errUnknownToMaster = errors.New("unknown to the master")
)
