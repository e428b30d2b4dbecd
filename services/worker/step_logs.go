package worker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/glint-cluster/glint/pkg/lifecycle"
)

// logsStep opens the process's stdout and stderr files in its work directory
// and writes to both the command it is about to run, secrets hidden, as Spark
// writes "Spark Executor Command: …" (redacted) before an executor's output.
type logsStep struct{}

// Name is "logs".
func (logsStep) Name() string { return lifecycle.StepLogs }

// Run opens <dir>/stdout and <dir>/stderr for appending (a restarted driver
// adds to them), unless the workdir step brought them with a claimed
// process's directory, and writes the header.
func (logsStep) Run(_ context.Context, l *launch) error {
	if l.stdout == nil {
		var err error
		if l.stdout, l.stderr, err = openLogs(l.dir); err != nil {
			return err
		}
	}
	header := commandHeader(l.redaction.Args(l.argv))
	for _, f := range []*os.File{l.stdout, l.stderr} {
		if _, err := f.WriteString(header); err != nil {
			return err
		}
	}
	return nil
}

// openLogs opens dir's stdout and stderr for appending.
func openLogs(dir string) (stdout, stderr *os.File, err error) {
	stdout, err = openLog(filepath.Join(dir, "stdout"))
	if err != nil {
		return nil, nil, err
	}
	stderr, err = openLog(filepath.Join(dir, "stderr"))
	if err != nil {
		stdout.Close()
		return nil, nil, err
	}
	return stdout, stderr, nil
}

// commandHeader is `Launch command: "arg0" "arg1" …`, a line of 40 '=' and a
// blank line. Arguments are quoted so that each shows as exactly one.
func commandHeader(argv []string) string {
	var b strings.Builder
	b.WriteString("Launch command:")
	for _, arg := range argv {
		b.WriteString(" ")
		b.WriteString(strconv.Quote(arg))
	}
	b.WriteString("\n")
	b.WriteString(strings.Repeat("=", 40))
	b.WriteString("\n\n")
	return b.String()
}

// openLog opens name for appending: a regular file of one link, never
// through a symbolic link nor a FIFO, as name is in a directory the
// process's user owns (a driver restarted reopens what its last run may
// have replaced), which the worker writes as root.
func openLog(name string) (*os.File, error) {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o640)
	if err != nil {
		return nil, err
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG || st.Nlink != 1 {
		f.Close()
		return nil, fmt.Errorf("log %s is not a file of its own (mode %#o, %d links): refused", name, st.Mode, st.Nlink)
	}
	if err := syscall.SetNonblock(int(f.Fd()), false); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
