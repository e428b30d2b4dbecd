package driver_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	driverv1 "github.com/glint-cluster/glint/pkg/api/glint/driver/v1"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
)

func TestADecommissionedExecutorFinishesItsTasksGetsNoNewOnesAndStops(t *testing.T) {
	// Executor 0 (two cores) runs tasks 0 and 1, each until the test
	// releases it; executor 1 runs whatever it gets at once.
	release := map[string]chan struct{}{"0": make(chan struct{}), "1": make(chan struct{})}
	started := make(chan struct{}, 3)
	var on0, on1 atomic.Int32
	a0 := echoApp(func(ctx context.Context, in []byte) ([]byte, error) {
		on0.Add(1)
		started <- struct{}{}
		if ch, ok := release[string(in)]; ok {
			<-ch
		}
		return in, nil
	})
	a1 := echoApp(func(_ context.Context, in []byte) ([]byte, error) {
		on1.Add(1)
		return in, nil
	})
	d := startDriver(t, a0, map[string]string{"spark.task.maxFailures": "1"})
	wait0 := startExecutor(t, d, a0, 0, 2)
	type result struct {
		out [][]byte
		err error
	}
	res := make(chan result, 1)
	go func() {
		out, err := d.RunTasks(context.Background(), "task", inputs(3))
		res <- result{out, err}
	}()
	<-started
	<-started
	client := asMaster(d)
	if _, err := client.ExecutorUpdated(context.Background(), connect.NewRequest(&driverv1.ExecutorUpdatedRequest{
		AppId: d.AppID(), ExecutorId: 0, State: masterv1.ExecutorState_EXECUTOR_STATE_DECOMMISSIONED, Message: "worker decommissioned",
	})); err != nil {
		t.Fatal(err)
	}
	// Task 1 ends: executor 0 has a free core, but task 2 waits for the
	// replacement, executor 1.
	close(release["1"])
	startExecutor(t, d, a1, 1, 1)
	close(release["0"])
	select {
	case r := <-res:
		if r.err != nil || string(r.out[2]) != "2" {
			t.Fatalf("got %q, %v; want every task's result", r.out, r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the job did not end")
	}
	if on0.Load() != 2 || on1.Load() != 1 {
		t.Errorf("executor 0 ran %d tasks and executor 1 %d; want 2 (those it had when decommissioned) and 1", on0.Load(), on1.Load())
	}
	// Idle, the decommissioned executor is told to stop.
	stopped := make(chan error, 1)
	go func() { stopped <- wait0() }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Errorf("executor 0 ended with %v, want a clean stop", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("the decommissioned executor was not stopped once idle")
	}
}
