package child

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// ClaimFDEnv tells a prestarted executor (`glint worker --prestart-executors`)
// which of its file descriptors is its end of the claim channel: a Unix
// socket pair the worker made for it alone, over which the worker hands it,
// once, the launch it becomes (Claim), then its log files (SendLogs): the
// executor takes up its launch while the worker makes its work directory.
const ClaimFDEnv = "GLINT_CLAIM_FD"

// MaxClaimBytes bounds a claim message, one datagram of the claim channel (a
// SOCK_SEQPACKET pair, within its default buffer); a launch whose claim would
// be larger starts a process instead.
const MaxClaimBytes = 128 << 10

// Claim is the launch a prestarted executor becomes: the arguments that
// follow `glint executor` in the application's command, the GLINT_*
// variables and trace context (TRACEPARENT) a started process would have
// found in its environment, the secrets it would have read from its secrets
// pipe, and its work directory (made after the claim: Claimed.Settle moves
// into it).
type Claim struct {
	Args    []string `json:"args"`
	Env     []string `json:"env"`
	Secrets Secrets  `json:"secrets"`
	Dir     string   `json:"dir"`
	// UID, when set, is the user the executor becomes (its application's,
	// on a worker that runs each as a user of its own): the process, which
	// the worker started as root, drops to it, its group and no other,
	// before it takes up anything of its launch.
	UID uint32 `json:"uid,omitempty"`
}

// ClaimChannel makes a claim channel: the worker keeps its end, which its
// poller serves (closing it ends a read waiting on it), the prestarted process
// inherits the other, which blocks.
func ClaimChannel() (worker, process *os.File, err error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC|syscall.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("claim channel: %w", err)
	}
	if err := syscall.SetNonblock(fds[1], false); err != nil {
		syscall.Close(fds[0])
		syscall.Close(fds[1])
		return nil, nil, fmt.Errorf("claim channel: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "claim"), os.NewFile(uintptr(fds[1]), "claim"), nil
}

// SendClaim hands c to the prestarted executor at the other end of conn,
// the worker's end of its claim channel. Its work directory and log files
// follow with SendLogs: the executor takes up its launch meanwhile.
func SendClaim(conn *os.File, c Claim) error {
	c.Secrets.Version = SecretsVersion
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if len(b) > MaxClaimBytes {
		return fmt.Errorf("claim of %d bytes: the limit is %d", len(b), MaxClaimBytes)
	}
	if err := send(conn, b, nil); err != nil {
		return fmt.Errorf("send claim: %w", err)
	}
	return nil
}

// send writes one message with oob, its control data, to conn.
func send(conn *os.File, b, oob []byte) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Write(func(fd uintptr) bool {
		serr = syscall.Sendmsg(int(fd), b, oob, nil, 0)
		return serr != syscall.EAGAIN
	}); err != nil {
		return err
	}
	return serr
}

// Ready waits for the prestarted process at the other end of conn to say it
// is ready for its claim: it has made what needs no launch. An error means it
// ended first, or conn was closed.
func Ready(conn *os.File) error {
	b := make([]byte, len(readyMessage)+1)
	n, err := conn.Read(b)
	if err != nil {
		return fmt.Errorf("prestarted executor not ready: %w", err)
	}
	if string(b[:n]) != readyMessage {
		return fmt.Errorf("prestarted executor not ready: it sent %q", b[:n])
	}
	return nil
}

// readyMessage is what a prestarted process sends when it is ready.
const readyMessage = "R"

// logsMessage is the one byte that carries the log files over the channel
// (a datagram of none would read as the channel's end).
const logsMessage = "L"

// SendLogs hands the claimed executor at the other end of conn its stdout
// and stderr, made in its work directory, which so exists.
func SendLogs(conn *os.File, stdout, stderr *os.File) error {
	if err := send(conn, []byte(logsMessage), syscall.UnixRights(int(stdout.Fd()), int(stderr.Fd()))); err != nil {
		return fmt.Errorf("send log files: %w", err)
	}
	return nil
}

// ErrNotPrestarted is ReceiveClaim's answer in a process that was started
// for its launch (no ClaimFDEnv).
var ErrNotPrestarted = errors.New("not a prestarted executor")

// Claimed is a claim received. Its log files and work directory come after
// it: Settle waits for them, and until they are in place what is written to
// Hold's writer is kept. Registered tells the worker the executor registered
// with its driver, and closes the channel, which serves once. If the process
// ends first, the worker sees the channel close.
type Claimed struct {
	Claim
	fd int

	settle    sync.Once
	settleErr error
	held      *heldWriter
}

// Hold returns a writer that keeps what is written to it until the log files
// are in place, then writes it, and what follows, to w: the executor's log
// output, which so reaches its log files however early it is written. It
// starts taking the files as soon as they come. Call it at most once.
func (c *Claimed) Hold(w io.Writer) io.Writer {
	c.held = &heldWriter{w: w, held: true, released: make(chan struct{})}
	go func() { _ = c.Settle() }()
	return c.held
}

// Settle waits until the log files the worker sends once it made them in the
// claim's work directory are this process's stdout and stderr and the
// process is in that directory, and held output went through. An error means
// the worker ended the launch (or died) before the files came: the executor
// must exit.
func (c *Claimed) Settle() error {
	c.settle.Do(func() {
		c.settleErr = receiveLogs(c.fd, c.Dir)
		if c.held != nil {
			c.held.release()
		}
	})
	return c.settleErr
}

// Registered tells the worker the launch reached its driver: the worker then
// reports it running and starts a replacement, which so do not compete with
// the launch for CPU.
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
// peer credentials), tells it the process is ready (the worker offers only
// ready processes to launches), reads the claim and sets the claim's
// variables in its environment. Settle then takes its log files and work
// directory.
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
	// The decoder is made ready too: its first use is slow.
	var c Claim
	if err := json.Unmarshal([]byte(`{"args":[""],"env":[""],"secrets":{"version":0,"appToken":"","submitToken":""},"dir":""}`), &c); err != nil {
		return Claim{}, err
	}
	if _, err := syscall.Write(fd, []byte(readyMessage)); err != nil {
		return Claim{}, fmt.Errorf("claim channel: %w", err)
	}
	buf := make([]byte, MaxClaimBytes+1)
	n, fds, err := receive(fd, buf)
	closeAll(fds)
	if err != nil {
		return Claim{}, fmt.Errorf("receive claim: %w", err)
	}
	if n == 0 {
		return Claim{}, errors.New("claim channel closed before a claim came")
	}
	if n > MaxClaimBytes || len(fds) != 0 {
		return Claim{}, fmt.Errorf("claim of %d bytes with %d files: want at most %d bytes and none", n, len(fds), MaxClaimBytes)
	}
	c = Claim{}
	if err := json.Unmarshal(buf[:n], &c); err != nil {
		return Claim{}, fmt.Errorf("decode claim: %w", err)
	}
	if err := c.Secrets.check(); err != nil {
		return Claim{}, fmt.Errorf("claim: %w", err)
	}
	if c.UID != 0 {
		if err := becomeUser(int(c.UID)); err != nil {
			return Claim{}, fmt.Errorf("claim: %w", err)
		}
	}
	for _, kv := range c.Env {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return Claim{}, fmt.Errorf("claim: malformed environment entry")
		}
		os.Setenv(k, val)
	}
	return c, nil
}

// becomeUser makes every thread of this process uid, of group uid and of
// no supplementary group, for good, and asks again for SIGTERM at the
// worker's death: the kernel forgets that request when a process's
// credentials change.
func becomeUser(uid int) error {
	// Each set*id call stops every thread of the process: one is saved
	// when there is no group to drop (the worker starts its prestarted
	// executors in none).
	if groups, err := syscall.Getgroups(); err != nil || len(groups) > 0 {
		if err := syscall.Setgroups([]int{}); err != nil {
			return fmt.Errorf("drop supplementary groups: %w", err)
		}
	}
	if err := syscall.Setgid(uid); err != nil {
		return fmt.Errorf("become group %d: %w", uid, err)
	}
	if err := syscall.Setuid(uid); err != nil {
		return fmt.Errorf("become user %d: %w", uid, err)
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0); errno != 0 {
		return fmt.Errorf("ask for SIGTERM at the worker's death: %w", errno)
	}
	return nil
}

// receiveLogs takes the log files that follow a claim as stdout and stderr
// and moves into dir, the claim's work directory.
func receiveLogs(fd int, dir string) error {
	buf := make([]byte, len(logsMessage)+1)
	n, fds, err := receive(fd, buf)
	defer closeAll(fds)
	if err != nil {
		return fmt.Errorf("receive log files: %w", err)
	}
	if n == 0 {
		return errors.New("claim channel closed before the log files came: the worker ended the launch")
	}
	if string(buf[:n]) != logsMessage || len(fds) != 2 {
		return fmt.Errorf("log files message of %d bytes with %d files: want %q with 2", n, len(fds), logsMessage)
	}
	for i, f := range fds {
		if err := syscall.Dup3(f, 1+i, 0); err != nil {
			return fmt.Errorf("take the claim's log files: %w", err)
		}
	}
	if err := os.Chdir(dir); err != nil {
		return fmt.Errorf("claim: %w", err)
	}
	return nil
}

// receive reads one message of the channel into buf, with the file
// descriptors passed along (at most 2; the caller closes them). A message
// cut short, or its files, is an error.
func receive(fd int, buf []byte) (int, []int, error) {
	oob := make([]byte, syscall.CmsgSpace(2*4))
	n, oobn, flags, _, err := syscall.Recvmsg(fd, buf, oob, syscall.MSG_CMSG_CLOEXEC)
	if err != nil {
		return 0, nil, err
	}
	fds, err := receivedFDs(oob[:oobn])
	if err == nil && flags&(syscall.MSG_TRUNC|syscall.MSG_CTRUNC) != 0 {
		err = fmt.Errorf("message of more than %d bytes or 2 files (flags %#x)", len(buf)-1, flags)
	}
	return n, fds, err
}

func closeAll(fds []int) {
	for _, f := range fds {
		syscall.Close(f)
	}
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

// maxHeldOutput bounds the output a claimed executor keeps before its log
// files come; a write past it waits for them.
const maxHeldOutput = 64 << 10

// heldWriter keeps what is written until release, then writes it, and all
// that follows, to w.
type heldWriter struct {
	w        io.Writer
	mu       sync.Mutex
	buf      []byte
	held     bool
	released chan struct{}
}

func (h *heldWriter) Write(p []byte) (int, error) {
	h.mu.Lock()
	if h.held && len(h.buf)+len(p) <= maxHeldOutput {
		h.buf = append(h.buf, p...)
		h.mu.Unlock()
		return len(p), nil
	}
	h.mu.Unlock()
	<-h.released
	return h.w.Write(p)
}

// release writes what was kept and lets every later write through.
func (h *heldWriter) release() {
	h.mu.Lock()
	_, _ = h.w.Write(h.buf)
	h.buf, h.held = nil, false
	h.mu.Unlock()
	close(h.released)
}
