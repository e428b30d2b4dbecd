package ids

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/glint-cluster/glint/pkg/fault"
)

// The forms as regular expressions: the specification the hand-written
// matchers are held to.
var forms = map[string]*regexp.Regexp{
	"app-":    regexp.MustCompile(`^app-\d{14}-\d{4,}$`),
	"driver-": regexp.MustCompile(`^driver-\d{14}-\d{4,}$`),
	"worker-": regexp.MustCompile(`^worker-\d{14}-[A-Za-z0-9._:-]+-\d{1,5}$`),
}

// FuzzValidate: an id either fails as an invalid argument, or is short, has
// no path separator, no "..", starts with its kind and has its form; and it
// is accepted exactly when it has its form (and no "..").
func FuzzValidate(f *testing.F) {
	at := time.Date(2026, 11, 29, 14, 3, 5, 0, time.UTC)
	for _, s := range []string{App(at, 7), Driver(at, 12345), Worker(at, "10.0.0.1", 7078), "app-20261129140305-0007/../x",
		"../worker-20261129140305-h-1", "worker-20261129140305-..-1", "", strings.Repeat("9", 400),
		"worker-20261129140305--1", "worker-20261129140305-h-123456", "worker-20261129140305-h-", "worker-20261129140305-a-b-7",
		"worker-20261129140305-h1-22-", "app-2026112914030-0001", "app-20261129140305-001", "app-20261129140305-00012",
		"driver-20261129140305x0001", "app-20261129140305-0001\n", "worker-20261129140305-h_x-1",
		"worker-20261129140305-" + strings.Repeat("h", 300) + "-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		for kind, validate := range map[string]func(string) error{"app-": ValidateApp, "driver-": ValidateDriver, "worker-": ValidateWorker} {
			err := validate(id)
			if want := len(id) <= MaxLen && forms[kind].MatchString(id) && !strings.Contains(id, ".."); want != (err == nil) {
				t.Fatalf("%s %q: accepted %v, its form says %v", kind, id, err == nil, want)
			}
			if err != nil {
				if !errors.Is(err, ErrInvalid) || !errors.Is(err, fault.ErrInvalidArgument) || len(err.Error()) > 512 {
					t.Fatalf("%s %.100q: error %.200q", kind, id, err)
				}
				continue
			}
			if len(id) > MaxLen || !strings.HasPrefix(id, kind) || strings.ContainsAny(id, "/\\\x00") ||
				strings.Contains(id, "..") || !utf8.ValidString(id) {
				t.Fatalf("%s accepted %q", kind, id)
			}
		}
	})
}
