// Package ports holds loopback ports for processes that must be told theirs
// before they start and keep it across restarts: tests' tools and the chaos
// soak's clusters.
package ports

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Ports are loopback ports held for processes that must know theirs before
// they start and keep it across restarts. They lie among the 10,000 ports
// just below the kernel's ephemeral range (ip_local_port_range), so no
// listener on port 0 and no outgoing connection takes one between the check
// and the process's bind, or while the process is down; and each is locked
// in a file (flock) while held, so holders in this process or another —
// tests running in parallel, a soak — never share one.
type Ports struct {
	locks []*os.File
	List  []int
}

// Reserve holds n free ports until Release.
func Reserve(n int) (*Ports, error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return nil, fmt.Errorf("read the ephemeral port range: %w", err)
	}
	f := strings.Fields(string(b))
	hi, err := strconv.Atoi(f[0])
	if len(f) != 2 || err != nil || hi < 11_024 {
		return nil, fmt.Errorf("ip_local_port_range %q leaves too few ports below it", b)
	}
	lo := hi - 10_000
	dir := filepath.Join(os.TempDir(), "glint-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, err
	}
	p := &Ports{}
	for _, port := range rand.Perm(hi - lo) {
		if len(p.List) == n {
			return p, nil
		}
		port += lo
		lock, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			p.Release()
			return nil, err
		}
		if syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			lock.Close()
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			lock.Close()
			continue
		}
		ln.Close()
		p.locks = append(p.locks, lock)
		p.List = append(p.List, port)
	}
	p.Release()
	return nil, errors.New("not enough free ports below the ephemeral range")
}

// Release lets the ports go.
func (p *Ports) Release() {
	for _, l := range p.locks {
		l.Close()
	}
	p.locks = nil
}
