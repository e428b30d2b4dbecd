package child

import (
	"os"
	"strconv"
	"time"
)

// ForkedAtEnv is when the worker forked the process, in nanoseconds since
// the Unix epoch: the start of its executor.boot span, which ends when its
// main runs.
const ForkedAtEnv = "GLINT_FORKED_AT"

// ForkedAt is ForkedAtEnv's entry for a process forked at t.
func ForkedAt(t time.Time) string {
	return ForkedAtEnv + "=" + strconv.FormatInt(t.UnixNano(), 10)
}

// Forked is when this process's worker forked it, if it says (ForkedAtEnv).
func Forked() (time.Time, bool) {
	ns, err := strconv.ParseInt(os.Getenv(ForkedAtEnv), 10, 64)
	if err != nil || ns <= 0 {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}
