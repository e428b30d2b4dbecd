package worker

import (
	"context"
	"os"
	"os/exec"
	"testing"
)

func TestReportStepNeedsAStartedProcess(t *testing.T) {
	reported := false
	s := reportStep{running: func(context.Context, *launch) { reported = true }}
	if err := s.Run(context.Background(), &launch{}); err == nil || reported {
		t.Errorf("report without a process: err %v, reported %v", err, reported)
	}
	if err := s.Run(context.Background(), &launch{cmd: &exec.Cmd{Process: &os.Process{Pid: 1}}}); err != nil || !reported {
		t.Errorf("report with a process: err %v, reported %v", err, reported)
	}
}
