package driver

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
)

// reportLaunchLocked sends the master the steps of an executor's launch that
// only the driver sees (RetrieveSparkProps, RegisterExecutor, first task), so
// the master's web UI can draw the whole launch (the master has the others).
// It is sent once per executor, when its first task is launched, off the
// caller's goroutine; a failure is only logged.
func (d *Driver) reportLaunchLocked(t Timeline) {
	master, appID := d.master, d.appID
	if master == nil {
		return
	}
	req := &masterv1.ReportExecutorLaunchRequest{
		AppId: appID, ExecutorId: t.ExecutorID,
		PropsRetrievedAt: stamp(t.PropsRetrieved), RegisteredAt: stamp(t.Registered), FirstTaskAt: stamp(t.FirstTask),
		BootedAt: stamp(t.Booted),
	}
	d.toMaster.Post(context.Background(), func(ctx context.Context) {
		if _, err := master.ReportExecutorLaunch(ctx, connect.NewRequest(req)); err != nil {
			d.log.Debug("report executor launch", "app", appID, "executor", t.ExecutorID, "err", err)
		}
	})
}

// stamp is t as a timestamp, nil when t is zero (not reached).
func stamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}
