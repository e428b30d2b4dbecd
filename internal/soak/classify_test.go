package soak

import (
	"strings"
	"testing"
)

func TestClassifyNamesEachCause(t *testing.T) {
	pi := Job{Name: "pi", Deploy: DeployClient, App: "pi", Want: []string{"Pi is roughly 3.141592"}}
	missing := Job{Name: "missing", Deploy: DeployClient, App: "wordcount", Fails: "wordcount: open /x: no such file or directory"}
	clusterMissing := Job{Name: "cluster-missing", Deploy: DeployCluster, App: "wordcount", Fails: missing.Fails}
	clusterPi := Job{Name: "cluster-pi", Deploy: DeployCluster, App: "pi", Want: pi.Want}
	supervisedPi := Job{Name: "cluster-supervise-pi", Deploy: DeployCluster, Supervise: true, App: "pi", Want: pi.Want}
	right := SplitOutput("Pi is roughly 3.141592\n", false)
	for _, c := range []struct {
		name string
		job  Job
		res  Result
		want Cause
	}{
		{"the right answer", pi, Result{Succeeded: true, Outputs: right}, CauseOK},
		{"another answer", pi, Result{Succeeded: true, Outputs: SplitOutput("Pi is roughly 3.0\n", false)}, CauseWrongAnswer},
		{"no answer", pi, Result{Succeeded: true}, CauseWrongAnswer},
		{"the answer twice", pi, Result{Succeeded: true, Outputs: SplitOutput("Pi is roughly 3.141592\nPi is roughly 3.141592\n", false)}, CauseWrongAnswer},
		{"its own failure", missing, Result{ExitCode: 1, Stderr: "glint: application missing (app-1): wordcount: open /x: no such file or directory\n"}, CauseOwn},
		{"its own failure, in the driver's log", missing, Result{ExitCode: 1, DriverState: "FAILED", DriverStderr: "glint: wordcount: open /x: no such file or directory\n"}, CauseOwn},
		{"its own failure, its application FAILED after its driver unregistered it", clusterMissing, Result{ExitCode: 1, DriverState: "FAILED", DriverMessage: "exited with code 1",
			Stderr:       "driver driver-1 ended FAILED: exited with code 1\n",
			DriverStderr: "glint: wordcount: open /x: no such file or directory\n"}, CauseOwn},
		{"a driver whose application the master ended with it", pi, Result{ExitCode: 1,
			Stderr: "glint: master removed application app-1: its driver driver-1 ended ERROR: its worker w could not be reached"}, CauseDriverLost},
		{"a success meant to fail", missing, Result{Succeeded: true}, CauseWrongAnswer},
		{"a failure meant, for another reason", missing, Result{ExitCode: 1, Stderr: "glint: register application: all masters are unresponsive after 3 rounds"}, CauseClientGave},
		{"hung", pi, Result{TimedOut: true, Stderr: "glint: context canceled"}, CauseHung},
		{"hung, though meant to fail", missing, Result{TimedOut: true, Stderr: "wordcount: open /x: no such file or directory"}, CauseHung},
		{"a task failure", pi, Result{ExitCode: 1, Stderr: "glint: run sample: task 3 of sample failed 1 times, most recently: executor 2 lost: unavailable"}, CauseTaskFailed},
		{"a driver found unreachable", pi, Result{ExitCode: 1, Stderr: "glint: master removed application app-1: driver at http://x unreachable for 7s"}, CauseDriverLost},
		{"a cluster driver whose worker was lost", pi, Result{ExitCode: 1, DriverState: "ERROR", DriverMessage: "its worker was lost and it could not be relaunched"}, CauseDriverLost},
		{"a driver the master could not launch", pi, Result{ExitCode: 1, Stderr: "driver driver-1: launch driver on worker w: unavailable: dial tcp: connection refused",
			DriverState: "ERROR", DriverMessage: "launch driver on worker w: unavailable: dial tcp: connection refused"}, CauseLaunch},
		{"a driver whose worker did not come back", pi, Result{ExitCode: 1, DriverState: "ERROR", DriverMessage: "its worker w did not re-register while the master recovered"}, CauseDriverLost},
		{"a driver whose worker timed out", pi, Result{ExitCode: 1, DriverState: "ERROR", DriverMessage: "worker w lost: no heartbeat in 6.3s"}, CauseDriverLost},
		{"an unsupervised cluster driver whose worker it ran on was lost", clusterPi, Result{ExitCode: 1, DriverState: "ERROR", DriverMessage: "worker w lost: no heartbeat in 6.3s"}, CauseUnsupervised},
		{"an unsupervised cluster driver whose worker did not come back to a recovering master", clusterPi, Result{ExitCode: 1, DriverState: "ERROR", DriverMessage: "its worker w did not re-register while the master recovered"}, CauseUnsupervised},
		{"a supervised cluster driver whose worker was lost", supervisedPi, Result{ExitCode: 1, DriverState: "ERROR", DriverMessage: "worker w lost: no heartbeat in 6.3s"}, CauseDriverLost},
		{"an unsupervised cluster driver lost otherwise", clusterPi, Result{ExitCode: 1, DriverState: "ERROR", DriverMessage: "its application ended ERROR: unreachable for 30s"}, CauseDriverLost},
		{"an application removed", pi, Result{ExitCode: 1, Stderr: "glint: wait for executors: master removed application app-1: 10 executors failed"}, CauseAppRemoved},
		{"a driver refused", pi, Result{ExitCode: 1, DriverStderr: "glint: register application with master http://m: rejected: unauthenticated: the bearer token is not one this process accepts"}, CauseRefused},
		{"a client that gave up", pi, Result{ExitCode: 1, Stderr: "glint: submit driver to http://m: unavailable: dial tcp: connect: connection refused"}, CauseClientGave},
		{"anything else", pi, Result{ExitCode: 2, Stderr: "panic: something"}, CauseOther},
	} {
		got, detail := Classify(c.job, c.res)
		if got != c.want {
			t.Errorf("%s: %q (%s), want %q", c.name, got, detail, c.want)
		}
		if got.Own() != (c.want == CauseOK || c.want == CauseOwn || c.want == CauseUnsupervised) {
			t.Errorf("%s: %q.Own() = %v", c.name, got, got.Own())
		}
	}
}

func TestExcerptKeepsTheErrorsOnceAndDropsTheRest(t *testing.T) {
	text := "Launch command: \"glint\" \"driver\"\n========================================\n\n" +
		`{"level":"INFO","msg":"registered executor"}` + "\n" +
		"driver driver-1 is RUNNING worker-1, elapsed 3s\n" +
		"glint: rejected: unauthenticated\nglint: rejected: unauthenticated\n" +
		`{"level":"ERROR","msg":"lost"}` + "\n"
	got := excerpt(text)
	want := `glint: rejected: unauthenticated (×2) | {"level":"ERROR","msg":"lost"}`
	if got != want {
		t.Fatalf("excerpt = %q, want %q", got, want)
	}
	if long := excerpt(strings.Repeat("x", 1000)); len(long) > 610 {
		t.Fatalf("excerpt of 1000 bytes is %d long", len(long))
	}
}
