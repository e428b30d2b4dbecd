package resources

import (
	"errors"
	"testing"
)

func TestParseSizeAcceptsSparkForms(t *testing.T) {
	for in, want := range map[string]int64{
		"512m": 512, "512M": 512, "2g": 2048, "2G": 2048, "1t": 1 << 20,
		"512MiB": 512, "1GiB": 1024, "2gb": 2048, "1024": 1024, "2048k": 2, " 64m ": 64,
	} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
}

func TestParseSizeRejectsBadInput(t *testing.T) {
	for _, in := range []string{"", "m", "-1g", "0", "0m", "512k", "1.5g", "12x", "99999999999999999999", "9223372036854775807t"} {
		if _, err := ParseSize(in); !errors.Is(err, ErrInvalidSize) {
			t.Errorf("ParseSize(%q) error = %v, want ErrInvalidSize", in, err)
		}
	}
}

func TestFormatMiB(t *testing.T) {
	for in, want := range map[int64]string{512: "512.0 MiB", 2048: "2.0 GiB", 1536: "1.5 GiB", 3 << 20: "3.0 TiB"} {
		if got := FormatMiB(in); got != want {
			t.Errorf("FormatMiB(%d) = %q, want %q", in, got, want)
		}
	}
}

func TestDefaultWorkerMemoryLeavesOneGiB(t *testing.T) {
	total, err := totalMemoryMiB("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	got, err := DefaultWorkerMemoryMiB()
	if err != nil {
		t.Fatal(err)
	}
	if got != max(total-1024, 512) {
		t.Errorf("DefaultWorkerMemoryMiB() = %d, total %d", got, total)
	}
}

func TestUsageCountsWhatIsFree(t *testing.T) {
	u := NewUsage(8, 3, 4096, 1024)
	if u.CoresFree != 5 || u.MemoryFree != 3072 || u.Cores != 8 || u.CoresUsed != 3 || u.Memory != 4096 || u.MemoryUsed != 1024 {
		t.Errorf("NewUsage(8, 3, 4096, 1024) = %+v", u)
	}
}
