package master

import (
	"context"
	"fmt"
	"slices"

	"github.com/glint-cluster/glint/pkg/fault"
	"github.com/glint-cluster/glint/pkg/ids"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// Applications and drivers belong to their submitter: Spark's ACLs, always
// enabled (spark.acls.enable). A submit token has a name, the user of
// Spark's ACLs; what it registers or submits is that name's (its owner), and
// only the owner's tokens or an admin's (spark.admin.acls) may end it, change
// its executors or report on it; the application of a cluster-mode driver is
// its driver's owner's. An application's or driver's spark.modify.acls
// (its description's modify_acls) names more submit tokens that may act on
// it as its owner may. A cluster-mode driver's own token (the master makes
// one per driver) acts only on that driver and the applications it
// registered. Reading the cluster's state (GetClusterState, /json, the web
// UI's pages) stays open to every token the master accepts and lists every
// submitter's applications with their owners, as Spark's master UI does;
// Glint has no view ACLs (spark.ui.view.acls).
const (
	// AdminName is the cluster token's name as a submit token: an admin, as
	// the names in Config.Admins are.
	AdminName = "admin"
	// DefaultTokenName is the name of a submit token given without one.
	DefaultTokenName = "default"
	// maxTokenName is the longest name of a submit token.
	maxTokenName = 64
	// MaxModifyACLs is how many names an application's or driver's
	// modify_acls may hold.
	MaxModifyACLs = 64
	// everySubmitter in modify_acls lets every submit token act.
	everySubmitter = "*"
)

// checkModifyACLs checks a description's modify_acls: at most MaxModifyACLs
// names, each a token name or "*".
func checkModifyACLs(names []string) error {
	if len(names) > MaxModifyACLs {
		return fmt.Errorf("modify_acls: %w: %d names, at most %d", fault.ErrInvalidArgument, len(names), MaxModifyACLs)
	}
	for _, name := range names {
		if name == everySubmitter {
			continue
		}
		if err := CheckTokenName(name); err != nil {
			return fmt.Errorf("modify_acls: %w", err)
		}
	}
	return nil
}

// mayModify says whether the submit token name may act on what has owner
// and modify_acls acls.
func mayModify(name, owner string, acls []string) bool {
	return name == owner || slices.Contains(acls, name) || slices.Contains(acls, everySubmitter)
}

// CheckTokenName checks a submit token's name: 1 to 64 of A-Z, a-z, 0-9,
// '.', '_', '@' and '-', and not a driver id, which names a cluster-mode
// driver's token.
func CheckTokenName(name string) error {
	if name == "" || len(name) > maxTokenName {
		return fmt.Errorf("token name %.80q: %w: want 1 to %d bytes", name, fault.ErrInvalidArgument, maxTokenName)
	}
	for _, c := range []byte(name) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '@' || c == '-') {
			return fmt.Errorf("token name %q: %w: want only A-Z, a-z, 0-9, '.', '_', '@' and '-'", name, fault.ErrInvalidArgument)
		}
	}
	if ids.ValidateDriver(name) == nil {
		return fmt.Errorf("token name %q: %w: a driver id names that driver's own token", name, fault.ErrInvalidArgument)
	}
	return nil
}

// caller is who makes a call, as the master decides what it may act on.
type caller struct {
	// name is the owner it acts as: its submit token's name, or for a
	// driver's token that driver's owner.
	name string
	// admin may act on every application and driver.
	admin bool
	// driver is set for a cluster-mode driver's token: its driver's id.
	driver string
}

// callerLocked is who made the call of ctx (rpc.Caller): every caller is an
// admin on a master without authentication.
func (s *Server) callerLocked(ctx context.Context) caller {
	if s.cfg.Tokens == nil {
		return caller{admin: true}
	}
	name := rpc.Caller(ctx)
	if ids.ValidateDriver(name) == nil {
		c := caller{driver: name}
		if d, ok := s.drivers[name]; ok {
			c.name = d.owner
		}
		return c
	}
	return caller{name: name, admin: name == AdminName || slices.Contains(s.cfg.Admins, name)}
}

// errNotYours is the error for a call on another caller's application or driver.
var errNotYours = fault.New(fault.ErrPermissionDenied, "not the caller's")

// mayActOnApp says why c may not act on a (what: "kill"), or nil if it may.
func (c caller) mayActOnApp(what string, a *appInfo) error {
	switch {
	case c.admin:
		return nil
	case c.driver != "":
		if a.driverID != c.driver {
			return fmt.Errorf("%s application %s: %w: driver %s's token acts only on the applications that driver registered", what, a.id, errNotYours, c.driver)
		}
	case !mayModify(c.name, a.owner, a.desc.GetModifyAcls()):
		return fmt.Errorf("%s application %s: %w: it is %q's, and only its owner's tokens, an admin's or those its spark.modify.acls names may", what, a.id, errNotYours, a.owner)
	}
	return nil
}

// mayActOnDriver says why c may not act on d, or nil if it may.
func (c caller) mayActOnDriver(what string, d *driverInfo) error {
	switch {
	case c.admin:
		return nil
	case c.driver != "":
		if d.id != c.driver {
			return fmt.Errorf("%s driver %s: %w: driver %s's token acts only on that driver", what, d.id, errNotYours, c.driver)
		}
	case !mayModify(c.name, d.owner, d.desc.GetModifyAcls()):
		return fmt.Errorf("%s driver %s: %w: it is %q's, and only its owner's tokens, an admin's or those its spark.modify.acls names may", what, d.id, errNotYours, d.owner)
	}
	return nil
}

// ownAppLocked is the active application id, if the caller of ctx may act
// on it (what: "kill").
func (s *Server) ownAppLocked(ctx context.Context, what, id string) (*appInfo, error) {
	a, err := s.activeAppLocked(id)
	if err != nil {
		return nil, err
	}
	if err := s.callerLocked(ctx).mayActOnApp(what, a); err != nil {
		return nil, err
	}
	return a, nil
}

// mayRegisterForDriverLocked says why c may not register an application for
// the cluster-mode driver driverID (empty: a client-mode application), or
// nil if it may: a driver's token only for its own driver, a submit token
// only for a driver of its owner.
func (s *Server) mayRegisterForDriverLocked(c caller, driverID string) error {
	switch {
	case c.driver != "" && driverID != c.driver:
		return fmt.Errorf("register application: %w: driver %s's token registers only that driver's applications, not driver_id %q", errNotYours, c.driver, driverID)
	case driverID == "" || c.driver != "" || c.admin:
		return nil
	}
	d, ok := s.drivers[driverID]
	if !ok {
		return fmt.Errorf("register application: driver_id %s: %w: no such active driver", driverID, fault.ErrNotFound)
	}
	return c.mayActOnDriver("register an application of", d)
}
