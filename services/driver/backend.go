package driver

import "time"

// backend is the driver's CoarseGrainedSchedulerBackend: the executors it
// knows (executors.go) and the task sets it offers their cores
// (tasksets.go). It is embedded in Driver and guarded by the Driver's mu.
// An executor that becomes ready signals offersReady and gets offers; one
// that is removed fails its running tasks, which are queued again.
type backend struct {
	// firstRegistered is when the application's first executor registered.
	firstRegistered time.Time
	executors       map[int32]*executorData
	totalCores      int32 // cores of executors ready for tasks (LaunchedExecutor)
	taskSets        []*taskSet
	running         map[int64]*runningTask
	nextTaskID      int64
	offersReady     chan struct{} // signalled when executors register or cores free up

	// tasks and tasksDone count every task of every set so far (Progress).
	tasks, tasksDone int
	// history is the most recent task sets, running and ended, oldest
	// first (GetProgress); nextSetID numbers them.
	history   []*taskSet
	nextSetID int32
}

func newBackend() backend {
	return backend{
		executors:   map[int32]*executorData{},
		running:     map[int64]*runningTask{},
		offersReady: make(chan struct{}, 1),
	}
}

// signalOffersLocked wakes waitReady: an executor became ready.
func (d *Driver) signalOffersLocked() {
	select {
	case d.offersReady <- struct{}{}:
	default:
	}
}
