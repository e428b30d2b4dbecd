package master

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	"github.com/glint-cluster/glint/pkg/fault"
	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/pkg/telemetry/prom"
	"github.com/glint-cluster/glint/services/master/store"
)

// statusStandby is a master that waits to be elected.
const statusStandby = "STANDBY"

// HAConfig configures a master that runs only while etcd elects it
// (--recovery-mode etcd).
type HAConfig struct {
	// Master configures the master it runs once elected; its Store and
	// Epoch are set then.
	Master Config
	// Etcd is the client of the etcd cluster (NewEtcdClient); Prefix the
	// keys' prefix.
	Etcd   *clientv3.Client
	Prefix string
	// LeaseTTL is how long a leader that stopped renewing its lease (it
	// died, paused or lost etcd) leads on; a standby takes over after it.
	LeaseTTL time.Duration
}

// HA is a master under etcd leader election. Until elected it is a standby:
// every call gets Unavailable, /json says STANDBY, /readyz is 503. Once
// elected, with the election's revision as its epoch, it recovers the state
// kept in etcd and leads — but answers as the leader only while its lease
// is known to be held (lease.Held, looked at on every request): a
// leader that was paused past its lease, or cut off from etcd for as long,
// answers as a standby from its first request on, and steps down by ending
// Run with an error once its session ends (the process exits, its
// supervisor starts it again as a standby). Whatever it sends meanwhile
// carries its older epoch, which the workers and drivers refuse, and etcd
// refuses its writes.
type HA struct {
	cfg       HAConfig
	leading   atomic.Pointer[leadership]
	standby   http.Handler
	candidate *store.Candidate
}

// leadership is an elected master's handler and the lease that holds its
// leadership.
type leadership struct {
	handler http.Handler
	lease   *store.Lease
}

// masterServicePath is where the Connect service's procedures are served.
const masterServicePath = "/" + masterv1connect.MasterServiceName + "/"

// NewHA returns a standby master for cfg.
func NewHA(cfg HAConfig) (*HA, error) {
	if cfg.Etcd == nil || cfg.Master.URL == "" {
		return nil, fmt.Errorf("new master: etcd mode needs an etcd client and the master's URL")
	}
	if cfg.LeaseTTL < time.Second {
		return nil, fmt.Errorf("new master: lease TTL %s: must be at least 1s", cfg.LeaseTTL)
	}
	cfg.Prefix = strings.TrimSuffix(cfg.Prefix, "/")
	cfg.Master.Instruments.SetDefaults()
	h := &HA{cfg: cfg, candidate: store.NewCandidate(cfg.Etcd, cfg.Prefix, cfg.Master.URL, cfg.LeaseTTL, cfg.Master.Logger)}
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "glint_master_leader", Help: "1 while this master leads the cluster (ALIVE), 0 while it recovers or stands by.",
	}, func() float64 { return 0 }))
	h.standby = rpc.NewHandler(rpc.Endpoints{
		Service: func(...connect.HandlerOption) (string, http.Handler) {
			return masterServicePath, http.HandlerFunc(h.refuse)
		},
		TracerProvider: cfg.Master.TracerProvider,
		Metrics:        prom.Handler(reg),
		Pages: map[string]http.HandlerFunc{"GET /json": h.serveStandbyJSON, "GET /json/": h.serveStandbyJSON,
			"GET /readyz": func(w http.ResponseWriter, _ *http.Request) { writeReady(w, statusStandby) }},
		Tokens:      cfg.Master.Tokens,
		Access:      standbyAccess(),
		MetricsAuth: cfg.Master.MetricsAuth,
	})
	return h, nil
}

// standbyAccess is access with every MasterService call open: a standby's
// answer to each is the same refusal, which reads nothing of the call, and
// a caller whose token only the leader knows (a cluster-mode driver's) must
// be told to try the next master, not that its token is wrong.
func standbyAccess() rpc.Access {
	a := maps.Clone(access)
	maps.DeleteFunc(a, func(path string, _ rpc.Role) bool { return strings.HasPrefix(path, masterServicePath) })
	return a.Grant(rpc.Public, masterServicePath)
}

// Handler serves the leader's answers while this master leads and its lease
// is held, the standby's otherwise. The lease is looked at as each request
// comes in: one that got past the look just before a stop is answered after
// it as the leader's — true when it was looked at — while whatever the
// master sends carries its epoch, which the workers and drivers fence.
func (h *HA) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if l := h.leading.Load(); l != nil && l.lease.Held() {
			l.handler.ServeHTTP(w, r)
			return
		}
		h.standby.ServeHTTP(w, r)
	})
}

// refuse answers every call of a standby with Unavailable, so that its
// caller tries the next master. Only a caller with a token this master
// accepts (who may read its /json) is told which master leads.
func (h *HA) refuse(w http.ResponseWriter, r *http.Request) {
	why := "is a standby"
	if h.leading.Load() != nil {
		why = "cannot confirm its leadership: its etcd lease may have lapsed (it was paused, or etcd is unreachable)"
	}
	next := "try the next master"
	if token, _ := rpc.BearerToken(r); h.cfg.Master.Tokens.Allows(token, rpc.AnyToken) {
		next = "the leader is " + h.leaderName()
	}
	rpc.Refuse(w, r, fmt.Errorf("%s: %w: this master (%s) %s; %s", r.URL.Path, fault.ErrUnavailable, h.cfg.Master.URL, why, next))
}

// leaderName is the leader's URL as this standby last saw it.
func (h *HA) leaderName() string {
	if leader := h.candidate.Leader(); leader != "" {
		return leader
	}
	return "not known yet"
}

func (h *HA) serveStandbyJSON(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	out := statusJSON(&masterv1.GetClusterStateResponse{MasterUrl: h.cfg.Master.URL, Status: statusStandby}, time.Now())
	out.Leader = h.candidate.Leader()
	if err := json.NewEncoder(w).Encode(out); err != nil {
		h.cfg.Master.Logger.Debug("write /json", "err", err)
	}
}

// Run stands by until elected, then leads until ctx ends (nil) or the
// leadership is lost (an error).
func (h *HA) Run(ctx context.Context) error {
	log := h.cfg.Master.Logger
	log.Info("standing by for election", "prefix", h.cfg.Prefix)
	held, election, err := h.candidate.Elect(ctx)
	if err != nil {
		return nil // asked to stop
	}
	epoch := election.Rev()
	cfg := h.cfg.Master
	cfg.Epoch = epoch
	cfg.Store = store.NewEtcdStore(h.cfg.Etcd, h.cfg.Prefix, election.Key(), epoch)
	cfg.StepDownOnFailedWrite = true
	m, err := New(cfg)
	if err != nil {
		return errors.Join(err, held.Close())
	}
	log.Info("elected leader", "epoch", epoch, "status", m.clusterState().GetStatus())
	h.leading.Store(&leadership{handler: m.Handler(), lease: held})

	// The master leads while the lease holds: it stops when the lease may
	// have lapsed, or when asked to.
	err = m.Run(held.Context())
	if ctx.Err() == nil && held.Context().Err() != nil {
		return errors.Join(err, fmt.Errorf("master: lost the leadership of epoch %d (its etcd lease lapsed); stepping down", epoch))
	}
	// Leave at once (revoking the lease deletes the leader's key), so a
	// standby takes over without waiting out the lease.
	return errors.Join(err, held.Close())
}
