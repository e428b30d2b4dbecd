package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
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
			"  glint token > cluster.token && chmod 600 cluster.token\n\n" +
			"On a loopback address none is needed: a master or worker without one makes the machine's, in the\n" +
			"user's config directory, which every glint command sends to masters on a loopback address.",
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(g.Stdout, rpc.NewToken())
			return err
		},
	}
}

// serverAuth is how a master or worker authenticates calls: the names its
// listener answers to (--allowed-host) and which pages need a token.
type serverAuth struct {
	metricsAuth  bool
	uiPublic     bool
	allowedHosts []string
}

func (a *serverAuth) register(fl *pflag.FlagSet) {
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

// clusterToken returns the cluster token of a master or worker that
// listens on ln and calls peers (a worker's masters), and the tokens it
// accepts: --token-file's; without one, when ln and every peer are on a
// loopback address, the machine's (the file at localTokenPath, made if
// there is none yet); anywhere else none, and an error saying how to make one.
func (g *globals) clusterToken(ctx context.Context, log *slog.Logger, what string, ln net.Listener, peers ...string) (string, *rpc.Tokens, error) {
	cluster, err := g.Token()
	if err != nil {
		return "", nil, err
	}
	if cluster == "" {
		if !ln.Addr().(*net.TCPAddr).IP.IsLoopback() || !allLoopback(peers) {
			return "", nil, fmt.Errorf("%s on %s needs a cluster token, or anyone who reaches it can run any program on every worker:\n"+
				"  glint token > cluster.token && chmod 600 cluster.token\n"+
				"  glint master --token-file cluster.token     # and every worker with the same --token-file\n"+
				"(on a loopback address, with its masters on one, it needs none: it makes or reads this machine's)", what, ln.Addr())
		}
		path, made, token, err := localToken()
		if err != nil {
			return "", nil, err
		}
		verb := "read"
		if made {
			verb = "made"
		}
		log.InfoContext(ctx, "no --token-file: "+verb+" the cluster token of this machine's loopback cluster, which every glint command here reads by default", "path", path)
		cluster = token
	}
	t := rpc.NewTokens()
	t.Add(rpc.Cluster, cluster)
	return cluster, t, nil
}

// clientToken is the token a client command sends to masters: --token-file's;
// without one, when every master is on a loopback address, the machine's
// (at localTokenPath) if there is one; else none. The machine's token never
// goes to another host, which could not use it.
func (g *globals) clientToken(masters []string) (string, error) {
	if g.TokenFile != "" || !allLoopback(masters) {
		return g.Token()
	}
	path, err := localTokenPath()
	if err != nil {
		return "", nil
	}
	token, err := rpc.ReadToken("the cluster token of this machine", path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return token, err
}

// localTokenPath is the machine's cluster token, as Jupyter keeps its
// server's: os.UserConfigDir()/glint/cluster.token ($XDG_CONFIG_HOME, else
// ~/.config, on Linux). A master or worker on a loopback address without
// --token-file makes it or reads it; every client command reads it.
func localTokenPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no --token-file, and no config directory for the cluster token of this machine: %w", err)
	}
	return filepath.Join(dir, "glint", "cluster.token"), nil
}

// localToken reads the machine's cluster token, first making it when
// there is none: a new token written to a temporary file beside it (the
// directory 0700, the file 0600) and linked to its name, which fails rather
// than replace a file another process made meanwhile, so that masters and
// workers starting at once end with one token. A file there that
// rpc.ReadToken refuses (one that others may read) is refused, not replaced.
func localToken() (path string, made bool, token string, err error) {
	if path, err = localTokenPath(); err != nil {
		return "", false, "", err
	}
	const what = "the cluster token of this machine"
	token, err = rpc.ReadToken(what, path)
	if !errors.Is(err, fs.ErrNotExist) {
		return path, false, token, err
	}
	if made, err = linkNewToken(path); err != nil {
		return "", false, "", fmt.Errorf("make %s: %w", what, err)
	}
	token, err = rpc.ReadToken(what, path)
	return path, made, token, err
}

// linkNewToken puts a new token at path unless a file is there already;
// made says whether this call put it.
func linkNewToken(path string) (made bool, err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, err
	}
	tmp, err := os.CreateTemp(dir, ".cluster.token-*") // mode 0600
	if err != nil {
		return false, err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(rpc.NewToken() + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, err
	}
	switch err := os.Link(tmp.Name(), path); {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrExist):
		return false, nil
	default:
		return false, err
	}
}

// allLoopback says whether every URL of urls names a loopback address
// (localhost or a loopback IP).
func allLoopback(urls []string) bool {
	for _, u := range urls {
		host, _, err := rpc.HostPort(u)
		if ip := net.ParseIP(host); err != nil || host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return false
		}
	}
	return true
}
