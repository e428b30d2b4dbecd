package child

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"
)

// SecretsFDEnv names the file descriptor from which a process a worker
// started reads its secrets (Secrets): the read end of a pipe that holds one
// message and then ends. The secrets themselves are never in a launched
// process's environment or on its command line, where /proc/PID/environ and
// /proc/PID/cmdline would show them to every process of the user (the
// kernel keeps a process's initial environment however it later unsets a
// variable). A prestarted executor receives its secrets with its claim
// (Claim.Secrets) instead.
const SecretsFDEnv = "GLINT_SECRETS_FD"

// SecretsVersion is the version of the secrets message this build writes,
// and the only one it reads: a process of another build is refused clearly,
// never half understood.
const SecretsVersion = 1

// MaxSecretsBytes bounds a secrets message: what a pipe always holds (one
// page, even for a user at the kernel's pipe-buffer limit), so that the
// worker writes it whole before the process starts and never waits.
const MaxSecretsBytes = 4096

// SecretsTimeout bounds how long a started process waits for its secrets
// message to end: the worker wrote it before the process started, so only a
// descriptor that is not the worker's pipe makes it wait.
const SecretsTimeout = 10 * time.Second

// Secrets is what a worker hands a process it launches that must not sit in
// its environment or on its command line. The same message, encoded the same
// way, travels in a pipe (a started process) and in a claim (a prestarted
// executor).
type Secrets struct {
	// Version is SecretsVersion; encode sets it.
	Version int `json:"version"`
	// AppToken is an executor's application token: it calls its driver
	// with it and accepts calls only with it.
	AppToken string `json:"appToken,omitempty"`
	// SubmitToken is a cluster-mode driver's submit token, which the
	// master made for it: it registers its application with it.
	SubmitToken string `json:"submitToken,omitempty"`
}

// check refuses a message of another version.
func (s Secrets) check() error {
	if s.Version != SecretsVersion {
		return fmt.Errorf("secrets message of version %d: this build reads version %d (the worker and this program are of different builds)", s.Version, SecretsVersion)
	}
	return nil
}

// encodeSecrets is s as the message a pipe carries.
func encodeSecrets(s Secrets) ([]byte, error) {
	s.Version = SecretsVersion
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxSecretsBytes {
		return nil, fmt.Errorf("secrets message of %d bytes: the limit is %d", len(b), MaxSecretsBytes)
	}
	return b, nil
}

// decodeSecrets reads a message encodeSecrets made; any other is an error
// that quotes none of it (it may hold a secret).
func decodeSecrets(b []byte) (Secrets, error) {
	var s Secrets
	if len(b) == 0 {
		return s, errors.New("secrets message empty: the worker sent none")
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("secrets message of %d bytes malformed", len(b))
	}
	return s, s.check()
}

// SecretsPipe returns the read end of a pipe holding s, to hand to the
// process the worker starts (exec.Cmd.ExtraFiles, its number in
// SecretsFDEnv); the caller closes it once the process started. The
// message is written whole and the write end closed before it returns.
func SecretsPipe(s Secrets) (*os.File, error) {
	b, err := encodeSecrets(s)
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("secrets pipe: %w", err)
	}
	_, err = w.Write(b)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("secrets pipe: %w", err)
	}
	return r, nil
}

// ReceiveSecrets reads this process's secrets once, from the pipe
// SecretsFDEnv names, within SecretsTimeout and MaxSecretsBytes, and closes
// it (nothing the process starts inherits it, nor the variable). A process
// run by hand (neither SecretsFDEnv nor WorkerPIDEnv set) has none: it gets
// the zero Secrets. A process its worker launched without them, a message
// malformed, too long, of another version or not ended in time, is an
// error: the process must exit.
func ReceiveSecrets() (Secrets, error) {
	fd, err := inheritedFD(SecretsFDEnv)
	if err != nil {
		return Secrets{}, err
	}
	os.Unsetenv(SecretsFDEnv)
	if fd < 0 {
		if pid := os.Getenv(WorkerPIDEnv); pid != "" {
			return Secrets{}, fmt.Errorf("launched by worker %s without its secrets (%s unset): the worker is of another build", pid, SecretsFDEnv)
		}
		return Secrets{}, nil
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		return Secrets{}, fmt.Errorf("%s=%d: not a pipe", SecretsFDEnv, fd)
	}
	syscall.CloseOnExec(fd)
	// Non-blocking, the file is the runtime poller's: its read can time out.
	if err := syscall.SetNonblock(fd, true); err != nil {
		return Secrets{}, fmt.Errorf("%s=%d: %w", SecretsFDEnv, fd, err)
	}
	f := os.NewFile(uintptr(fd), "secrets")
	defer f.Close()
	return readSecrets(f, SecretsTimeout)
}

// readSecrets reads one secrets message from f, which must end within
// timeout and MaxSecretsBytes.
func readSecrets(f *os.File, timeout time.Duration) (Secrets, error) {
	if err := f.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return Secrets{}, fmt.Errorf("secrets pipe: %w", err)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxSecretsBytes+1))
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return Secrets{}, fmt.Errorf("secrets message not ended within %s", timeout)
	case err != nil:
		return Secrets{}, fmt.Errorf("read secrets message: %w", err)
	case len(b) > MaxSecretsBytes:
		return Secrets{}, fmt.Errorf("secrets message of more than %d bytes", MaxSecretsBytes)
	}
	return decodeSecrets(b)
}
