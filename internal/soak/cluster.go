package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/glint-cluster/glint/internal/ports"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The cluster's settings: timeouts short enough that every fault resolves in
// seconds.
const (
	workerTimeout  = "6s"
	leaseTTL       = "2s"
	workerCores    = "2"
	workerMemory   = "2g"
	registerEvery  = "1s"
	workerKillWait = "2s"
	workers        = 3
	haMasters      = 3
	etcdMembers    = 3
	etcdPrefix     = "/glint"
)

// cluster is the processes of one run, and what a client needs to reach
// them: the masters' URLs, the token files.
type cluster struct {
	bins        *Binaries
	env         []string
	ports       *ports.Ports
	etcd        []*proc
	masters     []*proc
	workers     []*proc
	masterURLs  []string
	etcdURLs    []string
	workDirs    []string
	clusterFile string
	submitFile  string
}

// newCluster lays out the cluster of mode in dir: its token files (made
// with `glint token`, as an operator makes them), ports, processes and
// their flags. Nothing runs yet.
func newCluster(mode Mode, bins *Binaries, dir string, onExit func(*proc, error)) (*cluster, error) {
	c := &cluster{bins: bins, env: childEnv(), clusterFile: filepath.Join(dir, "cluster.token"),
		submitFile: filepath.Join(dir, "submit.token")}
	for _, f := range []string{c.clusterFile, c.submitFile} {
		if err := c.makeToken(f); err != nil {
			return nil, err
		}
	}
	nMasters, nEtcd := 1, 0
	if mode == ModeHA {
		nMasters, nEtcd = haMasters, etcdMembers
	}
	ports, err := ports.Reserve(nMasters + workers + 2*nEtcd)
	if err != nil {
		return nil, err
	}
	c.ports = ports
	next := func() int { p := ports.List[0]; ports.List = ports.List[1:]; return p }

	var cluster []string
	etcdPorts := make([][2]int, nEtcd)
	for i := range nEtcd {
		etcdPorts[i] = [2]int{next(), next()}
		cluster = append(cluster, fmt.Sprintf("etcd-%d=http://127.0.0.1:%d", i, etcdPorts[i][1]))
		c.etcdURLs = append(c.etcdURLs, fmt.Sprintf("http://127.0.0.1:%d", etcdPorts[i][0]))
	}
	for i := range nEtcd {
		name := fmt.Sprintf("etcd-%d", i)
		client, peer := c.etcdURLs[i], fmt.Sprintf("http://127.0.0.1:%d", etcdPorts[i][1])
		// --unsafe-no-fsync: a killed process loses nothing it wrote (the
		// kernel has it); only the machine's crash would, which the soak
		// does not inject. The shared machine's disk stays out of the
		// timings.
		c.etcd = append(c.etcd, c.proc(dir, name, RoleEtcd, client, bins.Etcd, "--name", name,
			"--data-dir", filepath.Join(dir, name), "--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", strings.Join(cluster, ","),
			"--initial-cluster-state", "new", "--initial-cluster-token", "glint-soak", "--log-level", "error", "--unsafe-no-fsync"))
	}
	for i := range nMasters {
		port := next()
		url := fmt.Sprintf("http://127.0.0.1:%d", port)
		c.masterURLs = append(c.masterURLs, url)
		args := []string{"master", "--token-file", c.clusterFile, "--submit-token-file", c.submitFile,
			"--listen", fmt.Sprintf("127.0.0.1:%d", port), "--worker-timeout", workerTimeout}
		if mode == ModeHA {
			args = append(args, "--recovery-mode", "etcd", "--etcd-endpoints", strings.Join(c.etcdURLs, ","),
				"--etcd-prefix", etcdPrefix, "--etcd-lease-ttl", leaseTTL)
		} else {
			args = append(args, "--recovery-mode", "file", "--recovery-dir", filepath.Join(dir, "recovery"))
		}
		c.masters = append(c.masters, c.proc(dir, fmt.Sprintf("master-%d", i), RoleMaster, url, bins.Glint, args...))
	}
	for i := range workers {
		port := next()
		work := filepath.Join(dir, fmt.Sprintf("worker-%d", i))
		if err := os.MkdirAll(work, 0o755); err != nil {
			ports.Release()
			return nil, err
		}
		c.workDirs = append(c.workDirs, work)
		url := fmt.Sprintf("http://127.0.0.1:%d", port)
		c.workers = append(c.workers, c.proc(dir, fmt.Sprintf("worker-%d", i), RoleWorker, url, bins.Glint, "worker",
			"--token-file", c.clusterFile, "--master", strings.Join(c.masterURLs, ","), "--listen", fmt.Sprintf("127.0.0.1:%d", port),
			"--cores", workerCores, "--memory", workerMemory, "--work-dir", work,
			"--register-interval", registerEvery, "--kill-grace", workerKillWait, "--executor-users", "off"))
	}
	for _, p := range c.all() {
		p.onExit = onExit
	}
	return c, nil
}

func (c *cluster) proc(dir, name string, role Role, url, bin string, args ...string) *proc {
	return &proc{name: name, role: role, url: url, argv: append([]string{bin}, args...), env: c.env,
		logPath: filepath.Join(dir, name+".log")}
}

// makeToken writes a new token to path, owner-only, with `glint token`.
func (c *cluster) makeToken(path string) error {
	cmd := exec.Command(c.bins.Glint, "token")
	cmd.Env = c.env
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("glint token: %w", err)
	}
	return os.WriteFile(path, out, 0o600)
}

// childEnv is the soak's environment without the GLINT_* and OTEL_*
// variables, which would change what the cluster's processes do.
func childEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GLINT_") && !strings.HasPrefix(kv, "OTEL_") {
			out = append(out, kv)
		}
	}
	return out
}

// all is every process, in the order the teardown ends them: workers,
// masters, etcd.
func (c *cluster) all() []*proc {
	return append(append(append([]*proc(nil), c.workers...), c.masters...), c.etcd...)
}

// bringUp starts etcd, the masters and the workers, each once the ones
// before answer, and returns when a master leads with every worker ALIVE.
func (c *cluster) bringUp(ctx context.Context, token string) error {
	for _, p := range c.etcd {
		if err := p.start(); err != nil {
			return err
		}
	}
	for _, u := range c.etcdURLs {
		if err := waitFor(ctx, time.Minute, "etcd at "+u, func() bool {
			var h struct{ Health string }
			return getJSON(ctx, u+"/health", "", &h) == nil && h.Health == "true"
		}); err != nil {
			return err
		}
	}
	for _, p := range c.masters {
		if err := p.start(); err != nil {
			return err
		}
	}
	var leader string
	if err := waitFor(ctx, time.Minute, "a master ALIVE", func() bool {
		for _, u := range c.masterURLs {
			var s MasterJSON
			if getJSON(ctx, u+"/json", token, &s) == nil && s.Status == "ALIVE" {
				leader = u
				return true
			}
		}
		return false
	}); err != nil {
		return err
	}
	for _, p := range c.workers {
		if err := p.start(); err != nil {
			return err
		}
	}
	return waitFor(ctx, time.Minute, "every worker ALIVE", func() bool {
		var s MasterJSON
		return getJSON(ctx, leader+"/json", token, &s) == nil && s.AliveWorkers == workers
	})
}

// pollClient asks the cluster's processes; a paused one never answers, so
// every request has a short deadline.
var pollClient = &http.Client{Timeout: time.Second}

// getJSON GETs url with the bearer token (none when empty) and decodes its
// JSON answer into out.
func getJSON(ctx context.Context, url, token string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := pollClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// waitFor polls ok until it holds, for at most limit.
func waitFor(ctx context.Context, limit time.Duration, what string, ok func() bool) error {
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s", what, limit)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}
