// Package floor measures the physical floor of an executor's launch on this
// machine: fork/exec of a tiny Go child that makes two round trips, over
// HTTP/1.1 or HTTP/2 without TLS, on loopback to its parent (as an executor
// calls RetrieveSparkProps and
// RegisterExecutor on its driver) — from just before the fork to the second
// request's arrival, as Glint's launch is timed from LaunchExecutor received
// to RegisterExecutor received. cmd/glint-floor is the child (and a parent
// for measuring by hand); make bench's launch row runs Floor in the same run
// as the launches it compares with it. It also serves the floors of a
// heartbeat (Serve, ServeTCP), which make bench's heartbeat row sends the
// heartbeats it sends a master.
package floor

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// ChildFlag is the flag that makes cmd/glint-floor the child: it takes the
// protocol (HTTP1 or H2C) and the URL to call twice.
const ChildFlag = "-child"

// The protocols a child calls its parent over: the floor is the cheaper.
const (
	HTTP1 = "http/1.1"
	H2C   = "h2c"
)

// Floor is a parent serving HTTP/1.1 and HTTP/2 over cleartext on a
// loopback port.
type Floor struct {
	bin string
	url string
	srv *http.Server
	mu  sync.Mutex
	// arrived is signalled for each child (by path) at its second request.
	arrived map[string]chan time.Time
	seen    map[string]int
	next    int
}

// New serves the parent on loopback; bin is the child program
// (cmd/glint-floor). Close stops it.
func New(bin string) (*Floor, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &Floor{bin: bin, url: "http://" + ln.Addr().String(), arrived: map[string]chan time.Time{}, seen: map[string]int{}}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	f.srv = &http.Server{Handler: http.HandlerFunc(f.serve), Protocols: &protocols, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = f.srv.Serve(ln) }()
	return f, nil
}

func (f *Floor) serve(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	_, _ = io.Copy(io.Discard, r.Body)
	f.mu.Lock()
	f.seen[r.URL.Path]++
	if f.seen[r.URL.Path] == 2 {
		if c, ok := f.arrived[r.URL.Path]; ok {
			c <- now
		}
	}
	f.mu.Unlock()
	_, _ = w.Write([]byte("ok"))
}

// Close stops the parent's server.
func (f *Floor) Close() error { return f.srv.Close() }

// Launch forks and execs one child that calls over protocol (HTTP1 or H2C)
// and returns the time from just before the fork to its second request's
// arrival; it reaps the child before returning.
func (f *Floor) Launch(ctx context.Context, protocol string) (time.Duration, error) {
	f.mu.Lock()
	f.next++
	path := fmt.Sprintf("/child/%d", f.next)
	arrived := make(chan time.Time, 1)
	f.arrived[path] = arrived
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.arrived, path)
		delete(f.seen, path)
		f.mu.Unlock()
	}()
	cmd := exec.CommandContext(ctx, f.bin, ChildFlag, protocol, f.url+path)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	werr := cmd.Wait()
	select {
	case at := <-arrived:
		if werr != nil {
			return 0, fmt.Errorf("floor child: %v: %s", werr, out.String())
		}
		return at.Sub(start), nil
	default:
		return 0, fmt.Errorf("floor child made fewer than two requests (%v): %s", werr, out.String())
	}
}

// Child makes the two round trips to url over protocol (HTTP1, on one kept
// connection, or H2C), as the child process.
func Child(protocol, url string) error {
	var protocols http.Protocols
	major := 1
	switch protocol {
	case HTTP1:
		protocols.SetHTTP1(true)
	case H2C:
		protocols.SetUnencryptedHTTP2(true)
		major = 2
	default:
		return fmt.Errorf("floor child: protocol %q: want %s or %s", protocol, HTTP1, H2C)
	}
	client := &http.Client{Transport: &http.Transport{Protocols: &protocols}, Timeout: 30 * time.Second}
	for range 2 {
		resp, err := client.Post(url, "application/proto", strings.NewReader("floor"))
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != major || resp.StatusCode != http.StatusOK {
			return fmt.Errorf("floor child: %s over %s", resp.Status, resp.Proto)
		}
	}
	return nil
}

// ServeFlag makes cmd/glint-floor the heartbeat floor (ServeFloors), to
// which make bench sends the heartbeats it sends a master.
const ServeFlag = "-serve"

// ServeFloors serves Serve and ServeTCP on two loopback ports, after writing
// their URLs to out (http://, then tcp://, a line each), until one fails.
func ServeFloors(out io.Writer) error {
	var lns [2]net.Listener
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer ln.Close()
		lns[i] = ln
	}
	if _, err := fmt.Fprintf(out, "http://%s\ntcp://%s\n", lns[0].Addr(), lns[1].Addr()); err != nil {
		return err
	}
	errc := make(chan error, 2)
	go func() { errc <- Serve(lns[0]) }()
	go func() { errc <- ServeTCP(lns[1]) }()
	return <-errc
}

// StartServe starts cmd, a `glint-floor -serve`, and reads the URLs it
// writes: its HTTP floor's URL and its TCP floor's address. Closing stdin
// ends it; the caller waits for it. If the URLs do not come, it is killed
// and waited for.
func StartServe(cmd *exec.Cmd) (stdin io.WriteCloser, httpURL, tcpAddr string, err error) {
	if stdin, err = cmd.StdinPipe(); err != nil {
		return nil, "", "", err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", "", err
	}
	r := bufio.NewReader(out)
	var urls [2]string
	for i, scheme := range []string{"http://", "tcp://"} {
		line, err := r.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, scheme) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return nil, "", "", fmt.Errorf("glint-floor -serve wrote %q (%v): want a %s URL", line, err, scheme)
		}
		urls[i] = strings.TrimSpace(line)
	}
	return stdin, urls[0], strings.TrimPrefix(urls[1], "tcp://"), nil
}

// Serve answers every request on ln, after reading its body, with 200 and an
// empty application/proto body (an empty protobuf message, as a Connect
// client reads it): the least a Go HTTP/1.1 server does for a heartbeat.
func Serve(ln net.Listener) error {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/proto")
		w.WriteHeader(http.StatusOK)
	}), Protocols: &protocols, ReadHeaderTimeout: 10 * time.Second}
	return srv.Serve(ln)
}

// maxFrame bounds a frame ServeTCP reads.
const maxFrame = 64 << 10

// emptyFrame is ServeTCP's answer: a frame of no bytes.
var emptyFrame [4]byte

// ServeTCP answers every frame (a 4-byte big-endian length, then that many
// bytes) on each connection ln accepts with an empty frame: the least a Go
// process does for a message that wakes it, without HTTP.
func ServeTCP(ln net.Listener) error {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer conn.Close()
			r := bufio.NewReader(conn)
			var head [4]byte
			for {
				if _, err := io.ReadFull(r, head[:]); err != nil {
					return
				}
				n := binary.BigEndian.Uint32(head[:])
				if n > maxFrame {
					return
				}
				if _, err := r.Discard(int(n)); err != nil {
					return
				}
				if _, err := conn.Write(emptyFrame[:]); err != nil {
					return
				}
			}
		}()
	}
}

// Exchange sends msg to a ServeTCP connection as a frame and reads its
// answer, which must be an empty frame.
func Exchange(conn net.Conn, msg []byte) error {
	if len(msg) > maxFrame {
		return fmt.Errorf("floor: a frame of %d bytes is over %d", len(msg), maxFrame)
	}
	frame := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(msg)), uint32(len(msg)))
	if _, err := conn.Write(append(frame, msg...)); err != nil {
		return err
	}
	if _, err := io.ReadFull(conn, frame[:4]); err != nil {
		return err
	}
	if n := binary.BigEndian.Uint32(frame[:4]); n != 0 {
		return fmt.Errorf("floor: an answer of %d bytes, not an empty frame", n)
	}
	return nil
}
