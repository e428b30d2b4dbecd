package driver

import (
	"cmp"
	"slices"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
)

// Progress is how far an application has come, as `glint submit --wait`
// shows it.
type Progress struct {
	// Executors is how many executors the master gave the application,
	// Registered how many of them registered with the driver, ended ones
	// included.
	Executors, Registered int
	// Tasks is every task the application asked to run so far, TasksDone
	// those that finished.
	Tasks, TasksDone int
}

// Progress returns the application's progress now.
func (d *Driver) Progress() Progress {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.progressLocked()
}

func (d *Driver) progressLocked() Progress {
	p := Progress{Tasks: d.tasks, TasksDone: d.tasksDone}
	for _, e := range d.executors {
		p.Executors++
		if e.registered {
			p.Registered++
		}
	}
	return p
}

// progressProto is GetProgress's answer: Progress, the recent task sets, and
// what each executor ran.
func (d *Driver) progressProto() *driverv1.GetProgressResponse {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.progressLocked()
	resp := &driverv1.GetProgressResponse{
		Executors: int32(p.Executors), Registered: int32(p.Registered), Tasks: int32(p.Tasks), TasksDone: int32(p.TasksDone)}
	running := map[*taskSet]int32{}
	for _, rt := range d.running {
		running[rt.set]++
	}
	for _, ts := range d.history {
		n := int32(len(ts.inputs))
		set := &driverv1.TaskSetProgress{
			Id: ts.id, Task: ts.task, Tasks: n, Succeeded: n - int32(ts.remaining), Running: running[ts],
			FailedAttempts: int32(ts.failedAttempts), Failures: slices.Clone(ts.lastFailures),
			StartedAt: timestamppb.New(ts.started), EndedAt: stamp(ts.stopped), TaskTime: durationpb.New(ts.ran),
		}
		if ts.err != nil {
			set.Error = clipFailure(ts.err.Error())
		}
		resp.TaskSets = append(resp.TaskSets, set)
	}
	for _, e := range d.executors {
		resp.ExecutorTasks = append(resp.ExecutorTasks, &driverv1.ExecutorTasks{
			ExecutorId: e.id, TasksDone: e.tasksDone, TasksFailed: e.tasksFailed, TaskTime: durationpb.New(e.taskTime)})
	}
	slices.SortFunc(resp.ExecutorTasks, func(a, b *driverv1.ExecutorTasks) int { return cmp.Compare(a.GetExecutorId(), b.GetExecutorId()) })
	return resp
}
