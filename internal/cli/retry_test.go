package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/glint-cluster/glint/internal/process"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	"github.com/glint-cluster/glint/pkg/app"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/rpc/rpctest"
)

// flakyMaster stands in for a master that fails: each call takes the next
// of its faults (nil: answer) and, when they are used up, is answered. A
// fault errStall holds the call until the client gives up on it. It records
// the calls and the submission ids it was sent.
type flakyMaster struct {
	masterv1connect.UnimplementedMasterServiceHandler

	mu          sync.Mutex
	faults      []error
	calls       int
	submissions []string
	// drivers are DriverStatus's answers in turn; the last one stays.
	drivers []*masterv1.DriverInfo
	// asked are the driver ids DriverStatus was asked for.
	asked []string
}

// errStall is the fault of a master that takes a call and never answers (a
// stopped process).
var errStall = errors.New("stall")

func (m *flakyMaster) fault(ctx context.Context) error {
	m.mu.Lock()
	m.calls++
	var err error
	if len(m.faults) > 0 {
		err, m.faults = m.faults[0], m.faults[1:]
	}
	m.mu.Unlock()
	if err == errStall {
		<-ctx.Done()
		return connect.NewError(connect.CodeUnavailable, ctx.Err())
	}
	return err
}

func (m *flakyMaster) callCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls
}

func (m *flakyMaster) GetClusterState(ctx context.Context, _ *connect.Request[masterv1.GetClusterStateRequest]) (*connect.Response[masterv1.GetClusterStateResponse], error) {
	if err := m.fault(ctx); err != nil {
		return nil, err
	}
	return connect.NewResponse(&masterv1.GetClusterStateResponse{MasterUrl: "http://master:7077", Status: "ALIVE"}), nil
}

func (m *flakyMaster) KillDriver(ctx context.Context, _ *connect.Request[masterv1.KillDriverRequest]) (*connect.Response[masterv1.KillDriverResponse], error) {
	if err := m.fault(ctx); err != nil {
		return nil, err
	}
	return connect.NewResponse(&masterv1.KillDriverResponse{}), nil
}

func (m *flakyMaster) SubmitDriver(ctx context.Context, req *connect.Request[masterv1.SubmitDriverRequest]) (*connect.Response[masterv1.SubmitDriverResponse], error) {
	m.mu.Lock()
	m.submissions = append(m.submissions, req.Msg.GetSubmissionId())
	m.mu.Unlock()
	if err := m.fault(ctx); err != nil {
		return nil, err
	}
	return connect.NewResponse(&masterv1.SubmitDriverResponse{DriverId: "driver-20261129140000-0000"}), nil
}

func (m *flakyMaster) DriverStatus(ctx context.Context, req *connect.Request[masterv1.DriverStatusRequest]) (*connect.Response[masterv1.DriverStatusResponse], error) {
	if err := m.fault(ctx); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.asked = append(m.asked, req.Msg.GetDriverId())
	d := m.drivers[0]
	if len(m.drivers) > 1 {
		m.drivers = m.drivers[1:]
	}
	return connect.NewResponse(&masterv1.DriverStatusResponse{Driver: d}), nil
}

// serveMaster serves m on a loopback port until the test ends.
func serveMaster(t *testing.T, m *flakyMaster) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(masterv1connect.NewMasterServiceHandler(m))
	return rpctest.Serve(t, mux)
}

// unavailable is a standby's answer.
func unavailable() error {
	return connect.NewError(connect.CodeUnavailable, errors.New("this master is a standby"))
}

// syncBuffer is a buffer that is safe to write while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// glint runs the client command made by mk with args, as the glint command
// line would, and returns its error, stdout and stderr.
func glint(t *testing.T, mk func(*globals) *cobra.Command, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	apps, err := app.NewRegistry(&app.App{Name: "noop", Run: func(context.Context, app.Context, []string) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut syncBuffer
	cmd := mk(&globals{&process.Globals{Apps: apps, Stdout: &out, Stderr: &errOut, LogLevel: "error"}})
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err = cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// TestACallIsRetriedWhileTheMastersAreUnavailable: a call answered
// Unavailable (a standby, a recovering master), DeadlineExceeded or Aborted,
// or held until it times out (a stopped master), is sent again until a
// master answers, and the user is told once that it is retried.
func TestACallIsRetriedWhileTheMastersAreUnavailable(t *testing.T) {
	m := &flakyMaster{faults: []error{unavailable(), connect.NewError(connect.CodeDeadlineExceeded, errors.New("slow")),
		connect.NewError(connect.CodeAborted, errors.New("aborted")), errStall, unavailable()}}
	client, err := newMasterClient([]string{serveMaster(t, m)}, "", retrier{timeout: time.Minute, attempt: 200 * time.Millisecond, notify: &syncBuffer{}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.GetClusterState(context.Background(), connect.NewRequest(&masterv1.GetClusterStateRequest{})); err != nil {
		t.Fatalf("a call the master answered after five faults: %v", err)
	}
	if m.callCount() != 6 {
		t.Errorf("the master had %d calls, want 6", m.callCount())
	}

	m = &flakyMaster{faults: []error{unavailable(), unavailable()}}
	out, errOut, err := glint(t, newStatusCommand, "--master", serveMaster(t, m))
	if err != nil || !strings.Contains(out, "Master http://master:7077 (ALIVE)") {
		t.Fatalf("glint status of a master unavailable twice: %v\n%s", err, out)
	}
	if strings.Count(errOut, "retrying for up to 1m0s (--retry-timeout)") != 1 || !strings.Contains(errOut, "GetClusterState: unavailable: this master is a standby") {
		t.Errorf("stderr %q: want one line saying what failed and that it is retried", errOut)
	}
}

// TestARealRefusalIsNotRetried: an answer that says the call is wrong, not
// that the master cannot take it now, is final at once.
func TestARealRefusalIsNotRetried(t *testing.T) {
	for _, code := range []connect.Code{connect.CodeInvalidArgument, connect.CodeNotFound, connect.CodeUnauthenticated,
		connect.CodePermissionDenied, connect.CodeFailedPrecondition, connect.CodeResourceExhausted, connect.CodeInternal} {
		m := &flakyMaster{faults: []error{connect.NewError(code, errors.New("refused"))}}
		_, _, err := glint(t, newKillCommand, "--master", serveMaster(t, m), "driver-20261129140000-0000")
		if connect.CodeOf(err) != code || m.callCount() != 1 {
			t.Errorf("a kill refused %s: %v after %d calls, want it returned after one", code, err, m.callCount())
		}
	}
}

// TestACallGivesUpAtItsDeadlineSayingHowLongAndWhy: a call that keeps
// failing for a reason that passes fails once --retry-timeout passed, saying
// how long it tried and the last error.
func TestACallGivesUpAtItsDeadlineSayingHowLongAndWhy(t *testing.T) {
	m := &flakyMaster{}
	for range 1000 {
		m.faults = append(m.faults, unavailable())
	}
	_, _, err := glint(t, newKillCommand, "--master", serveMaster(t, m), "--retry-timeout", "300ms", "driver-20261129140000-0000")
	if err == nil || !strings.Contains(err.Error(), "kill driver-20261129140000-0000: tried for ") ||
		!strings.Contains(err.Error(), "(--retry-timeout 300ms), the last time: unavailable: this master is a standby") {
		t.Errorf("a kill that stays unavailable: %v, want how long it tried and the last error", err)
	}
	if m.callCount() < 2 {
		t.Errorf("the master had %d calls, want retries", m.callCount())
	}

	m = &flakyMaster{faults: []error{unavailable()}}
	if _, _, err := glint(t, newKillCommand, "--master", serveMaster(t, m), "--retry-timeout", "0", "driver-20261129140000-0000"); connect.CodeOf(err) != connect.CodeUnavailable ||
		strings.Contains(err.Error(), "tried for") || m.callCount() != 1 {
		t.Errorf("--retry-timeout 0: %v after %d calls, want the first error", err, m.callCount())
	}
}

// notifyingWriter is a writer that closes written at its first write.
type notifyingWriter struct {
	once    sync.Once
	written chan struct{}
}

func (w *notifyingWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.written) })
	return len(p), nil
}

// TestAMasterNotYetListeningIsRetriedUntilItIs: a connection refused is
// retried, on through the list, until a master listens.
func TestAMasterNotYetListeningIsRetriedUntilItIs(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	notify := &notifyingWriter{written: make(chan struct{})}
	client, err := newMasterClient([]string{"http://" + addr}, "", retrier{timeout: time.Minute, attempt: time.Minute, notify: notify})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := client.GetClusterState(context.Background(), connect.NewRequest(&masterv1.GetClusterStateRequest{}))
		done <- err
	}()
	<-notify.written
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(masterv1connect.NewMasterServiceHandler(&flakyMaster{}))
	srv := rpc.NewServer(mux)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	if err := <-done; err != nil {
		t.Fatalf("a call to a master that started listening after its first try: %v", err)
	}
}

// TestSubmitWaitFollowsTheDriverThroughFailedCalls: glint submit in cluster
// mode sends every try of its SubmitDriver with one submission id, retries
// the --wait polls that fail, and exits 0 once the driver FINISHED.
func TestSubmitWaitFollowsTheDriverThroughFailedCalls(t *testing.T) {
	running := &masterv1.DriverInfo{State: masterv1.DriverState_DRIVER_STATE_RUNNING, WorkerId: "worker-1"}
	finished := &masterv1.DriverInfo{State: masterv1.DriverState_DRIVER_STATE_FINISHED}
	m := &flakyMaster{faults: []error{unavailable(), unavailable(), nil, unavailable(), nil, nil, unavailable(), unavailable()},
		drivers: []*masterv1.DriverInfo{running, finished}}
	out, errOut, err := glint(t, newSubmitCommand, "--master", serveMaster(t, m), "--deploy-mode", "cluster", "--wait", "noop")
	if err != nil {
		t.Fatalf("submit --wait: %v\n%s", err, errOut)
	}
	if strings.TrimSpace(out) != "driver-20261129140000-0000" {
		t.Errorf("stdout %q, want the driver id", out)
	}
	if len(m.submissions) != 3 || m.submissions[0] == "" || m.submissions[1] != m.submissions[0] || m.submissions[2] != m.submissions[0] {
		t.Errorf("the tries of SubmitDriver carried the submission ids %q, want one id, three times", m.submissions)
	}
	if id := m.submissions[0]; len(id) > 64 || strings.Trim(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
		t.Errorf("submission id %q is not one a master takes", id)
	}
}

// TestSubmitWaitDoesNotRetryWhatOnlyAddsToItsLine: the application's
// executors that --wait shows beside the driver's state are asked once a
// poll, so a master that cannot say them delays nothing.
func TestSubmitWaitDoesNotRetryWhatOnlyAddsToItsLine(t *testing.T) {
	running := &masterv1.DriverInfo{State: masterv1.DriverState_DRIVER_STATE_RUNNING}
	finished := &masterv1.DriverInfo{State: masterv1.DriverState_DRIVER_STATE_FINISHED}
	// SubmitDriver, DriverStatus, GetClusterState (fails), DriverStatus, GetClusterState.
	m := &flakyMaster{faults: []error{nil, nil, unavailable()}, drivers: []*masterv1.DriverInfo{running, finished}}
	if _, errOut, err := glint(t, newSubmitCommand, "--master", serveMaster(t, m), "--deploy-mode", "cluster", "--wait", "noop"); err != nil {
		t.Fatalf("submit --wait: %v\n%s", err, errOut)
	}
	if m.callCount() != 5 {
		t.Errorf("the master had %d calls, want 5: the failed GetClusterState not retried", m.callCount())
	}
}

// TestSubmitWaitSaysHowTheDriverEnded: a driver that ended otherwise than
// FINISHED makes submit --wait exit 1, saying its state and message.
func TestSubmitWaitSaysHowTheDriverEnded(t *testing.T) {
	m := &flakyMaster{drivers: []*masterv1.DriverInfo{{State: masterv1.DriverState_DRIVER_STATE_FAILED, Message: "exit status 3"}}}
	_, errOut, err := glint(t, newSubmitCommand, "--master", serveMaster(t, m), "--deploy-mode", "cluster", "--wait", "noop")
	var exit process.ExitError
	if !errors.As(err, &exit) || exit != 1 || !strings.Contains(errOut, "driver driver-20261129140000-0000 ended FAILED: exit status 3") {
		t.Errorf("submit --wait of a driver that FAILED: %v, stderr %q; want exit 1 and its state and message", err, errOut)
	}
	m = &flakyMaster{faults: []error{nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("driver: not found"))}}
	_, _, err = glint(t, newSubmitCommand, "--master", serveMaster(t, m), "--deploy-mode", "cluster", "--wait", "noop")
	if connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), "no longer knows it") {
		t.Errorf("submit --wait of a driver the master forgot: %v, want NotFound explained", err)
	}
}

// TestSubmitWaitFollowsADriverRelaunchedUnderANewID: a supervised driver
// whose worker was lost ends RELAUNCHING, naming the driver that goes on;
// submit --wait follows that one and exits 0 once it FINISHED.
func TestSubmitWaitFollowsADriverRelaunchedUnderANewID(t *testing.T) {
	next := "driver-20261129140100-0001"
	m := &flakyMaster{drivers: []*masterv1.DriverInfo{
		{State: masterv1.DriverState_DRIVER_STATE_RELAUNCHING, RelaunchedAs: next, Message: "its worker was lost"},
		{State: masterv1.DriverState_DRIVER_STATE_FINISHED},
	}}
	_, errOut, err := glint(t, newSubmitCommand, "--master", serveMaster(t, m), "--deploy-mode", "cluster", "--wait", "noop")
	if err != nil || !strings.Contains(errOut, "relaunched as "+next) {
		t.Fatalf("submit --wait of a relaunched driver: %v, stderr %q; want it followed to its end", err, errOut)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if got := m.asked[len(m.asked)-1]; got != next {
		t.Fatalf("the last status asked was of %s, want %s", got, next)
	}
}

// connKey holds, in a request's context, the connection it came on.
type connKey struct{}

// TestAConnectionBrokenUnderACallIsRetried: a call whose connection closes
// before its answer, or in the middle of it (a master killed), is sent again.
func TestAConnectionBrokenUnderACallIsRetried(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(masterv1connect.NewMasterServiceHandler(&flakyMaster{}))
	var mu sync.Mutex
	cuts := 0
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		cuts++
		n := cuts
		mu.Unlock()
		switch n {
		case 1:
		case 2:
			w.Header().Set("Content-Type", "application/proto")
			w.WriteHeader(http.StatusOK)
			w.Write([]byte{0x0a})
			w.(http.Flusher).Flush()
		default:
			mux.ServeHTTP(w, r)
			return
		}
		r.Context().Value(connKey{}).(net.Conn).Close()
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(h)
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) }
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	client, err := newMasterClient([]string{"http://" + ln.Addr().String()}, "", retrier{timeout: time.Minute, attempt: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.GetClusterState(context.Background(), connect.NewRequest(&masterv1.GetClusterStateRequest{}))
	mu.Lock()
	defer mu.Unlock()
	if err != nil || cuts != 3 {
		t.Fatalf("a call whose connection broke twice: %v after %d tries, want an answer on the third", err, cuts)
	}
}
