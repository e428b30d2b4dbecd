package cli

import (
	"slices"
	"testing"
)

func TestAllowedHostsAreHostNames(t *testing.T) {
	a := serverAuth{allowedHosts: []string{"master", "master.glint.svc.cluster.local"}}
	if got, err := a.hosts("master.glint.svc"); err != nil || !slices.Equal(got, []string{"master.glint.svc", "master", "master.glint.svc.cluster.local"}) {
		t.Errorf("hosts = %v, %v", got, err)
	}
	for _, bad := range []string{"", "http://master", "master /x", "a\tb"} {
		a := serverAuth{allowedHosts: []string{bad}}
		if _, err := a.hosts("m"); err == nil {
			t.Errorf("--allowed-host %q accepted", bad)
		}
	}
}
