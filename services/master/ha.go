package master

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/api/glint/master/v1/masterv1connect"
	"github.com/glint-cluster/glint/pkg/fault"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// statusStandby is a master that waits to be elected.
const statusStandby = "STANDBY"

// HAConfig configures a master that runs only while etcd elects it
// (--recovery-mode etcd).
type HAConfig struct {
	// Master configures the master it runs once elected; its Store and
	// Epoch are set then.
	Master Config
	// Etcd is the client of the etcd cluster; Prefix the keys' prefix.
	Etcd   *clientv3.Client
	Prefix string
	// LeaseTTL is how long a leader that stopped renewing its lease (it
	// died, paused or lost etcd) leads on; a standby takes over after it.
	LeaseTTL time.Duration
}

// HA is a master under etcd leader election. Until elected it is a standby:
// every call gets Unavailable naming the leader, /json says STANDBY. Once
// elected, with the election's revision as its epoch, it recovers the state
// kept in etcd and leads. A leader whose lease lapses steps down by ending
// Run with an error (the process exits, its supervisor starts it again as a
// standby); until it notices, the workers and drivers refuse its commands,
// which carry the older epoch, and etcd refuses its writes.
type HA struct {
	cfg     HAConfig
	handler atomic.Pointer[http.Handler]
	standby http.Handler

	mu     sync.Mutex
	leader string // the leader's URL, as the standby last saw it
}

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
	h := &HA{cfg: cfg}
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "glint_master_leader", Help: "1 while this master leads the cluster (ALIVE), 0 while it recovers or stands by.",
	}, func() float64 { return 0 }))
	h.standby = rpc.NewHandler(rpc.Endpoints{
		Service: func(o ...connect.HandlerOption) (string, http.Handler) {
			return masterv1connect.NewMasterServiceHandler(masterv1connect.UnimplementedMasterServiceHandler{},
				append(o, connect.WithInterceptors(connect.UnaryInterceptorFunc(h.refuse)))...)
		},
		TracerProvider: cfg.Master.TracerProvider,
		Registry:       reg,
		Pages: map[string]http.HandlerFunc{"GET /json": h.serveStandbyJSON, "GET /json/": h.serveStandbyJSON,
			"GET /readyz": func(w http.ResponseWriter, _ *http.Request) { writeReady(w, statusStandby) }},
		Tokens:      cfg.Master.Tokens,
		Access:      access,
		MetricsAuth: cfg.Master.MetricsAuth,
	})
	h.handler.Store(&h.standby)
	return h, nil
}

// Handler serves the standby's answers, then the leader's.
func (h *HA) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*h.handler.Load()).ServeHTTP(w, r) })
}

// refuse answers every call of a standby.
func (h *HA) refuse(connect.UnaryFunc) connect.UnaryFunc {
	return func(_ context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		return nil, rpc.Error(fmt.Errorf("%s: %w: this master (%s) is a standby; the leader is %s",
			req.Spec().Procedure, fault.ErrUnavailable, h.cfg.Master.URL, h.leaderName()))
	}
}

func (h *HA) leaderName() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.leader == "" {
		return "not elected yet"
	}
	return h.leader
}

func (h *HA) serveStandbyJSON(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	out := statusJSON(&masterv1.GetClusterStateResponse{MasterUrl: h.cfg.Master.URL, Status: statusStandby}, time.Now())
	h.mu.Lock()
	out.Leader = h.leader
	h.mu.Unlock()
	if err := json.NewEncoder(w).Encode(out); err != nil {
		h.cfg.Master.Logger.Debug("write /json", "err", err)
	}
}

// Run stands by until elected, then leads until ctx ends (nil) or the
// leadership is lost (an error).
func (h *HA) Run(ctx context.Context) error {
	log := h.cfg.Master.Logger
	session, err := concurrency.NewSession(h.cfg.Etcd, concurrency.WithTTL(int(h.cfg.LeaseTTL.Round(time.Second)/time.Second)),
		concurrency.WithContext(ctx))
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("master: etcd session: %w", err)
	}
	defer session.Close()
	election := concurrency.NewElection(session, h.cfg.Prefix+"/leader")
	observing, stopObserving := context.WithCancel(ctx)
	defer stopObserving()
	go h.observe(observing, election)

	log.Info("standing by for election", "prefix", h.cfg.Prefix)
	// Campaign, stopped while etcd cannot be reached, resigns with the
	// client's context and waits for etcd: a standby stops without it.
	campaign := make(chan error, 1)
	go func() { campaign <- election.Campaign(ctx, h.cfg.Master.URL) }()
	select {
	case <-ctx.Done():
		return nil
	case err := <-campaign:
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("master: campaign for leadership: %w", err)
		}
	}
	stopObserving()
	epoch := election.Rev()
	cfg := h.cfg.Master
	cfg.Epoch = epoch
	cfg.Store = NewEtcdStore(h.cfg.Etcd, h.cfg.Prefix, election.Key(), epoch)
	m, err := New(cfg)
	if err != nil {
		return err
	}
	log.Info("elected leader", "epoch", epoch, "status", m.clusterState().GetStatus())
	handler := m.Handler()
	h.handler.Store(&handler)

	leading, stopLeading := context.WithCancel(ctx)
	defer stopLeading()
	lost := make(chan struct{})
	go func() {
		select {
		case <-session.Done():
			close(lost)
			stopLeading()
		case <-leading.Done():
		}
	}()
	err = m.Run(leading)
	select {
	case <-lost:
		return errors.Join(err, fmt.Errorf("master: lost the leadership of epoch %d (its etcd lease lapsed); stepping down", epoch))
	default:
	}
	if ctx.Err() == nil {
		return err
	}
	// Leave at once, so a standby takes over without waiting out the lease.
	resign, cancel := context.WithTimeout(context.WithoutCancel(ctx), etcdTimeout)
	defer cancel()
	return errors.Join(err, election.Resign(resign))
}

// observe keeps the leader's URL for a standby's answers.
func (h *HA) observe(ctx context.Context, election *concurrency.Election) {
	for resp := range election.Observe(ctx) {
		if len(resp.Kvs) > 0 {
			h.mu.Lock()
			h.leader = string(resp.Kvs[0].Value)
			h.mu.Unlock()
		}
	}
}
