package child

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// claimedChild takes its claim as a prestarted process would and prints its
// credentials as /proc/self/status shows them.
func claimedChild() int {
	if _, err := ReceiveClaim(); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	for line := range strings.Lines(string(status)) {
		if k, _, _ := strings.Cut(line, ":"); k == "Uid" || k == "Gid" || k == "Groups" {
			fmt.Print(strings.Join(strings.Fields(line), " "), "\n")
		}
	}
	return 0
}

// A prestarted process started as root with supplementary groups becomes its
// claim's uid in all of its ids and in no group: a group of root's would
// still open what that group may.
func TestAClaimsUserIsTheProcesssEveryIDAndItKeepsNoGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root becomes another user: make test runs as root in CI")
	}
	mine, theirs, err := ClaimChannel()
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), roleEnv+"=claimed", WorkerPIDEnv+"="+strconv.Itoa(os.Getpid()), ClaimFDEnv+"=3")
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Groups: []uint32{4, 27}}}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	defer cmd.Wait()
	if err := Ready(mine); err != nil {
		t.Fatal(err)
	}
	const uid = 1879113728 // past the worker's default range, which tests leave to workers
	if err := SendClaim(mine, Claim{Dir: t.TempDir(), UID: uid}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for sc := bufio.NewScanner(out); sc.Scan(); {
		got = append(got, sc.Text())
	}
	ids := fmt.Sprintf("%d %d %d %d", uid, uid, uid, uid)
	want := []string{"Uid: " + ids, "Gid: " + ids, "Groups:"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("claimed process's credentials:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
