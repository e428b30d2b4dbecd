package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/glint-cluster/glint/internal/process"
	"github.com/glint-cluster/glint/services/driver"
)

// progressLine shows how a running application is doing on w: on a
// terminal one line redrawn in place, elsewhere a plain line each time what
// it says changes.
type progressLine struct {
	w     io.Writer
	tty   bool
	start time.Time

	mu   sync.Mutex
	last string // what was said last, without the elapsed time
	drew bool   // a line is drawn on the terminal
}

func newProgressLine(w io.Writer, start time.Time) *progressLine {
	return &progressLine{w: w, tty: process.IsTerminal(w), start: start}
}

// interval is how often the line is brought up to date.
func (p *progressLine) interval() time.Duration {
	if p.tty {
		return 100 * time.Millisecond
	}
	return time.Second
}

// show says text, with the time elapsed at now.
func (p *progressLine) show(now time.Time, text string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	line := fmt.Sprintf("%s, elapsed %s", text, now.Sub(p.start).Round(100*time.Millisecond))
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		p.drew = true
		return
	}
	if text != p.last {
		fmt.Fprintln(p.w, line)
	}
	p.last = text
}

// end finishes the terminal's line.
func (p *progressLine) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drew {
		fmt.Fprintln(p.w)
		p.drew = false
	}
}

// above returns a writer for output that shares the terminal with the line:
// the line is cleared before each write and drawn again at the next update.
func (p *progressLine) above(out io.Writer) io.Writer {
	if !p.tty {
		return out
	}
	return writerFunc(func(b []byte) (int, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.drew {
			fmt.Fprint(p.w, "\r\033[K")
			p.drew = false
		}
		return out.Write(b)
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// followProgress shows a client-mode application's progress on p until ctx
// ends, then once more as it stands.
func followProgress(ctx context.Context, p *progressLine, d *driver.Driver) {
	say := func() {
		pr := d.Progress()
		p.show(time.Now(), fmt.Sprintf("executors registered %d/%d, tasks %d/%d", pr.Registered, pr.Executors, pr.TasksDone, pr.Tasks))
	}
	t := time.NewTicker(p.interval())
	defer t.Stop()
	for {
		say()
		select {
		case <-ctx.Done():
			say()
			p.end()
			return
		case <-t.C:
		}
	}
}

// masterUnreachable explains a call to the masters that reached none of
// them: what was tried and what to do. Other errors are returned as they are.
func masterUnreachable(masters string, err error) error {
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		return err
	}
	return fmt.Errorf("%w\nis a master running at %s? start one with `glint master`, or point --master at one", err, masters)
}

// unreachableHint is a client interceptor that explains calls to a master at
// url that nothing answered (masterUnreachable).
func unreachableHint(url string) connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			resp, err := next(ctx, req)
			if err != nil {
				return nil, masterUnreachable(url, err)
			}
			return resp, nil
		}
	})
}
