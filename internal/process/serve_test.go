package process

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"testing"
)

// hello is a Service that answers every request and runs until its end.
type hello struct{}

func (hello) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("hello")) })
}

func (hello) Run(ctx context.Context) error { <-ctx.Done(); return nil }

// A process answers to the host of its URL and to the hosts it is given
// (--host, --allowed-host), and refuses other names with 421.
func TestServeAnswersToTheHostOfItsURLAndItsHosts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- Serve(ctx, slog.New(slog.DiscardHandler), ln, "http://node-7.example:"+port, "", hello{}, "master.example", "master")
	}()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Error(err)
		}
	}()
	for host, want := range map[string]int{
		"node-7.example:" + port: http.StatusOK, "master.example": http.StatusOK, "master:7077": http.StatusOK,
		"127.0.0.1:" + port: http.StatusOK, "rebind.attacker.example": http.StatusMisdirectedRequest,
	} {
		req, err := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %q: %s, want %d", host, resp.Status, want)
		}
	}
}
