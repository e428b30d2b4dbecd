package ports

import (
	"net"
	"strconv"
	"testing"
)

func TestReserveHoldsDistinctFreePorts(t *testing.T) {
	p, err := Reserve(4)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release()
	seen := map[int]bool{}
	for _, port := range p.List {
		if seen[port] {
			t.Fatalf("port %d twice in %v", port, p.List)
		}
		seen[port] = true
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("reserved port %d: %v", port, err)
		}
		ln.Close()
	}
	q, err := Reserve(4)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Release()
	for _, port := range q.List {
		if seen[port] {
			t.Fatalf("port %d reserved twice", port)
		}
	}
}
