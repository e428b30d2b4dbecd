package lifecycle

import (
	"errors"
	"testing"

	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/fault"
)

func TestCheckAllowsOnlyListedMoves(t *testing.T) {
	table := Transitions[masterv1.WorkerState]{
		masterv1.WorkerState_WORKER_STATE_ALIVE: {masterv1.WorkerState_WORKER_STATE_DEAD},
	}
	if err := table.Check("worker w", masterv1.WorkerState_WORKER_STATE_ALIVE, masterv1.WorkerState_WORKER_STATE_DEAD); err != nil {
		t.Errorf("listed move refused: %v", err)
	}
	err := table.Check("worker w", masterv1.WorkerState_WORKER_STATE_DEAD, masterv1.WorkerState_WORKER_STATE_ALIVE)
	if !errors.Is(err, fault.ErrFailedPrecondition) || err.Error() != "worker w state DEAD → ALIVE: failed precondition" {
		t.Errorf("move out of a final state: %v", err)
	}
}

func TestNameStripsTheEnumPrefix(t *testing.T) {
	for v, want := range map[any]string{
		masterv1.WorkerState_WORKER_STATE_ALIVE:              "ALIVE",
		masterv1.ApplicationState_APPLICATION_STATE_WAITING:  "WAITING",
		masterv1.ExecutorState_EXECUTOR_STATE_DECOMMISSIONED: "DECOMMISSIONED",
		masterv1.DriverState_DRIVER_STATE_RELAUNCHING:        "RELAUNCHING",
	} {
		if got := Name(v); got != want {
			t.Errorf("Name(%v) = %s, want %s", v, got, want)
		}
	}
}

func TestLabelIsTheLowercaseName(t *testing.T) {
	for v, want := range map[any]string{
		masterv1.WorkerState_WORKER_STATE_DEAD:              "dead",
		masterv1.ApplicationState_APPLICATION_STATE_RUNNING: "running",
		driverv1.TaskState_TASK_STATE_FINISHED:              "finished",
	} {
		if got := Label(v); got != want {
			t.Errorf("Label(%v) = %s, want %s", v, got, want)
		}
	}
}

func TestFinishedStatesAreSparks(t *testing.T) {
	for s, want := range map[masterv1.ExecutorState]bool{
		masterv1.ExecutorState_EXECUTOR_STATE_LAUNCHING: false, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING: false,
		masterv1.ExecutorState_EXECUTOR_STATE_DECOMMISSIONED: false,
		masterv1.ExecutorState_EXECUTOR_STATE_KILLED:         true, masterv1.ExecutorState_EXECUTOR_STATE_FAILED: true,
		masterv1.ExecutorState_EXECUTOR_STATE_LOST: true, masterv1.ExecutorState_EXECUTOR_STATE_EXITED: true,
	} {
		if got := ExecutorFinished(s); got != want {
			t.Errorf("ExecutorFinished(%v) = %v, want %v", s, got, want)
		}
	}
	for s, want := range map[masterv1.DriverState]bool{
		masterv1.DriverState_DRIVER_STATE_SUBMITTED: false, masterv1.DriverState_DRIVER_STATE_RUNNING: false,
		masterv1.DriverState_DRIVER_STATE_FINISHED: true, masterv1.DriverState_DRIVER_STATE_FAILED: true,
		masterv1.DriverState_DRIVER_STATE_KILLED: true, masterv1.DriverState_DRIVER_STATE_ERROR: true,
		masterv1.DriverState_DRIVER_STATE_RELAUNCHING: true,
	} {
		if got := DriverFinished(s); got != want {
			t.Errorf("DriverFinished(%v) = %v, want %v", s, got, want)
		}
	}
}

func TestAnEndIsUnaskedWhenTheExecutorFailedWasLostOrExitedUnclean(t *testing.T) {
	zero, one := int32(0), int32(1)
	for _, tc := range []struct {
		state masterv1.ExecutorState
		exit  *int32
		want  bool
	}{
		{masterv1.ExecutorState_EXECUTOR_STATE_FAILED, &one, true},
		{masterv1.ExecutorState_EXECUTOR_STATE_LOST, nil, true},
		{masterv1.ExecutorState_EXECUTOR_STATE_EXITED, &one, true},
		{masterv1.ExecutorState_EXECUTOR_STATE_EXITED, nil, true},
		{masterv1.ExecutorState_EXECUTOR_STATE_EXITED, &zero, false},
		{masterv1.ExecutorState_EXECUTOR_STATE_KILLED, nil, false},
		{masterv1.ExecutorState_EXECUTOR_STATE_DECOMMISSIONED, nil, false},
		{masterv1.ExecutorState_EXECUTOR_STATE_RUNNING, nil, false},
	} {
		if got := Unasked(tc.state, tc.exit); got != tc.want {
			t.Errorf("Unasked(%v, %v) = %v, want %v", tc.state, tc.exit, got, tc.want)
		}
	}
}

func TestLaunchStepOfNamesTheStepAFailedLaunchSays(t *testing.T) {
	for message, want := range map[string]string{
		`process.start: fork/exec /nope: no such file or directory`:     StepProcessStart,
		`command: exec: "/nope": stat /nope: no such file or directory`: StepCommand,
		`workdir: mkdir /w: permission denied`:                          StepWorkdir,
		`cgroup: mkdir /sys/fs/cgroup/x: permission denied`:             StepCgroup,
		`launch executor on worker w: unavailable`:                      "",
		`exited with code 1`:                                            "",
		``:                                                              "",
	} {
		if got := LaunchStepOf(message); got != want {
			t.Errorf("LaunchStepOf(%q) = %q, want %q", message, got, want)
		}
	}
}
