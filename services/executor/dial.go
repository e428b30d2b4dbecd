package executor

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/glint-cluster/glint/pkg/rpc"
)

// EarlyDial is the connection to an executor's driver, dialled on a
// goroutine of its own as soon as the process knows where the driver is
// (DialEarly), while the rest of the executor is made: its first call
// (RetrieveSparkProps) takes it rather than dialling then. Only the first
// dial to the driver's address takes it; every later one, a retry's
// included, dials anew.
type EarlyDial struct {
	addr string
	done chan struct{}
	conn net.Conn
	err  error
	once sync.Once
}

// dialTimeout bounds the early dial as rpc's clients bound theirs.
const dialTimeout = 5 * time.Second

// DialEarly starts dialling the host and port of driverURL; nil when it is
// not a URL the executor could call (New says why).
func DialEarly(driverURL string) *EarlyDial {
	normalized, err := rpc.NormalizeURL(driverURL)
	if err != nil {
		return nil
	}
	u, err := url.Parse(normalized)
	if err != nil {
		return nil
	}
	d := &EarlyDial{addr: u.Host, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		d.conn, d.err = (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).Dial("tcp", d.addr)
	}()
	return d
}

// take is the early connection and its dial's error, or taken false when
// it was taken already or is not to addr.
func (d *EarlyDial) take(addr string) (conn net.Conn, taken bool, err error) {
	if addr != d.addr {
		return nil, false, nil
	}
	d.once.Do(func() {
		<-d.done
		conn, taken, err = d.conn, true, d.err
	})
	return conn, taken, err
}

// Close closes the early connection if no call took it.
func (d *EarlyDial) Close() {
	d.once.Do(func() {
		<-d.done
		if d.conn != nil {
			d.conn.Close()
		}
	})
}

// withEarlyDial makes client's first dial to d's address take d's
// connection; a nil d leaves client as it is.
func withEarlyDial(client *http.Client, d *EarlyDial) *http.Client {
	t, ok := client.Transport.(*http.Transport)
	if d == nil || !ok {
		return client
	}
	dial := t.DialContext
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if conn, taken, err := d.take(addr); taken {
			return conn, err
		}
		return dial(ctx, network, addr)
	}
	return client
}
