package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/glint-cluster/glint/pkg/fault"
	"github.com/glint-cluster/glint/pkg/ids"
	"github.com/glint-cluster/glint/pkg/resources"
)

func TestNormalizeURLAcceptsSparkAndGlintForms(t *testing.T) {
	for in, want := range map[string]string{
		"localhost:7077":          "http://localhost:7077",
		"spark://10.0.0.1:7077":   "http://10.0.0.1:7077",
		"glint://master:7077":     "http://master:7077",
		"http://127.0.0.1:7077/":  "http://127.0.0.1:7077",
		" http://[::1]:7077 ":     "http://[::1]:7077",
		"http://master.svc:65535": "http://master.svc:65535",
		"https://m:7077":          "http://m:7077", // every process of a cluster speaks the same
	} {
		if got, err := NormalizeURL(in); err != nil || got != want {
			t.Errorf("NormalizeURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestNormalizeURLRejectsWhatIsNotHostAndPort(t *testing.T) {
	for _, in := range []string{"", "master", "ftp://m:1", "http://m:0", "http://m:70000", "http://m:7077/x", "http://u@m:1", "http://m:1?q=1"} {
		if _, err := NormalizeURL(in); err == nil {
			t.Errorf("NormalizeURL(%q) accepted", in)
		}
	}
}

func TestMatchURLPicksTheEntryNamingTheSameSchemeHostAndPort(t *testing.T) {
	masters := []string{"http://Master-1.svc:7077", "http://10.0.0.2:7077", "http://[::1]:7077"}
	for in, want := range map[string]string{
		"http://master-1.svc:7077":                  "http://Master-1.svc:7077",
		"http://MASTER-1.SVC:07077":                 "http://Master-1.svc:7077",
		"http://10.0.0.2:7077":                      "http://10.0.0.2:7077",
		"http://[::ffff:10.0.0.2]:7077":             "http://10.0.0.2:7077",
		"http://[0:0::1]:7077":                      "http://[::1]:7077",
		"http://master-1.svc:7078":                  "",
		"http://master-1.svc.attacker.example:7077": "",
		"http://10.0.0.3:7077":                      "",
		"https://10.0.0.2:7077":                     "",
	} {
		got, ok := MatchURL(masters, in)
		if got != want || ok != (want != "") {
			t.Errorf("MatchURL(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

func TestParseURLsSplitsCommaLists(t *testing.T) {
	got, err := ParseURLs("a:1, spark://b:2,")
	if err != nil || fmt.Sprint(got) != "[http://a:1 http://b:2]" {
		t.Errorf("got %v, %v", got, err)
	}
	if _, err := ParseURLs(" , "); err == nil {
		t.Error("empty list accepted")
	}
}

func TestURLReplacesAnUnspecifiedListenHost(t *testing.T) {
	for addr, want := range map[string]string{"0.0.0.0:7077": "http://node1:7077", "[::]:7077": "http://node1:7077", "127.0.0.1:7077": "http://127.0.0.1:7077"} {
		tcp, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := URL(tcp, "node1"); got != want {
			t.Errorf("URL(%s) = %s, want %s", addr, got, want)
		}
	}
}

// A driver or worker given several masters advertises the address that
// routes to one it can reach: the first may be down, its name gone (a
// link-local address without a zone has no route either, and needs no DNS).
func TestAdvertiseHostSkipsAMasterWithoutARoute(t *testing.T) {
	const unroutable = "http://[fe80::1]:7077"
	got, err := AdvertiseHost(unroutable, "http://127.0.0.1:7077")
	if err != nil || got != "127.0.0.1" {
		t.Errorf("AdvertiseHost(%s, loopback) = %q, %v; want 127.0.0.1", unroutable, got, err)
	}
	if got, err := AdvertiseHost(unroutable); err == nil {
		t.Errorf("AdvertiseHost(%s) = %q, want an error", unroutable, got)
	}
}

func TestMailboxDeliversInPostOrder(t *testing.T) {
	m := NewMailbox(context.Background())
	var mu sync.Mutex
	var got []int
	for i := range 1000 {
		m.Post(context.Background(), func(context.Context) {
			mu.Lock()
			got = append(got, i)
			mu.Unlock()
		})
	}
	m.Wait()
	for i, v := range got {
		if v != i {
			t.Fatalf("message %d delivered as %d", i, v)
		}
	}
	if len(got) != 1000 {
		t.Fatalf("%d messages delivered, want 1000", len(got))
	}
}

func TestMailboxDropsMessagesAfterItsContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	m := NewMailbox(ctx)
	cancel()
	delivered := false
	m.Post(context.Background(), func(context.Context) { delivered = true })
	m.Wait()
	if delivered {
		t.Error("message delivered after the mailbox's context ended")
	}
}

func TestErrorMapsSentinelsToCodes(t *testing.T) {
	for err, want := range map[error]connect.Code{
		fmt.Errorf("x: %w", fault.ErrNotFound):                               connect.CodeNotFound,
		fmt.Errorf("x: %w", fault.ErrAlreadyExists):                          connect.CodeAlreadyExists,
		fmt.Errorf("x: %w", fault.ErrInvalidArgument):                        connect.CodeInvalidArgument,
		ids.ValidateApp("../x"):                                              connect.CodeInvalidArgument,
		func() error { _, err := resources.ParseSize("lots"); return err }(): connect.CodeInvalidArgument,
		fmt.Errorf("x: %w", fault.ErrFailedPrecondition):                     connect.CodeFailedPrecondition,
		fmt.Errorf("x: %w", fault.ErrResourceExhausted):                      connect.CodeResourceExhausted,
		fmt.Errorf("x: %w", fault.ErrUnavailable):                            connect.CodeUnavailable,
		errors.New("surprise"):                                               connect.CodeInternal,
	} {
		if got := connect.CodeOf(Error(err)); got != want {
			t.Errorf("Error(%v) code %v, want %v", err, got, want)
		}
	}
}

func TestServeStopsWithoutWaitingForIdleClientsButFinishesRequests(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			started <- struct{}{}
			<-release
		}
		io.WriteString(w, "done")
	})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, ln, h) }()
	client := NewHTTPClient()
	base := "http://" + ln.Addr().String()
	resp, err := client.Get(base + "/fast") // leaves an idle HTTP/2 connection
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	slow := make(chan string, 1)
	go func() {
		resp, err := client.Get(base + "/slow")
		if err != nil {
			slow <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		slow <- string(b)
	}()
	<-started
	cancel()
	select {
	case err := <-served:
		t.Fatalf("Serve returned (%v) while a request was in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if got := <-slow; got != "done" {
		t.Errorf("in-flight request got %q, want it finished", got)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(shutdownTimeout):
		t.Fatal("Serve did not return after the last request finished")
	}
}

func TestClientsSpeakTheirProtocolToOneServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- Serve(ctx, ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Proto) }))
	}()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Error(err)
		}
	}()
	for _, c := range []struct {
		client *http.Client
		want   string
	}{{NewHTTPClient(), "HTTP/2.0"}, {NewHTTP1Client(), "HTTP/1.1"}} {
		resp, err := c.client.Get("http://" + ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != c.want {
			t.Errorf("server saw %s, want %s", b, c.want)
		}
		c.client.CloseIdleConnections()
	}
}
