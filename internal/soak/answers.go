package soak

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// piSamplesPerSlice and piStream are SparkPi's points per slice and the
// PCG stream pkg/builtin's pi seeds each slice's generator with (the slice's
// index is the seed): what makes pi's answer known for a number of slices.
const (
	piSamplesPerSlice = 100_000
	piStream          = 0x9e3779b97f4a7c15
)

var piLines sync.Map // slices → the line pi prints

// PiLine is the line `pi SLICES` prints: its estimate from the same points,
// computed here.
func PiLine(slices int) string {
	if v, ok := piLines.Load(slices); ok {
		return v.(string)
	}
	var inside uint64
	for i := range slices {
		rng := rand.New(rand.NewPCG(uint64(i), piStream))
		for range piSamplesPerSlice {
			x, y := rng.Float64()*2-1, rng.Float64()*2-1
			if x*x+y*y <= 1 {
				inside++
			}
		}
	}
	line := fmt.Sprintf("Pi is roughly %f", 4*float64(inside)/float64(slices*piSamplesPerSlice))
	piLines.Store(slices, line)
	return line
}

// SleepLine is the line `sleep D TASKS` prints.
func SleepLine(d time.Duration, tasks int) string {
	return fmt.Sprintf("Slept %s in %d tasks", d, tasks)
}

// wordcountTop is how many words wordcount prints.
const wordcountTop = 10

// soakWords are the words of the wordcount input; each is written in mixed
// case and with punctuation around it, which wordcount strips.
var soakWords = []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf",
	"hotel", "india", "juliet", "kilo", "lima", "mike", "november"}

// WordText returns a wordcount input made from seed and the lines wordcount
// prints for it: the ten most frequent words with their counts, most
// frequent first and ties by word, from the counts the text was made with.
func WordText(seed uint64) (text string, top []string) {
	rng := rand.New(rand.NewPCG(seed, 3))
	counts := map[string]int{}
	var tokens []string
	for _, w := range soakWords {
		n := 1 + rng.IntN(40)
		counts[w] = n
		for range n {
			tokens = append(tokens, decorate(rng, w))
		}
	}
	// Tokens of punctuation alone count as no word.
	for range 5 {
		tokens = append(tokens, "--", "!")
	}
	rng.Shuffle(len(tokens), func(i, j int) { tokens[i], tokens[j] = tokens[j], tokens[i] })
	var b strings.Builder
	for len(tokens) > 0 {
		n := min(1+rng.IntN(8), len(tokens))
		b.WriteString(strings.Join(tokens[:n], " "))
		b.WriteString("\n")
		tokens = tokens[n:]
	}
	return b.String(), topWords(counts, wordcountTop)
}

// decorate writes w as upper, title or lower case, with punctuation before
// or after it now and then.
func decorate(rng *rand.Rand, w string) string {
	switch rng.IntN(3) {
	case 0:
		w = strings.ToUpper(w)
	case 1:
		w = strings.ToUpper(w[:1]) + w[1:]
	}
	switch rng.IntN(4) {
	case 0:
		w += ","
	case 1:
		w = "(" + w + ")."
	}
	return w
}

// topWords are wordcount's output lines for counts: "word: n", the n most
// frequent first, ties by word.
func topWords(counts map[string]int, n int) []string {
	words := make([]string, 0, len(counts))
	for w := range counts {
		words = append(words, w)
	}
	sort.Slice(words, func(i, j int) bool {
		if counts[words[i]] != counts[words[j]] {
			return counts[words[i]] > counts[words[j]]
		}
		return words[i] < words[j]
	})
	var out []string
	for _, w := range words[:min(n, len(words))] {
		out = append(out, fmt.Sprintf("%s: %d", w, counts[w]))
	}
	return out
}

// Output is one launch of a program as its output file shows it: a worker
// writes a "Launch command:" header before each launch of a process into
// the same stdout; a client's stdout is one run with no header.
type Output struct {
	Lines []string
}

// SplitOutput splits an output file into its launches' output, without the
// headers and blank lines.
func SplitOutput(out string, headers bool) []Output {
	var runs []Output
	if !headers {
		runs = append(runs, Output{})
	}
	skip := false
	for line := range strings.SplitSeq(out, "\n") {
		switch {
		case headers && strings.HasPrefix(line, "Launch command:"):
			runs = append(runs, Output{})
			skip = true
		case skip && line == strings.Repeat("=", 40):
			skip = false
		case strings.TrimSpace(line) == "" || len(runs) == 0:
		default:
			runs[len(runs)-1].Lines = append(runs[len(runs)-1].Lines, strings.TrimRight(line, "\r"))
		}
	}
	return runs
}

// AnswerIs reports whether the runs together printed exactly want.
func AnswerIs(runs []Output, want []string) bool {
	var got []string
	for _, r := range runs {
		got = append(got, r.Lines...)
	}
	return slices.Equal(got, want)
}

// Answered returns the indexes of the runs that printed want's first line:
// the launches that got as far as the answer.
func Answered(runs []Output, want []string) []int {
	if len(want) == 0 {
		return nil
	}
	var out []int
	for i, r := range runs {
		if slices.Contains(r.Lines, want[0]) {
			out = append(out, i)
		}
	}
	return out
}
