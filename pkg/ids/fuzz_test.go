package ids

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/glint-cluster/glint/pkg/fault"
)

// FuzzValidate: an id either fails as an invalid argument, or is short, has
// no path separator, no "..", and starts with its kind.
func FuzzValidate(f *testing.F) {
	at := time.Date(2026, 11, 29, 14, 3, 5, 0, time.UTC)
	for _, s := range []string{App(at, 7), Driver(at, 12345), Worker(at, "10.0.0.1", 7078), "app-20261129140305-0007/../x",
		"../worker-20261129140305-h-1", "worker-20261129140305-..-1", "", strings.Repeat("9", 400)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		for kind, validate := range map[string]func(string) error{"app-": ValidateApp, "driver-": ValidateDriver, "worker-": ValidateWorker} {
			err := validate(id)
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
