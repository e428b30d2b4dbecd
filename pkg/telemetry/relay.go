package telemetry

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"

	"go.opentelemetry.io/otel"
	"google.golang.org/protobuf/encoding/protowire"
)

// RelayFDEnv names the file descriptor a traced process sends its spans
// through instead of exporting them itself: the write end of a pipe whose
// read end its worker holds (Relay.Start). Each export is written to it as
// a frame — a 4-byte big-endian length, then an ExportTraceServiceRequest —
// and the worker sends the frames on with its own next export. An executor
// lives for an application, often for seconds; exporting its handful of
// spans itself took a connection to the collector and an HTTP client of its
// own, much of what tracing cost it.
const RelayFDEnv = "GLINT_SPANS_FD"

const (
	// relayFrameMax bounds one frame: an export of at most a batch of spans
	// (512 by default, each a few hundred bytes) is far below it.
	relayFrameMax = 4 << 20
	// relayHeldMax bounds the relayed bytes a process holds between two of
	// its exports; frames that would pass it are dropped and counted.
	relayHeldMax = 16 << 20
)

// A Relay sends on, with its process's own exports, the spans of the
// processes it starts through it (a worker's executors). The
// frames are checked to be nothing but ExportTraceServiceRequest's
// resource_spans entries, so that each joins the process's own request as
// more of them. A nil *Relay starts processes as they are: they export their
// spans themselves.
type Relay struct {
	b       *batcher
	readers sync.WaitGroup
}

// Start starts cmd with the write end of a new pipe as its spans' way out
// (RelayFDEnv, the next of its ExtraFiles; a nil Env, this process's, is
// made explicit to hold the variable), closes this process's copy of that
// end, and reads the process's frames until it closes its own (it exits).
// With r nil it only starts cmd.
func (r *Relay) Start(cmd *exec.Cmd) error {
	if r == nil {
		return cmd.Start()
	}
	rd, wr, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("open the process's span relay: %w", err)
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, wr)
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, RelayFDEnv+"="+strconv.Itoa(2+len(cmd.ExtraFiles)))
	err = cmd.Start()
	wr.Close()
	if err != nil {
		rd.Close()
		return err
	}
	r.readers.Go(func() {
		defer rd.Close()
		if err := r.read(rd); err != nil {
			otel.Handle(fmt.Errorf("spans relayed by process %d: %w", cmd.Process.Pid, err))
		}
	})
	return nil
}

// read queues the frames from rd until it ends. A frame too long, or not
// made of resource_spans entries, ends the reading: the process's later
// exports fail on a closed pipe.
func (r *Relay) read(rd io.Reader) error {
	var size [4]byte
	for {
		switch _, err := io.ReadFull(rd, size[:]); {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return err
		}
		n := binary.BigEndian.Uint32(size[:])
		if n > relayFrameMax {
			return fmt.Errorf("a frame of %d bytes, over the limit of %d", n, relayFrameMax)
		}
		frame := make([]byte, n)
		if _, err := io.ReadFull(rd, frame); err != nil {
			return fmt.Errorf("a frame of %d bytes cut short: %w", n, err)
		}
		if err := checkRelayed(frame); err != nil {
			return err
		}
		r.b.relay(frame)
	}
}

// wait waits until the spans of every process started through r were read,
// or ctx ends.
func (r *Relay) wait(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		r.readers.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// checkRelayed accepts a frame made only of ExportTraceServiceRequest
// field 1 (resource_spans) entries, each whole.
func checkRelayed(frame []byte) error {
	for len(frame) > 0 {
		num, typ, n := protowire.ConsumeTag(frame)
		if n < 0 || num != fRequestResourceSpans || typ != protowire.BytesType {
			return errors.New("a frame that is not an ExportTraceServiceRequest of resource_spans")
		}
		frame = frame[n:]
		if n = protowire.ConsumeFieldValue(num, typ, frame); n < 0 {
			return errors.New("a frame with a resource_spans entry cut short")
		}
		frame = frame[n:]
	}
	return nil
}

// relayOut is the pipe RelayFDEnv names, taken from the environment (so
// that nothing the process starts inherits the name) and closed on exec (nor
// the descriptor); nil when the variable is not set. A descriptor that is no
// pipe is left as it is: it is not the relay, whatever holds it.
func relayOut() (*os.File, error) {
	v := os.Getenv(RelayFDEnv)
	if v == "" {
		return nil, nil
	}
	os.Unsetenv(RelayFDEnv)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("%s=%q: want an inherited file descriptor", RelayFDEnv, v)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		return nil, fmt.Errorf("%s=%d: not a pipe", RelayFDEnv, fd)
	}
	syscall.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), "span relay"), nil
}

// writeFrame writes msg to w as one frame.
func writeFrame(w io.Writer, msg []byte) error {
	if len(msg) > relayFrameMax {
		return fmt.Errorf("relay spans: an export of %d bytes, over the limit of %d", len(msg), relayFrameMax)
	}
	var size [4]byte
	binary.BigEndian.PutUint32(size[:], uint32(len(msg)))
	if _, err := w.Write(size[:]); err != nil {
		return fmt.Errorf("relay spans: %w", err)
	}
	if _, err := w.Write(msg); err != nil {
		return fmt.Errorf("relay spans: %w", err)
	}
	return nil
}
