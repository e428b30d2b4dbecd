package cli

import (
	"bytes"
	"testing"
	"time"
)

func TestProgressLinesElsewhereThanATerminalSayOnlyWhatChanged(t *testing.T) {
	var out bytes.Buffer
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	p := newProgressLine(&out, start)
	p.show(start.Add(time.Second), "tasks 1/2")
	p.show(start.Add(2*time.Second), "tasks 1/2")
	p.show(start.Add(3*time.Second), "tasks 2/2")
	p.end()
	if want := "tasks 1/2, elapsed 1s\ntasks 2/2, elapsed 3s\n"; out.String() != want {
		t.Errorf("progress wrote %q, want %q", out.String(), want)
	}
}
