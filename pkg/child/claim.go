package child

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// ClaimFDEnv tells a prestarted executor (`glint worker --prestart-executors`)
// which of its file descriptors is its end of the claim channel: a Unix
// socket pair the worker made for it alone, over which the worker hands it,
// once, the launch it becomes (Claim) with its log files.
const ClaimFDEnv = "GLINT_CLAIM_FD"

// MaxClaimBytes bounds a claim message, one datagram of the claim channel (a
// SOCK_SEQPACKET pair, within its default buffer); a launch whose claim would
// be larger starts a process instead.
const MaxClaimBytes = 128 << 10

// Claim is the launch a prestarted executor becomes: the arguments that
// follow `glint executor` in the application's command, the GLINT_*
// variables and trace context (TRACEPARENT) a started process would have
// found in its environment, and its work directory.
type Claim struct {
	Args []string `json:"args"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir"`
}

// ClaimChannel makes a claim channel: the worker keeps its end, the
// prestarted process inherits the other.
func ClaimChannel() (worker, process *os.File, err error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("claim channel: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "claim"), os.NewFile(uintptr(fds[1]), "claim"), nil
}

// SendClaim hands c and the process's stdout and stderr to the prestarted
// executor at the other end of conn, the worker's end of its claim channel.
func SendClaim(conn *os.File, c Claim, stdout, stderr *os.File) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if len(b) > MaxClaimBytes {
		return fmt.Errorf("claim of %d bytes: the limit is %d", len(b), MaxClaimBytes)
	}
	rights := syscall.UnixRights(int(stdout.Fd()), int(stderr.Fd()))
	if err := syscall.Sendmsg(int(conn.Fd()), b, rights, nil, 0); err != nil {
		return fmt.Errorf("send claim: %w", err)
	}
	return nil
}

// ErrNotPrestarted is ReceiveClaim's answer in a process that was started
// for its launch (no ClaimFDEnv).
var ErrNotPrestarted = errors.New("not a prestarted executor")

// Claimed is a claim received; Registered tells the worker the executor
// registered with its driver, and closes the channel, which serves once. If
// the process ends first, the worker sees the channel close.
type Claimed struct {
	Claim
	fd int
}

// Registered tells the worker the launch reached its driver: the worker then
// starts a replacement, which so does not compete with the launch for CPU.
func (c *Claimed) Registered() {
	if c.fd < 0 {
		return
	}
	_, _ = syscall.Write(c.fd, []byte{1})
	syscall.Close(c.fd)
	c.fd = -1
}

// ReceiveClaim waits for this prestarted process's claim: it checks that the
// other end of the channel is its worker (GLINT_WORKER_PID, by the kernel's
// peer credentials), reads the claim, makes the log files its stdout and
// stderr, sets the claim's variables in its environment and moves to its
// work directory.
func ReceiveClaim() (*Claimed, error) {
	fd, err := inheritedFD(ClaimFDEnv)
	if err != nil {
		return nil, err
	}
	if fd < 0 {
		return nil, ErrNotPrestarted
	}
	os.Unsetenv(ClaimFDEnv)
	c, err := receiveClaim(fd)
	if err != nil {
		syscall.Close(fd)
		return nil, err
	}
	return &Claimed{Claim: c, fd: fd}, nil
}

func receiveClaim(fd int) (Claim, error) {
	cred, err := syscall.GetsockoptUcred(fd, syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	if err != nil {
		return Claim{}, fmt.Errorf("claim channel: %w", err)
	}
	if worker, _ := strconv.Atoi(os.Getenv(WorkerPIDEnv)); worker <= 0 || int(cred.Pid) != worker {
		return Claim{}, fmt.Errorf("claim channel: the peer is process %d, not the worker (%s=%q)", cred.Pid, WorkerPIDEnv, os.Getenv(WorkerPIDEnv))
	}
	buf := make([]byte, MaxClaimBytes+1)
	oob := make([]byte, syscall.CmsgSpace(2*4))
	n, oobn, flags, _, err := syscall.Recvmsg(fd, buf, oob, syscall.MSG_CMSG_CLOEXEC)
	if err != nil {
		return Claim{}, fmt.Errorf("receive claim: %w", err)
	}
	fds, err := receivedFDs(oob[:oobn])
	if err != nil {
		return Claim{}, err
	}
	defer func() {
		for _, f := range fds {
			syscall.Close(f)
		}
	}()
	if n == 0 {
		return Claim{}, errors.New("claim channel closed before a claim came")
	}
	if n > MaxClaimBytes || flags&(syscall.MSG_TRUNC|syscall.MSG_CTRUNC) != 0 || len(fds) != 2 {
		return Claim{}, fmt.Errorf("claim of %d bytes with %d files (flags %#x): want at most %d bytes and 2 files", n, len(fds), flags, MaxClaimBytes)
	}
	var c Claim
	if err := json.Unmarshal(buf[:n], &c); err != nil {
		return Claim{}, fmt.Errorf("decode claim: %w", err)
	}
	for i, f := range fds {
		if err := syscall.Dup3(f, 1+i, 0); err != nil {
			return Claim{}, fmt.Errorf("take the claim's log files: %w", err)
		}
	}
	for _, kv := range c.Env {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return Claim{}, fmt.Errorf("claim: malformed environment entry")
		}
		os.Setenv(k, val)
	}
	if err := os.Chdir(c.Dir); err != nil {
		return Claim{}, fmt.Errorf("claim: %w", err)
	}
	return c, nil
}

// receivedFDs are the file descriptors passed in a message's control data.
func receivedFDs(oob []byte) ([]int, error) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("claim's control data: %w", err)
	}
	var fds []int
	for _, m := range msgs {
		rights, err := syscall.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		fds = append(fds, rights...)
	}
	return fds, nil
}
