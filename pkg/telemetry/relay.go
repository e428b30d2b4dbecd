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
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// RelayFDEnv names the file descriptor a traced process sends its spans
// through instead of exporting them itself: the write end of a pipe whose
// read end its worker holds (Relay.Start). Each export is written to it as
// a frame — a 4-byte big-endian length, then an ExportTraceServiceRequest —
// and the worker sends the frames on to its collector. An executor
// lives for an application, often for seconds; exporting its handful of
// spans itself took a connection to the collector and an HTTP client of its
// own, much of what tracing cost it.
const RelayFDEnv = "GLINT_SPANS_FD"

const (
	// relayFrameMax bounds one frame: an export of at most a batch of spans
	// (512 by default, each a few hundred bytes) is far below it.
	relayFrameMax = 4 << 20
	// relayHeldMax bounds the relayed bytes a process holds waiting to be
	// sent on; frames that would pass it are dropped and counted.
	relayHeldMax = 16 << 20
	// relayTimeout bounds the sending on of one frame.
	relayTimeout = 30 * time.Second
)

// A Relay sends on to the collector, each as it comes, the frames of the
// processes it starts through it (a worker's executors), with its process's
// own exporter (Exporter's upload). A frame waits while the one before it is
// sent, so a slow collector never holds up a process writing its spans; a
// nil *Relay starts processes as they are: they export their spans
// themselves.
type Relay struct {
	upload  func(context.Context, []byte) error
	readers sync.WaitGroup

	mu      sync.Mutex
	queue   [][]byte
	held    int  // bytes in queue
	sending bool // a goroutine sends the queue
	dropped int
	// pending counts the frames queued and not yet sent (or failed).
	pending sync.WaitGroup
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

// read queues the frames from rd until it ends. A frame too long ends the
// reading: the process's later exports fail on a closed pipe.
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
		r.relay(frame)
	}
}

// relay queues frame to be sent on, unless the frames waiting hold too
// many bytes already (it is dropped and counted).
func (r *Relay) relay(frame []byte) {
	if len(frame) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.held+len(frame) > relayHeldMax {
		r.dropped++
		return
	}
	r.queue = append(r.queue, frame)
	r.held += len(frame)
	r.pending.Add(1)
	if !r.sending {
		r.sending = true
		go r.send()
	}
}

// send sends on the queued frames, one at a time, until none is left.
func (r *Relay) send() {
	for {
		r.mu.Lock()
		if len(r.queue) == 0 {
			r.sending = false
			r.mu.Unlock()
			return
		}
		frame := r.queue[0]
		r.queue = r.queue[1:]
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), relayTimeout)
		if err := r.upload(ctx, frame); err != nil {
			otel.Handle(fmt.Errorf("send on relayed spans: %w", err))
		}
		cancel()
		r.mu.Lock()
		r.held -= len(frame)
		r.mu.Unlock()
		r.pending.Done()
	}
}

// drain waits until the spans of every process started through r were read
// and sent on, or ctx ends, and says how many frames were dropped, if any
// were.
func (r *Relay) drain(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		r.readers.Wait()
		r.pending.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("send on relayed spans: %w", ctx.Err())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dropped > 0 {
		return fmt.Errorf("%d exports of started processes dropped: %d bytes of them were waiting", r.dropped, relayHeldMax)
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

// relayClient is the OTLP client of a process whose spans its worker sends
// on (otlptrace's exporter turns the spans into OTLP): each upload is one
// frame on the relay.
type relayClient struct {
	mu  sync.Mutex
	out *os.File // nil once stopped
	msg []byte
}

var _ otlptrace.Client = (*relayClient)(nil)

func (*relayClient) Start(context.Context) error { return nil }

// UploadTraces writes spans as one frame: an ExportTraceServiceRequest,
// whose only field, resource_spans (1), holds each of them.
func (c *relayClient) UploadTraces(_ context.Context, spans []*tracepb.ResourceSpans) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.out == nil {
		return errors.New("relay spans: stopped")
	}
	c.msg = c.msg[:0]
	for _, rs := range spans {
		c.msg = protowire.AppendVarint(protowire.AppendTag(c.msg, 1, protowire.BytesType), uint64(proto.Size(rs)))
		var err error
		if c.msg, err = (proto.MarshalOptions{}).MarshalAppend(c.msg, rs); err != nil {
			return fmt.Errorf("relay spans: %w", err)
		}
	}
	return writeFrame(c.out, c.msg)
}

// Stop closes the relay: the worker's reading of it ends.
func (c *relayClient) Stop(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.out == nil {
		return nil
	}
	err := c.out.Close()
	c.out = nil
	return err
}
