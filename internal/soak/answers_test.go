package soak

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/glint-cluster/glint/pkg/app"
	"github.com/glint-cluster/glint/pkg/builtin"
)

// inProcess runs an application's driver function with its tasks run in
// the test's process, one after another: what the application prints for
// its arguments, without a cluster.
type inProcess struct {
	a   *app.App
	out bytes.Buffer
}

func (c *inProcess) AppID() string              { return "app-20261202000000-0000" }
func (c *inProcess) Conf(string) (string, bool) { return "", false }
func (c *inProcess) Stdout() io.Writer          { return &c.out }
func (c *inProcess) RunTasks(ctx context.Context, task string, inputs [][]byte) ([][]byte, error) {
	var outs [][]byte
	for _, in := range inputs {
		out, err := c.a.Tasks[task](ctx, in)
		if err != nil {
			return nil, err
		}
		outs = append(outs, out)
	}
	return outs, nil
}

// printed is what application a prints for args, as lines.
func printed(t *testing.T, a *app.App, args ...string) []string {
	t.Helper()
	c := &inProcess{a: a}
	if err := a.Run(context.Background(), c, args); err != nil {
		t.Fatalf("%s %v: %v", a.Name, args, err)
	}
	return strings.Split(strings.TrimSuffix(c.out.String(), "\n"), "\n")
}

func TestTheKnownAnswersAreWhatTheApplicationsPrint(t *testing.T) {
	for _, n := range []int{1, 4, 12} {
		if got, want := printed(t, builtin.Pi(), fmt.Sprint(n)), []string{PiLine(n)}; !slices.Equal(got, want) {
			t.Errorf("pi %d printed %q; PiLine says %q", n, got, want)
		}
	}
	for _, seed := range []uint64{1, 2, 99} {
		text, top := WordText(seed)
		file := filepath.Join(t.TempDir(), "words.txt")
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := printed(t, builtin.WordCount(), file); !slices.Equal(got, top) {
			t.Errorf("seed %d: wordcount printed %q; WordText says %q", seed, got, top)
		}
		if len(top) != wordcountTop {
			t.Errorf("seed %d: %d words on top, want %d", seed, len(top), wordcountTop)
		}
	}
	if got, want := printed(t, builtin.Sleep(), "10ms", "3"), []string{SleepLine(10*time.Millisecond, 3)}; !slices.Equal(got, want) {
		t.Errorf("sleep printed %q; SleepLine says %q", got, want)
	}
}

func TestWordTextDiffersBySeed(t *testing.T) {
	a, _ := WordText(1)
	b, _ := WordText(2)
	if a == b {
		t.Fatal("seeds 1 and 2 made the same text")
	}
	if again, _ := WordText(1); again != a {
		t.Fatal("seed 1 made two texts")
	}
}

func TestSplitOutputFindsEachLaunchAndItsAnswer(t *testing.T) {
	header := "Launch command: \"glint\" \"driver\"\n" + strings.Repeat("=", 40) + "\n\n"
	want := []string{"Pi is roughly 3.141592"}
	for _, c := range []struct {
		name       string
		out        string
		headers    bool
		launches   int
		answerIs   bool
		answeredBy []int
	}{
		{"a client's answer", "Pi is roughly 3.141592\n", false, 1, true, []int{0}},
		{"a client's wrong answer", "Pi is roughly 3.0\n", false, 1, false, nil},
		{"a client that printed nothing", "", false, 1, false, nil},
		{"one launch", header + "Pi is roughly 3.141592\n", true, 1, true, []int{0}},
		{"a failed launch, then one that answered", header + header + "Pi is roughly 3.141592\n", true, 2, true, []int{1}},
		{"an answer, then a launch more", header + "Pi is roughly 3.141592\n" + header, true, 2, true, []int{0}},
		{"an application's own line of =", header + "Pi is roughly 3.141592\n" + strings.Repeat("=", 40) + "\n", true, 1, false, []int{0}},
		{"two answers", header + "Pi is roughly 3.141592\n" + header + "Pi is roughly 3.141592\n", true, 2, false, []int{0, 1}},
	} {
		outs := SplitOutput(c.out, c.headers)
		if len(outs) != c.launches || AnswerIs(outs, want) != c.answerIs || !slices.Equal(Answered(outs, want), c.answeredBy) {
			t.Errorf("%s: %d launches, answer right %v, answered by %v; want %d, %v, %v",
				c.name, len(outs), AnswerIs(outs, want), Answered(outs, want), c.launches, c.answerIs, c.answeredBy)
		}
	}
}
