package cli

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/glint-cluster/glint/pkg/rpc"
	"github.com/glint-cluster/glint/services/master"
)

// --submit-token-file NAME=PATH names a token; a bare PATH is the default
// name's; the cluster token is admin's; one token never gets two names.
func TestSubmitTokenFilesAreNamed(t *testing.T) {
	dir := t.TempDir()
	file := func(name, token string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cluster, alice, bare, odd := rpc.NewToken(), rpc.NewToken(), rpc.NewToken(), rpc.NewToken()
	alicePath, barePath, oddPath := file("alice.token", alice), file("bare.token", bare), file("x=y.token", odd)
	f := &masterFlags{submitTokenFiles: []string{"alice=" + alicePath, barePath, oddPath}}
	tokens := rpc.NewTokens()
	if err := f.addSubmitTokens(tokens, cluster); err != nil {
		t.Fatal(err)
	}
	// oddPath has a '=' in it, after a '/': what precedes it is no name.
	for token, want := range map[string]string{cluster: master.AdminName, alice: "alice", bare: master.DefaultTokenName, odd: master.DefaultTokenName} {
		if got := tokens.Name(token, rpc.Submit); got != want {
			t.Errorf("token named %q, want %q", got, want)
		}
	}
	for _, tc := range []struct {
		flags masterFlags
		want  string
	}{
		{masterFlags{submitTokenFiles: []string{"bob=" + alicePath, "carol=" + alicePath}}, "one token has one name"},
		{masterFlags{submitTokenFiles: []string{"bob=" + file("cluster.token", cluster)}}, "admin's already"},
		{masterFlags{adminACLs: []string{"ops", "driver-20261129140000-0001"}}, "--admin-acls"},
	} {
		if err := tc.flags.addSubmitTokens(rpc.NewTokens(), cluster); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error saying %q", tc.flags, err, tc.want)
		}
	}
}

func TestAHeartbeatRateThatIsNoNumberOfHeartbeatsIsRefused(t *testing.T) {
	for _, rate := range []float64{-1, math.NaN(), math.Inf(1)} {
		err := runMaster(context.Background(), &globals{}, &masterFlags{workerTimeout: time.Minute, maxHeartbeatRate: rate})
		if err == nil || !strings.Contains(err.Error(), "--max-heartbeat-rate") {
			t.Errorf("--max-heartbeat-rate %g: %v; want an error naming the flag", rate, err)
		}
	}
}
