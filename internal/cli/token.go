package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/glint-cluster/glint/pkg/rpc"
)

func newTokenCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "token",
		Short: "Print a new random token, for --token-file and --submit-token-file",
		Long: "Print a new random token (32 random bytes, base64). Give the cluster token to the master and every\n" +
			"worker with --token-file, and a submit token to clients; keep the files readable by their owner only:\n\n" +
			"  glint token > cluster.token && chmod 600 cluster.token",
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(g.Stdout, rpc.NewToken())
			return err
		},
	}
}

// serverAuth is how a master or worker authenticates calls: --insecure, and
// the cluster token it was given; and the further names its listener
// answers to (--allowed-host).
type serverAuth struct {
	insecure     bool
	metricsAuth  bool
	uiPublic     bool
	allowedHosts []string
}

func (a *serverAuth) register(fl *pflag.FlagSet) {
	fl.BoolVar(&a.insecure, "insecure", false, "accept calls without tokens: anyone who reaches the listener can run any program on every worker (for a laptop or a closed test network only)")
	fl.BoolVar(&a.metricsAuth, "metrics-auth", false, "make /metrics (and the master's /sd) need a token this process accepts too")
	fl.BoolVar(&a.uiPublic, "ui-public", false, "open the web UI's read-only pages (logs included on a worker) to anyone; buttons still need a login")
	fl.StringArrayVar(&a.allowedHosts, "allowed-host", nil, "a further host name callers reach this process by, e.g. a Kubernetes Service's; repeatable (requests naming another host than these, --host, localhost or an IP address are refused with 421)")
}

// hosts are the names the listener answers to besides its own addresses
// and localhost: host (--host, or the one found) and --allowed-host.
func (a *serverAuth) hosts(host string) ([]string, error) {
	for _, h := range a.allowedHosts {
		if h == "" || strings.ContainsAny(h, "/ \t") {
			return nil, fmt.Errorf("--allowed-host %q: want a host name, as callers' URLs name this process", h)
		}
	}
	return append([]string{host}, a.allowedHosts...), nil
}

// tokens returns the tokens a master or worker on ln accepts, with the
// cluster token as Cluster: nil (no authentication) with --insecure, or
// without a token on a loopback address. Without a token on any other
// address it refuses, saying how to make one.
func (a *serverAuth) tokens(ctx context.Context, log *slog.Logger, what string, ln net.Listener, cluster string) (*rpc.Tokens, error) {
	switch {
	case a.insecure:
		log.WarnContext(ctx, "--insecure: calls are not authenticated; anyone who reaches "+ln.Addr().String()+" can run any program on every worker")
		return nil, nil
	case cluster == "" && ln.Addr().(*net.TCPAddr).IP.IsLoopback():
		log.InfoContext(ctx, "no --token-file: calls are not authenticated, which only processes on this machine can reach")
		return nil, nil
	case cluster == "":
		return nil, fmt.Errorf("%s on %s needs a cluster token, or anyone who reaches it can run any program on every worker:\n"+
			"  glint token > cluster.token && chmod 600 cluster.token\n"+
			"  glint master --token-file cluster.token     # and every worker with the same --token-file\n"+
			"(or listen on a loopback address, or pass --insecure on a closed network)", what, ln.Addr())
	}
	t := rpc.NewTokens()
	t.Add(rpc.Cluster, cluster)
	return t, nil
}
