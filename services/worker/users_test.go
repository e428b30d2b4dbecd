package worker

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/contain"
	"github.com/glint-cluster/glint/pkg/rpc"
)

// probeEnv lists the paths a probe child tries to read, ':'-separated.
const probeEnv = "GLINT_WORKER_TEST_PROBE"

// probe prints the process's user, groups and effective capabilities, and
// for each path of probeEnv whether it could read it (a directory: list
// it): "read PATH: ok", or the error.
func probe() {
	groups, _ := syscall.Getgroups()
	fmt.Printf("user uid %d gid %d groups %v\n", os.Getuid(), os.Getgid(), groups)
	for _, path := range strings.Split(os.Getenv(probeEnv), ":") {
		err := readAll(path)
		if err == nil {
			fmt.Printf("read %s: ok\n", path)
		} else {
			fmt.Printf("read %s: %v\n", path, errors.Unwrap(err))
		}
	}
}

func readAll(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Readdirnames(1); err == nil || errors.Is(err, io.EOF) {
		return nil
	}
	_, err = io.ReadAll(f)
	return err
}

// testUIDs is a range of uids for one test, apart from every other test's
// that may run at once (a worker kills what runs as its range's uids).
func testUIDs(t *testing.T, n uint32) contain.UIDRange {
	first := contain.DefaultUIDRange.Last + 1 + uint32(os.Getpid()%100_000)*64 + uint32(len(t.Name())%8)*8
	return contain.UIDRange{First: first, Last: first + n - 1}
}

// reachable makes a directory every user may pass through, for a test whose
// processes run as users of their own.
func reachable(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("only root starts processes as other users: make test runs as root in CI")
	}
	dir, err := os.MkdirTemp("", "glint-users-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// copyBinary copies the test binary into dir with mode perm.
func copyBinary(t *testing.T, dir string, perm os.FileMode) string {
	t.Helper()
	b, err := os.ReadFile(testBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "worker.test")
	if err := os.WriteFile(path, b, perm); err != nil {
		t.Fatal(err)
	}
	return path
}

// Each application's executors run as a uid of their own, with no other
// group and no capability: they read their own work dir, and neither the
// worker's secrets nor another application's dir. When the application's
// last executor ends its dir is the worker's again; an executor binary its
// user cannot execute is refused with a message naming both.
func TestEachApplicationRunsAsAUserOfItsOwnThatReadsNeitherTheWorkersFilesNorAnothersDir(t *testing.T) {
	base := reachable(t)
	exe := copyBinary(t, filepath.Join(base, "bin"), 0o755)
	secret := filepath.Join(base, "cluster.token")
	if err := os.WriteFile(secret, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	users := testUIDs(t, 4)
	work := filepath.Join(base, "work")
	c := startCluster(t, clusterConfig{worker: Config{WorkDir: work, ExecutorUsers: users}})
	command := func(mode string, env map[string]string) *masterv1.Command {
		cmd := executorCommand(t, mode, 0)
		cmd.Args[0] = exe
		for k, v := range env {
			cmd.Env[k] = v
		}
		return cmd
	}

	other := c.registerApp(t, command("hold", nil), 1)
	c.waitMasterExecutor(t, other, 0, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)
	otherDir := filepath.Join(work, other, "0")
	// The probe's own dir: its id is the next the master gives.
	appID := c.registerApp(t, command("probe", map[string]string{probeEnv: strings.Join([]string{secret, otherDir, filepath.Join(otherDir, "stdout"), "."}, ":")}), 1)
	c.waitMasterExecutor(t, appID, 0, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)
	dir := filepath.Join(work, appID, "0")
	out := waitFileContains(t, filepath.Join(dir, "stdout"), "read .: ")

	e, _ := c.worker.executor(t, appID, 0)
	o, _ := c.worker.executor(t, other, 0)
	uids, otherUIDs := tooltest.ProcStatus(t, e.PID, "Uid"), tooltest.ProcStatus(t, o.PID, "Uid")
	var uid uint32
	if _, err := fmt.Sscan(uids, &uid); err != nil || uid < users.First || uid > users.Last {
		t.Fatalf("executor's uids %q, want one of %s", uids, users)
	}
	if want := strings.Repeat(fmt.Sprint(uid)+" ", 3) + fmt.Sprint(uid); uids != want || tooltest.ProcStatus(t, e.PID, "Gid") != want {
		t.Errorf("executor's uids %q and gids %q, want %q for both", uids, tooltest.ProcStatus(t, e.PID, "Gid"), want)
	}
	if otherUIDs == uids {
		t.Errorf("two applications' executors both run as %q", uids)
	}
	if g, capEff := tooltest.ProcStatus(t, e.PID, "Groups"), tooltest.ProcStatus(t, e.PID, "CapEff"); g != "" || capEff != "0000000000000000" {
		t.Errorf("executor's groups %q and capabilities %s, want none", g, capEff)
	}
	for _, want := range []string{
		"read " + secret + ": permission denied",
		"read " + otherDir + ": permission denied",
		"read " + filepath.Join(otherDir, "stdout") + ": permission denied",
		"read .: ok",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("executor's output lacks %q:\n%s", want, out)
		}
	}

	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c.worker.waitFinishedExecutor(t, appID, 0)
	tooltest.Eventually(t, "the ended application's dir taken back", func() bool {
		fi, err := os.Stat(dir)
		return err == nil && fi.Sys().(*syscall.Stat_t).Uid == 0 && fi.Mode().Perm() == 0o700
	})

	private := copyBinary(t, filepath.Join(base, "private"), 0o755)
	if err := os.Chmod(filepath.Dir(private), 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := command("exit", nil)
	cmd.Args[0] = private
	refused := c.registerApp(t, cmd, 1)
	info := c.waitMasterExecutor(t, refused, 0, masterv1.ExecutorState_EXECUTOR_STATE_FAILED)
	want := fmt.Sprintf("cannot execute %s: %s is drwx------, owned by uid 0: others cannot search it", private, filepath.Dir(private))
	if msg := info.GetMessage(); !strings.Contains(msg, want) || !strings.Contains(msg, "the user of "+refused) {
		t.Errorf("refused launch's message %q, want it to name its user and %q", msg, want)
	}
}

// A worker restarted after a SIGKILL takes back the work dirs its users
// still own.
func TestAWorkerTakesBackTheDirsItsUsersOwnWhenItStarts(t *testing.T) {
	base := reachable(t)
	users := testUIDs(t, 2)
	dir := filepath.Join(base, "app-1", "0")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, int(users.First), int(users.First)); err != nil {
		t.Fatal(err)
	}
	if err := reclaimDirs(base, users); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != 0 || fi.Mode().Perm() != 0o700 {
		t.Errorf("dir left by uid %d is uid %d's, mode %s; want root's, 0700", users.First, uid, fi.Mode())
	}
}

// With TLS, a worker whose processes run as users of their own needs a key
// they cannot read and an identity of theirs that they can.
func TestExecutorUsersWithTLSNeedTheirOwnReadableIdentity(t *testing.T) {
	base := reachable(t)
	file := func(name string, perm os.FileMode) string {
		p := filepath.Join(base, name)
		if err := os.WriteFile(p, nil, perm); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key, exposed := file("worker.key", 0o600), file("exposed.key", 0o644)
	cert, ca := file("worker.crt", 0o644), file("ca.crt", 0o644)
	execCert, execKey, hidden := file("executor.crt", 0o644), file("executor.key", 0o644), file("hidden.key", 0o600)
	for _, tc := range []struct {
		name          string
		tls, executor rpc.TLSFiles
		want          string
	}{
		{"no TLS", rpc.TLSFiles{}, rpc.TLSFiles{}, ""},
		{"the worker's own", rpc.TLSFiles{Cert: cert, Key: key, CA: ca}, rpc.TLSFiles{}, "give them a certificate of their own"},
		{"a key others read", rpc.TLSFiles{Cert: cert, Key: exposed, CA: ca}, rpc.TLSFiles{Cert: execCert, Key: execKey, CA: ca}, "--tls-key-file: " + exposed + " is readable by every user"},
		{"their key hidden", rpc.TLSFiles{Cert: cert, Key: key, CA: ca}, rpc.TLSFiles{Cert: execCert, Key: hidden, CA: ca}, "--executor-tls-key-file: the executor users cannot read it"},
		{"theirs", rpc.TLSFiles{Cert: cert, Key: key, CA: ca}, rpc.TLSFiles{Cert: execCert, Key: execKey, CA: ca}, ""},
	} {
		err := checkSecretFiles(Config{TLS: tc.tls, ExecutorTLS: tc.executor})
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// A work dir the worker gives to its user, or takes back, is changed
// through itself: a link that took its place is refused, and what it leads
// to is left as it was.
func TestGivingOrTakingBackAWorkDirFollowsNoLink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root gives directories to other users: make test runs as root in CI")
	}
	app := filepath.Join(t.TempDir(), "app-20260101000000-0000")
	precious := t.TempDir()
	if err := os.Mkdir(app, 0o711); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(app, "0")
	if err := os.Symlink(precious, link); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(precious)
	if err != nil {
		t.Fatal(err)
	}
	if err := giveDir(&launch{dir: link, uid: testUIDs(t, 1).First}); err == nil {
		t.Error("giveDir gave a link")
	}
	if err := reclaimDir(link); err == nil {
		t.Error("reclaimDir took back a link")
	}
	after, err := os.Stat(precious)
	if err != nil {
		t.Fatal(err)
	}
	if after.Mode() != before.Mode() || after.Sys().(*syscall.Stat_t).Uid != before.Sys().(*syscall.Stat_t).Uid {
		t.Errorf("the link's target went from %v uid %d to %v uid %d", before.Mode(), before.Sys().(*syscall.Stat_t).Uid, after.Mode(), after.Sys().(*syscall.Stat_t).Uid)
	}
}
