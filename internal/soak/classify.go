package soak

import (
	"fmt"
	"regexp"
	"strings"
)

// workerLost is the master's message for a driver that ended with its
// worker, which it had taken (removeWorkerLocked), or which did not come
// back to the master that recovered (completeRecoveryLocked).
var workerLost = regexp.MustCompile(`^(worker \S+ lost: |its worker \S+ did not re-register while the master recovered$)`)

// Cause is what a submission's outcome came from.
type Cause string

const (
	CauseOK  Cause = "ok"
	CauseOwn Cause = "own failure (as meant)"
	// CauseUnsupervised is a cluster-mode driver submitted without
	// --supervise that its worker's loss ended (ERROR, Spark's rule): the
	// job did not ask to survive it. Counted apart, not against the run.
	CauseUnsupervised Cause = "unsupervised driver lost with its worker"
	CauseWrongAnswer  Cause = "wrong answer"
	CauseTaskFailed   Cause = "task failed maxFailures"
	CauseDriverLost   Cause = "driver lost"
	CauseLaunch       Cause = "driver launch failed"
	CauseAppRemoved   Cause = "application removed by master"
	CauseRefused      Cause = "refused by a master"
	CauseClientGave   Cause = "client gave up"
	CauseHung         Cause = "hung past deadline"
	CauseOther        Cause = "failed, cause unclassified"
)

// Own reports whether the outcome is the job's own: its right answer, or
// the failure it was meant to have. Every other cause came from the
// cluster — from a fault the soak injected — and fails the run.
func (c Cause) Own() bool { return c == CauseOK || c == CauseOwn || c == CauseUnsupervised }

// Result is what a submission showed: the client's exit and output and,
// in cluster mode, its driver's (the last of its chain of relaunches) as
// the master and the worker's work dir tell it.
type Result struct {
	// Succeeded: the client exited 0 or, for a supervised driver the client
	// saw relaunched, the last of its chain FINISHED.
	Succeeded bool
	TimedOut  bool
	ExitCode  int
	Stdout    string
	Stderr    string
	// DriverState and DriverMessage are the last driver's final state and
	// message in the master's /json; DriverStderr its stderr in the work dir.
	DriverState   string
	DriverMessage string
	DriverStderr  string
	// Outputs are the application's output: the client's stdout in client
	// mode, the chain's drivers' stdout in cluster mode.
	Outputs []Output
}

// failurePatterns classify a failure by the text of its errors, first
// match first: a task failure's message names what it saw (an executor
// lost, too), and a driver the master could not launch says what the
// worker answered (unavailable, too), so they come before the rest.
var failurePatterns = []struct {
	cause Cause
	texts []string
}{
	{CauseTaskFailed, []string{"times, most recently:"}},
	{CauseLaunch, []string{"launch driver on worker"}},
	{CauseDriverLost, []string{"unreachable for", "worker was lost", "did not re-register", "no heartbeat in", "ended ERROR", "ended RELAUNCHING"}},
	{CauseAppRemoved, []string{"master removed application"}},
	{CauseRefused, []string{"rejected:", "unauthenticated", "permission_denied"}},
	{CauseClientGave, []string{"unavailable", "unresponsive", "connection refused", "deadline_exceeded", "deadline exceeded",
		"driver status of", "submit driver to", "no master", "eof", "connection reset"}},
}

// Classify returns the cause of j's result r, and a line of detail for a
// cause that is not the job's own.
func Classify(j Job, r Result) (Cause, string) {
	text := strings.Join([]string{r.Stderr, r.DriverMessage, r.DriverStderr}, "\n")
	if r.TimedOut {
		return CauseHung, fmt.Sprintf("still running after its deadline; driver %s; errors: %s", r.DriverState, excerpt(text))
	}
	if r.Succeeded {
		if j.Fails != "" {
			return CauseWrongAnswer, fmt.Sprintf("succeeded; want the failure %q", j.Fails)
		}
		if !AnswerIs(r.Outputs, j.Want) {
			return CauseWrongAnswer, fmt.Sprintf("printed %q; want %q", runLines(r.Outputs), j.Want)
		}
		return CauseOK, ""
	}
	if j.Fails != "" && strings.Contains(text, j.Fails) {
		return CauseOwn, ""
	}
	if j.Deploy == DeployCluster && !j.Supervise && r.DriverState == "ERROR" && workerLost.MatchString(r.DriverMessage) {
		return CauseUnsupervised, ""
	}
	detail := fmt.Sprintf("exit %d", r.ExitCode)
	if r.DriverState != "" {
		detail += fmt.Sprintf(", driver %s %q", r.DriverState, r.DriverMessage)
	}
	detail += ": " + excerpt(text)
	lower := strings.ToLower(text)
	for _, p := range failurePatterns {
		for _, t := range p.texts {
			if strings.Contains(lower, strings.ToLower(t)) {
				return p.cause, detail
			}
		}
	}
	return CauseOther, detail
}

func runLines(runs []Output) []string {
	var out []string
	for _, r := range runs {
		out = append(out, r.Lines...)
	}
	return out
}

// excerpt is the text's error lines, shortened: the lines that say what
// failed, each once, without glint submit --wait's progress lines, a
// worker's launch headers and a driver's log lines below WARN.
func excerpt(text string) string {
	var keep []string
	seen := map[string]int{}
	for line := range strings.SplitSeq(text, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "", strings.HasPrefix(line, "Launch command:"), strings.HasPrefix(line, "====="),
			strings.HasPrefix(line, "driver ") && strings.Contains(line, " is ") && strings.Contains(line, "elapsed"),
			strings.HasPrefix(line, "{") && (strings.Contains(line, `"level":"INFO"`) || strings.Contains(line, `"level":"DEBUG"`)):
			continue
		}
		if seen[line]++; seen[line] == 1 {
			keep = append(keep, line)
		}
	}
	for i, line := range keep {
		if n := seen[line]; n > 1 {
			keep[i] = fmt.Sprintf("%s (×%d)", line, n)
		}
	}
	s := strings.Join(keep, " | ")
	if len(s) > 600 {
		s = s[:600] + "…"
	}
	return s
}
