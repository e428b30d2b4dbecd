// Package ids makes and checks the identifiers Glint shares with Spark:
// app-YYYYMMDDHHMMSS-NNNN, driver-YYYYMMDDHHMMSS-NNNN and
// worker-YYYYMMDDHHMMSS-HOST-PORT. Every id that arrives from the network is
// checked here before it names a file or directory.
package ids

import (
	"fmt"
	"github.com/glint-cluster/glint/pkg/fault"
	"regexp"
	"strings"
	"time"
)

// ErrInvalid is returned (wrapped) for an id that does not have its expected
// form; it is a fault.ErrInvalidArgument.
var ErrInvalid = fault.New(fault.ErrInvalidArgument, "invalid id")

const stamp = "20060102150405"

// MaxLen is the longest id: a worker id with a 253-character host name.
const MaxLen = 300

var (
	appPattern    = regexp.MustCompile(`^app-\d{14}-\d{4,}$`)
	driverPattern = regexp.MustCompile(`^driver-\d{14}-\d{4,}$`)
	workerPattern = regexp.MustCompile(`^worker-\d{14}-[A-Za-z0-9._:-]+-\d{1,5}$`)
)

// App returns the id of the n-th application registered at t.
func App(t time.Time, n int) string {
	return fmt.Sprintf("app-%s-%04d", t.UTC().Format(stamp), n)
}

// Driver returns the id of the n-th driver submitted at t.
func Driver(t time.Time, n int) string {
	return fmt.Sprintf("driver-%s-%04d", t.UTC().Format(stamp), n)
}

// Worker returns the id of a worker started at t that listens on host:port.
func Worker(t time.Time, host string, port int) string {
	return fmt.Sprintf("worker-%s-%s-%d", t.UTC().Format(stamp), host, port)
}

// ValidateApp checks an application id.
func ValidateApp(id string) error { return validate("application", appPattern, id) }

// ValidateDriver checks a driver id.
func ValidateDriver(id string) error { return validate("driver", driverPattern, id) }

// ValidateWorker checks a worker id.
func ValidateWorker(id string) error { return validate("worker", workerPattern, id) }

// ValidateExecutor checks an executor id: a non-negative integer within its application.
func ValidateExecutor(id int32) error {
	if id < 0 {
		return fmt.Errorf("executor id %d: %w: must not be negative", id, ErrInvalid)
	}
	return nil
}

func validate(kind string, pattern *regexp.Regexp, id string) error {
	if len(id) > MaxLen {
		return fmt.Errorf("%s id of %d bytes: %w: the limit is %d", kind, len(id), ErrInvalid, MaxLen)
	}
	if !pattern.MatchString(id) || strings.Contains(id, "..") {
		return fmt.Errorf("%s id %.100q: %w", kind, id, ErrInvalid)
	}
	return nil
}
