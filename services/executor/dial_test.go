package executor

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/glint-cluster/glint/pkg/rpc"
)

// listen is a loopback listener whose connections arrive on the channel.
func listen(t *testing.T) (net.Listener, <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 4)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		close(accepted)
		for c := range accepted {
			c.Close()
		}
	})
	return ln, accepted
}

// The first dial to the driver's address takes the connection dialled
// early; a later one, or one elsewhere, dials anew.
func TestTheFirstDialToTheDriverTakesTheConnectionDialledEarly(t *testing.T) {
	driver, accepted := listen(t)
	other, _ := listen(t)
	early := DialEarly("http://" + driver.Addr().String())
	if early == nil {
		t.Fatal("no early dial to a driver URL")
	}
	dialled := <-accepted
	defer dialled.Close()
	dial := withEarlyDial(rpc.NewHTTPClient(), early).Transport.(*http.Transport).DialContext
	ctx := context.Background()
	elsewhere, err := dial(ctx, "tcp", other.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer elsewhere.Close()
	first, err := dial(ctx, "tcp", driver.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if first.LocalAddr().String() != dialled.RemoteAddr().String() {
		t.Errorf("the first dial to the driver made %s, want the early connection %s", first.LocalAddr(), dialled.RemoteAddr())
	}
	second, err := dial(ctx, "tcp", driver.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if second.LocalAddr().String() == first.LocalAddr().String() {
		t.Errorf("the second dial took the early connection again")
	}
	again := <-accepted
	defer again.Close()
	if again.RemoteAddr().String() != second.LocalAddr().String() {
		t.Errorf("the driver accepted %s, want the second dial's %s", again.RemoteAddr(), second.LocalAddr())
	}
	early.Close() // taken: nothing to close
	if _, err := first.Write([]byte("x")); err != nil {
		t.Errorf("the taken connection was closed: %v", err)
	}
}

// An early connection no call took is closed.
func TestAnEarlyConnectionNothingTookIsClosed(t *testing.T) {
	driver, accepted := listen(t)
	early := DialEarly("http://" + driver.Addr().String())
	dialled := <-accepted
	defer dialled.Close()
	early.Close()
	// Bounded, so that a connection left open fails the test instead of
	// hanging it.
	if err := dialled.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if n, err := dialled.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("read %d bytes, %v from the untaken early connection; want EOF", n, err)
	}
}

// A driver URL the executor could not call dials nothing.
func TestNoEarlyDialToAnUnusableURL(t *testing.T) {
	for _, u := range []string{"", "http://127.0.0.1", "ftp://127.0.0.1:1"} {
		if d := DialEarly(u); d != nil {
			t.Errorf("DialEarly(%q) dialled %s", u, d.addr)
		}
	}
}
