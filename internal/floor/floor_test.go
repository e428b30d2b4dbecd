package floor

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// listen serves serve on a loopback port until the test ends and returns its
// address.
func listen(t *testing.T, serve func(net.Listener) error) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() { _ = serve(ln) }()
	return ln.Addr().String()
}

// dial connects to serve on a loopback port, with a deadline of within from
// now: a server that stops answering fails the test instead of hanging it.
func dial(t *testing.T, serve func(net.Listener) error, within time.Duration) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", listen(t, serve))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(within))
	return conn
}

func TestServeAnswersAnEmptyMessage(t *testing.T) {
	addr := listen(t, Serve)
	client := &http.Client{Timeout: time.Minute}
	resp, err := client.Post("http://"+addr+"/glint.master.v1.MasterService/Heartbeat", "application/proto", strings.NewReader("heartbeat"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/proto" || len(body) != 0 {
		t.Fatalf("answer: %s, %q, %d bytes; want 200, application/proto, none", resp.Status, resp.Header.Get("Content-Type"), len(body))
	}
}

func TestServeTCPAnswersEveryFrame(t *testing.T) {
	conn := dial(t, ServeTCP, time.Minute)
	for _, msg := range [][]byte{[]byte("heartbeat"), nil, make([]byte, maxFrame)} {
		if err := Exchange(conn, msg); err != nil {
			t.Fatalf("a frame of %d bytes: %v", len(msg), err)
		}
	}
}

func TestServeTCPHangsUpOnAnOverlongFrame(t *testing.T) {
	conn := dial(t, ServeTCP, 10*time.Second)
	if _, err := conn.Write(binary.BigEndian.AppendUint32(nil, maxFrame+1)); err != nil {
		t.Fatal(err)
	}
	if n, err := conn.Read(make([]byte, 4)); !errors.Is(err, io.EOF) {
		t.Fatalf("after a frame over %d bytes: read %d bytes, %v; want the connection closed", maxFrame, n, err)
	}
}

func TestExchangeRefusesAnOverlongFrame(t *testing.T) {
	conn := dial(t, ServeTCP, time.Minute)
	if err := Exchange(conn, make([]byte, maxFrame+1)); err == nil || !strings.Contains(err.Error(), "over") {
		t.Fatalf("Exchange of %d bytes: %v; want refused", maxFrame+1, err)
	}
}

func TestExchangeWantsAnEmptyAnswer(t *testing.T) {
	echo := func(ln net.Listener) error {
		conn, err := ln.Accept()
		if err != nil {
			return err
		}
		defer conn.Close()
		_, err = io.Copy(conn, conn)
		return err
	}
	conn := dial(t, echo, time.Minute)
	if err := Exchange(conn, []byte("heartbeat")); err == nil || !strings.Contains(err.Error(), "not an empty frame") {
		t.Fatalf("Exchange with a server that echoes: %v; want the answer refused", err)
	}
}
