package child

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// secretsChild reads its secrets as a launched process does and prints
// them, whether the variable naming their pipe is gone and whether the pipe
// is closed; or why it could not read them (exit 2).
func secretsChild() int {
	fd := os.Getenv(SecretsFDEnv)
	s, err := ReceiveSecrets()
	if err != nil {
		fmt.Println("error:", err)
		return 2
	}
	closed := "closed"
	if n, err := strconv.Atoi(fd); err == nil {
		if _, err := syscall.Seek(n, 0, 0); err != syscall.EBADF {
			closed = "open"
		}
	}
	fmt.Printf("app token %q, submit token %q, %s=%q, pipe %s\n", s.AppToken, s.SubmitToken, SecretsFDEnv, os.Getenv(SecretsFDEnv), closed)
	return 0
}

// runSecretsChild runs secretsChild with env and fd 3 (when not nil), and
// returns its exit status and output. It must end within a minute.
func runSecretsChild(t *testing.T, fd3 *os.File, env ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), append([]string{roleEnv + "=secrets"}, env...)...)
	if fd3 != nil {
		cmd.ExtraFiles = []*os.File{fd3}
	}
	out, _ := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the child did not end within a minute: %q", out)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// pipeHolding is the read end of a pipe holding b, its write end closed.
func pipeHolding(t *testing.T, b []byte) *os.File {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() { r.Close() })
	return r
}

func TestAStartedProcessReadsItsSecretsFromItsPipeOnceAndClosesIt(t *testing.T) {
	pipe, err := SecretsPipe(Secrets{AppToken: "the-app-token", SubmitToken: "the-submit-token"})
	if err != nil {
		t.Fatal(err)
	}
	defer pipe.Close()
	code, out := runSecretsChild(t, pipe, SecretsFDEnv+"=3", WorkerPIDEnv+"="+strconv.Itoa(os.Getpid()))
	want := fmt.Sprintf("app token %q, submit token %q, %s=\"\", pipe closed\n", "the-app-token", "the-submit-token", SecretsFDEnv)
	if code != 0 || out != want {
		t.Errorf("child exit %d, output %q; want 0 and %q", code, out, want)
	}
}

func TestAProcessRunByHandHasNoSecrets(t *testing.T) {
	code, out := runSecretsChild(t, nil)
	if want := fmt.Sprintf("app token \"\", submit token \"\", %s=\"\", pipe closed\n", SecretsFDEnv); code != 0 || out != want {
		t.Errorf("child exit %d, output %q; want 0 and %q", code, out, want)
	}
}

// TestASecretsMessageThatIsAbsentMalformedOrOversizedEndsTheProcessWithAClearError:
// each bad message is an error that names what is wrong, never quotes the
// message, and the process exits instead of waiting.
func TestASecretsMessageThatIsAbsentMalformedOrOversizedEndsTheProcessWithAClearError(t *testing.T) {
	worker := WorkerPIDEnv + "=" + strconv.Itoa(os.Getpid())
	regular, err := os.CreateTemp(t.TempDir(), "secrets")
	if err != nil {
		t.Fatal(err)
	}
	defer regular.Close()
	for _, tc := range []struct {
		name string
		fd3  *os.File
		env  []string
		want string
	}{
		{"absent", nil, []string{worker}, "without its secrets (" + SecretsFDEnv + " unset)"},
		{"empty", pipeHolding(t, nil), []string{worker, SecretsFDEnv + "=3"}, "secrets message empty"},
		{"malformed", pipeHolding(t, []byte(`{"version":1,"appToken":"s3cr3t`)), []string{worker, SecretsFDEnv + "=3"}, "secrets message of 31 bytes malformed"},
		{"oversized", pipeHolding(t, []byte(`{"version":1,"appToken":"`+strings.Repeat("s", MaxSecretsBytes)+`"}`)), []string{worker, SecretsFDEnv + "=3"}, "secrets message of more than 4096 bytes"},
		{"of another version", pipeHolding(t, []byte(`{"version":2,"appToken":"s3cr3t"}`)), []string{worker, SecretsFDEnv + "=3"}, "secrets message of version 2: this build reads version 1"},
		{"not a pipe", regular, []string{worker, SecretsFDEnv + "=3"}, SecretsFDEnv + "=3: not a pipe"},
		{"no descriptor number", nil, []string{worker, SecretsFDEnv + "=three"}, SecretsFDEnv + `="three": want a file descriptor number`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runSecretsChild(t, tc.fd3, tc.env...)
			if code != 2 || !strings.Contains(out, tc.want) || strings.Contains(out, "s3cr3t") || strings.Contains(out, "sss") {
				t.Errorf("child exit %d, output %q; want 2 and %q, no secret quoted", code, out, tc.want)
			}
		})
	}
}

func TestASecretsMessageNotEndedInTimeIsAnError(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close() // held open: the message never ends
	if _, err := w.Write([]byte(`{"version":1}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := readSecrets(r, 50*time.Millisecond); err == nil || !strings.Contains(err.Error(), "not ended within 50ms") {
		t.Errorf("read of a message that never ends: %v, want it not ended in time", err)
	}
}

func TestSecretsTooLongForAPipeAreRefusedBeforeAnyProcessStarts(t *testing.T) {
	if _, err := SecretsPipe(Secrets{AppToken: strings.Repeat("t", MaxSecretsBytes)}); err == nil || !strings.Contains(err.Error(), "the limit is 4096") {
		t.Errorf("secrets of more than %d bytes: %v, want refused", MaxSecretsBytes, err)
	}
}

func TestAClaimCarriesItsSecrets(t *testing.T) {
	c, err := claimOverChannel(t, func(end *os.File) {
		_ = SendClaim(end, Claim{Args: []string{"--app-id", "app-1"}, Secrets: Secrets{AppToken: "the-app-token"}, Dir: t.TempDir()})
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := (Secrets{Version: SecretsVersion, AppToken: "the-app-token"}); c.Secrets != want {
		t.Errorf("claimed secrets %+v, want %+v", c.Secrets, want)
	}
}

func TestAClaimWithSecretsOfAnotherVersionIsRefused(t *testing.T) {
	_, err := claimOverChannel(t, func(end *os.File) {
		_ = send(end, []byte(`{"args":[],"env":[],"secrets":{"version":2,"appToken":"s3cr3t"},"dir":"/"}`), nil)
	})
	if err == nil || !strings.Contains(err.Error(), "secrets message of version 2") || strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("claim with secrets of version 2: %v, want refused, no secret quoted", err)
	}
}
