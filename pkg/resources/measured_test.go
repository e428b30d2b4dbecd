package resources

import (
	"testing"
	"time"
)

func TestFormatBytesAndCPU(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{FormatBytes(0), "0.0 MiB"},
		{FormatBytes(70<<20 + 300<<10), "70.3 MiB"},
		{FormatBytes(3 << 29), "1.5 GiB"},
		{FormatBytes(2 << 40), "2.0 TiB"},
		{FormatCPU(52.1, 1, 0), "52.1 s / 1 cores"},
		{FormatCPU(49, 2, 50*time.Second), "0.98 / 2 cores (49.0 s)"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
