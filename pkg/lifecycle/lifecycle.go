// Package lifecycle holds what the services share about the cluster model's
// states: tables of allowed transitions, which states are final, and the
// names users see (ALIVE, RUNNING, …) for the API's enum values.
package lifecycle

import (
	"fmt"
	"slices"
	"strings"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/fault"
)

// Transitions lists, for each state, the states it may move to. A state
// missing from the table is final.
type Transitions[S comparable] map[S][]S

// Check returns an error wrapping fault.ErrFailedPrecondition unless what may
// move from from to to.
func (t Transitions[S]) Check(what string, from, to S) error {
	if slices.Contains(t[from], to) {
		return nil
	}
	return fmt.Errorf("%s state %v → %v: %w", what, Name(from), Name(to), fault.ErrFailedPrecondition)
}

// ExecutorFinished is Spark's ExecutorState.isFinished: an executor in this
// state runs no more (KILLED, FAILED, LOST or EXITED).
func ExecutorFinished(s masterv1.ExecutorState) bool {
	switch s {
	case masterv1.ExecutorState_EXECUTOR_STATE_KILLED, masterv1.ExecutorState_EXECUTOR_STATE_FAILED,
		masterv1.ExecutorState_EXECUTOR_STATE_LOST, masterv1.ExecutorState_EXECUTOR_STATE_EXITED:
		return true
	}
	return false
}

// Unasked is whether an executor in state s (exit, its exit status if it
// has one) ended without being asked to: it FAILED, was LOST, or EXITED on
// its own but for a clean exit. A KILLED executor was killed on purpose —
// by its driver, its application's end or a person — and a DECOMMISSIONED
// one left with its worker.
func Unasked(s masterv1.ExecutorState, exit *int32) bool {
	switch s {
	case masterv1.ExecutorState_EXECUTOR_STATE_FAILED, masterv1.ExecutorState_EXECUTOR_STATE_LOST:
		return true
	case masterv1.ExecutorState_EXECUTOR_STATE_EXITED:
		return exit == nil || *exit != 0
	}
	return false
}

// DriverFinished reports whether a driver runs no more under its id:
// FINISHED, FAILED, KILLED, ERROR, or RELAUNCHING (the master relaunched it
// under a new id after its worker was lost).
func DriverFinished(s masterv1.DriverState) bool {
	switch s {
	case masterv1.DriverState_DRIVER_STATE_FINISHED, masterv1.DriverState_DRIVER_STATE_FAILED,
		masterv1.DriverState_DRIVER_STATE_KILLED, masterv1.DriverState_DRIVER_STATE_ERROR,
		masterv1.DriverState_DRIVER_STATE_RELAUNCHING:
		return true
	}
	return false
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

// The steps of a worker's launch of an executor or driver, in order (a
// prestarted process is claimed and handed over in place of the start):
// each step's name is its span name, and a launch that fails says which step
// failed as "<step>: <error>".
const (
	StepCommand      = "command"
	StepClaim        = "claim"
	StepCgroup       = "cgroup"
	StepHandover     = "handover"
	StepWorkdir      = "workdir"
	StepLogs         = "logs"
	StepProcessStart = "process.start"
	StepReport       = "report"
)

// LaunchSteps are the launch steps.
var LaunchSteps = []string{StepCommand, StepClaim, StepCgroup, StepHandover, StepWorkdir, StepLogs, StepProcessStart, StepReport}

// LaunchStepOf is the launch step a failed launch's message names, or "".
func LaunchStepOf(message string) string {
	step, _, ok := strings.Cut(message, ": ")
	if ok && slices.Contains(LaunchSteps, step) {
		return step
	}
	return ""
}
