package worker

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// logsStep opens the process's stdout and stderr files in its work directory
// and writes to both the command it is about to run, secrets hidden, as Spark
// writes "Spark Executor Command: …" (redacted) before an executor's output.
type logsStep struct{}

// Name is "logs".
func (logsStep) Name() string { return "logs" }

// Run opens <dir>/stdout and <dir>/stderr for appending (a restarted driver
// adds to them) and writes the header.
func (logsStep) Run(_ context.Context, l *launch) error {
	header := commandHeader(l.redaction.Args(l.argv))
	stdout, err := openLog(filepath.Join(l.dir, "stdout"), header)
	if err != nil {
		return err
	}
	stderr, err := openLog(filepath.Join(l.dir, "stderr"), header)
	if err != nil {
		stdout.Close()
		return err
	}
	l.stdout, l.stderr = stdout, stderr
	return nil
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

// openLog opens name for appending and writes header to it.
func openLog(name, header string) (*os.File, error) {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return nil, err
	}
	if _, err := f.WriteString(header); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
