package rpc

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
)

// hostNames are the names a listener answers to in a request's Host: what
// its callers' URLs name it by. A request naming anything else is refused
// (checkHost), so that a web page whose name was rebound to this machine's
// address (DNS rebinding) cannot call it from a browser.
type hostNames map[string]bool

// listenerHosts are the names of a listener on ln: localhost, names (the
// host of the process's URL, its --host and --allowed-host), and on an
// unspecified address (":7077") this machine's host name. Any IP address
// is accepted besides (allows).
func listenerHosts(ln net.Listener, names []string) hostNames {
	h := hostNames{"localhost": true}
	for _, n := range names {
		if n = hostOnly(n); n != "" {
			h[n] = true
		}
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && tcp.IP.IsUnspecified() {
		if name, err := os.Hostname(); err == nil {
			h[hostOnly(name)] = true
		}
	}
	return h
}

// allows reports whether a request's Host names this listener. An IP
// address always does: a browser sends one only to the address it names,
// from a page of that origin, which a rebound name cannot make — and so
// callers through NAT, a published port or a Service's cluster IP keep
// working. A name must be one of h.
func (h hostNames) allows(host string) bool {
	host = hostOnly(host)
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	return h[host]
}

// hostOnly is a Host header's or a URL's host without its port, brackets,
// case or final dot.
func hostOnly(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

// checkHost refuses a request whose Host is not one of the listener's names
// with 421 Misdirected Request, before anything else looks at it.
func checkHost(next http.Handler, names hostNames) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !names.allows(r.Host) {
			http.Error(w, fmt.Sprintf("misdirected request: %q is not a name of this server (a name callers use must be its --host or an --allowed-host)", r.Host),
				http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}
