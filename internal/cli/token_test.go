package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/glint-cluster/glint/internal/process"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// The machine's token goes to masters on a loopback address only: another
// host could not use it, and would learn it. --token-file's goes anywhere.
func TestTheMachinesTokenGoesToLoopbackMastersOnly(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	_, _, machine, err := localToken()
	if err != nil {
		t.Fatal(err)
	}
	given := filepath.Join(t.TempDir(), "given.token")
	if err := os.WriteFile(given, []byte(rpc.NewToken()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	givenToken, _ := rpc.ReadToken("", given)
	for _, tc := range []struct {
		tokenFile string
		masters   []string
		want      string
	}{
		{"", []string{"http://127.0.0.1:7077"}, machine},
		{"", []string{"http://localhost:7077", "http://[::1]:7077"}, machine},
		{"", []string{"http://127.0.0.1:7077", "http://192.0.2.1:7077"}, ""},
		{"", []string{"http://master.example:7077"}, ""},
		{given, []string{"http://192.0.2.1:7077"}, givenToken},
		{given, []string{"http://127.0.0.1:7077"}, givenToken},
	} {
		g := &globals{&process.Globals{TokenFile: tc.tokenFile}}
		if got, err := g.clientToken(tc.masters); err != nil || got != tc.want {
			t.Errorf("--token-file %q, masters %v: token %q, %v; want %q", tc.tokenFile, tc.masters, got, err, tc.want)
		}
	}
}

// A new token is linked to its name only when no file is there: the file a
// process that started at once made is kept, never replaced.
func TestANewTokenNeverReplacesOneThere(t *testing.T) {
	path := filepath.Join(t.TempDir(), "glint", "cluster.token")
	if made, err := linkNewToken(path); err != nil || !made {
		t.Fatalf("first: made %v, %v", made, err)
	}
	first, err := rpc.ReadToken("", path)
	if err != nil {
		t.Fatal(err)
	}
	if made, err := linkNewToken(path); err != nil || made {
		t.Errorf("second: made %v, %v; want the file kept", made, err)
	}
	if again, _ := rpc.ReadToken("", path); again != first {
		t.Errorf("the token was replaced")
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("files left beside the token: %v", entries)
	}
}

// Without a config directory, a master or worker without --token-file says
// what is missing.
func TestNoConfigDirectoryIsSaid(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("HOME", "")
	if _, _, _, err := localToken(); err == nil || !strings.Contains(err.Error(), "no --token-file") {
		t.Errorf("localToken without a config directory: %v", err)
	}
}
