// Package ids makes and checks the identifiers Glint shares with Spark:
// app-YYYYMMDDHHMMSS-NNNN, driver-YYYYMMDDHHMMSS-NNNN and
// worker-YYYYMMDDHHMMSS-HOST-PORT. Every id that arrives from the network is
// checked here before it names a file or directory.
package ids

import (
	"fmt"
	"strings"
	"time"

	"github.com/glint-cluster/glint/pkg/fault"
)

// ErrInvalid is returned (wrapped) for an id that does not have its expected
// form; it is a fault.ErrInvalidArgument.
var ErrInvalid = fault.New(fault.ErrInvalidArgument, "invalid id")

const stamp = "20060102150405"

// MaxLen is the longest id: a worker id with a 253-character host name.
const MaxLen = 300

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
func ValidateApp(id string) error { return validate("application", isApp, id) }

// ValidateDriver checks a driver id.
func ValidateDriver(id string) error { return validate("driver", isDriver, id) }

// ValidateWorker checks a worker id.
func ValidateWorker(id string) error { return validate("worker", isWorker, id) }

// ValidateExecutor checks an executor id: a non-negative integer within its application.
func ValidateExecutor(id int32) error {
	if id < 0 {
		return fmt.Errorf("executor id %d: %w: must not be negative", id, ErrInvalid)
	}
	return nil
}

func validate(kind string, matches func(string) bool, id string) error {
	if len(id) > MaxLen {
		return fmt.Errorf("%s id of %d bytes: %w: the limit is %d", kind, len(id), ErrInvalid, MaxLen)
	}
	if !matches(id) || strings.Contains(id, "..") {
		return fmt.Errorf("%s id %.100q: %w", kind, id, ErrInvalid)
	}
	return nil
}

// The forms, written out rather than as regular expressions compiled at
// package init, which every process — each executor's start — would pay:
// isApp is ^app-\d{14}-\d{4,}$, isDriver ^driver-\d{14}-\d{4,}$, isWorker
// ^worker-\d{14}-[A-Za-z0-9._:-]+-\d{1,5}$ (the tests hold them to those).

func isApp(id string) bool    { return stamped(id, "app-", isSerial) }
func isDriver(id string) bool { return stamped(id, "driver-", isSerial) }
func isWorker(id string) bool { return stamped(id, "worker-", isHostPort) }

// stamped reports whether id is prefix, a 14-digit stamp, "-" and a rest
// that rest accepts.
func stamped(id, prefix string, rest func(string) bool) bool {
	s, ok := strings.CutPrefix(id, prefix)
	return ok && len(s) > len(stamp) && digits(s[:len(stamp)]) && s[len(stamp)] == '-' && rest(s[len(stamp)+1:])
}

// isSerial: at least four digits.
func isSerial(s string) bool { return len(s) >= 4 && digits(s) }

// isHostPort: host characters, "-" and a port of one to five digits. The
// port follows the last "-": a host may hold "-" and digits, a port neither.
func isHostPort(s string) bool {
	i := strings.LastIndexByte(s, '-')
	if i < 1 || len(s)-i-1 < 1 || len(s)-i-1 > 5 || !digits(s[i+1:]) {
		return false
	}
	for _, c := range []byte(s[:i]) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("._:-", c) >= 0) {
			return false
		}
	}
	return true
}

func digits(s string) bool {
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
