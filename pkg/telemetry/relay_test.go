package telemetry

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/glint-cluster/glint/pkg/telemetry/otlp"
)

// relayChildEnv makes this test binary the started process of
// TestAStartedProcessSendsItsSpansThroughTheProcessThatStartedIt.
const relayChildEnv = "GLINT_TEST_RELAY_CHILD"

// TestRelayChild is the started process: it traces one span, as an executor
// would, and exits; run on its own it does nothing. With tracing off
// ("untraced") it traces nothing and must have closed the relay.
func TestRelayChild(t *testing.T) {
	mode := os.Getenv(relayChildEnv)
	if mode == "" {
		return
	}
	if mode == "untraced" {
		os.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	}
	fd := os.Getenv(RelayFDEnv)
	tp, shutdown, err := NewTracerProvider(context.Background(), ServiceExecutor, nil)
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv(RelayFDEnv) != "" {
		t.Errorf("%s is still set: what the process starts would inherit it", RelayFDEnv)
	}
	n, _ := strconv.Atoi(fd)
	flags, err := unix.FcntlInt(uintptr(n), unix.F_GETFD, 0)
	switch {
	case mode == "untraced" && err == nil:
		t.Errorf("an untraced process keeps the relay's descriptor %s open", fd)
	case mode != "untraced" && (n < 3 || err != nil || flags&unix.FD_CLOEXEC == 0):
		t.Errorf("the relay's descriptor %s is inherited by what the process starts (flags %d, %v)", fd, flags, err)
	}
	_, span := Tracer(tp).Start(context.Background(), "child's span")
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// runRelayed runs TestRelayChild in a process with env (nil: this process's
// environment) attached to relay, and fails t if it fails.
func runRelayed(t *testing.T, relay *Relay, env []string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRelayChild$")
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := relay.Start(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the started process (environment %q): %v\n%s", env, err, out.String())
	}
}

func TestAnUntracedProcessClosesTheRelayItWasGiven(t *testing.T) {
	mine := newCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", mine.URL)
	tp, shutdown, err := NewTracerProvider(context.Background(), ServiceWorker, otlp.Exporter)
	if err != nil {
		t.Fatal(err)
	}
	runRelayed(t, RelayOf(tp), append(os.Environ(), relayChildEnv+"=untraced"))
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestAStartedProcessSendsItsSpansThroughTheProcessThatStartedIt(t *testing.T) {
	for _, ownEnv := range []bool{true, false} {
		mine, theirs := newCollector(t), newCollector(t)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", mine.URL)
		tp, shutdown, err := NewTracerProvider(context.Background(), ServiceWorker, otlp.Exporter)
		if err != nil {
			t.Fatal(err)
		}
		relay := RelayOf(tp)
		if relay == nil {
			t.Fatal("a traced provider has no relay")
		}
		var env []string
		if ownEnv {
			// Left to itself, the process would export to theirs.
			env = append(os.Environ(), relayChildEnv+"=traced", "OTEL_EXPORTER_OTLP_ENDPOINT="+theirs.URL)
		} else {
			// It inherits this process's environment: it would export to
			// mine itself.
			t.Setenv(relayChildEnv, "traced")
		}
		runRelayed(t, relay, env)
		_, span := Tracer(tp).Start(context.Background(), "parent's span")
		span.End()
		// The shutdown waits for the process's frames before it flushes.
		if err := shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if len(theirs.got) != 0 {
			t.Errorf("own environment %v: the started process exported %d requests itself", ownEnv, len(theirs.got))
		}
		services := map[string]string{}
		for _, rs := range mine.resourceSpans() {
			service := ""
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					services[s.GetName()] = service
				}
			}
		}
		if services["parent's span"] != ServiceWorker || services["child's span"] != ServiceExecutor {
			t.Errorf("own environment %v: spans by service %v: want the parent's as %s's and the child's as %s's", ownEnv, services, ServiceWorker, ServiceExecutor)
		}
	}
}

// frame is msg with its length before it, as a relayed process writes it.
func frame(msg []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(msg))), msg...)
}

// uploads is a relay's upload that keeps what it is given.
type uploads struct {
	mu     sync.Mutex
	frames [][]byte
	held   chan struct{} // when not nil, each upload waits for it to close
}

func (u *uploads) relay() *Relay {
	return &Relay{upload: func(_ context.Context, frame []byte) error {
		if u.held != nil {
			<-u.held
		}
		u.mu.Lock()
		defer u.mu.Unlock()
		u.frames = append(u.frames, frame)
		return nil
	}}
}

func TestARelaySendsOnEveryFrameInOrderAndStopsAtOneTooLong(t *testing.T) {
	one, two := []byte("one"), []byte("two")
	for _, tc := range []struct {
		name   string
		stream []byte
		sent   [][]byte
		err    string
	}{
		{"two frames", append(frame(one), frame(two)...), [][]byte{one, two}, ""},
		{"an empty frame", frame(nil), nil, ""},
		{"a frame over the limit", append(frame(one), binary.BigEndian.AppendUint32(nil, relayFrameMax+1)...), [][]byte{one}, "over the limit"},
		{"a frame shorter than it says", append(frame(one), frame(two)[:5]...), [][]byte{one}, "cut short"},
	} {
		u := &uploads{}
		r := u.relay()
		err := r.read(bytes.NewReader(tc.stream))
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.err)
		}
		if err := r.drain(context.Background()); err != nil {
			t.Error(err)
		}
		if fmt.Sprint(u.frames) != fmt.Sprint(tc.sent) {
			t.Errorf("%s: sent %q, want %q", tc.name, u.frames, tc.sent)
		}
	}
}

// Frames wait while the collector is slow, up to what a relay holds; the
// rest are dropped and counted, and the reading goes on.
func TestRelayedFramesBeyondWhatIsHeldAreDroppedAndCounted(t *testing.T) {
	u := &uploads{held: make(chan struct{})}
	r := u.relay()
	big := make([]byte, relayHeldMax/4)
	var stream []byte
	for range 5 {
		stream = append(stream, frame(big)...)
	}
	if err := r.read(bytes.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	close(u.held)
	if err := r.drain(context.Background()); err == nil || !strings.Contains(err.Error(), "1 exports of started processes dropped") {
		t.Errorf("drain: %v, want the dropped export counted", err)
	}
	if len(u.frames) != 4 {
		t.Errorf("%d frames sent on, want the 4 held", len(u.frames))
	}
}

func TestARelayThatIsNoPipeIsAnError(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "not-a-pipe")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, v := range []string{"x", "1", "999", "-3"} {
		t.Setenv(RelayFDEnv, v)
		if _, err := relayOut(); err == nil {
			t.Errorf("%s=%s accepted", RelayFDEnv, v)
		}
	}
	dup, err := unix.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dup)
	t.Setenv(RelayFDEnv, strconv.Itoa(dup))
	if _, err := relayOut(); err == nil || !strings.Contains(err.Error(), "not a pipe") {
		t.Errorf("a regular file as the relay: %v", err)
	}
	// It is not the relay: whatever holds it keeps it, as it was.
	if flags, err := unix.FcntlInt(uintptr(dup), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC != 0 {
		t.Errorf("the descriptor named by mistake was closed or changed (flags %d, %v)", flags, err)
	}
}
