package resources

import (
	"strconv"
	"time"
)

// FormatBytes renders a size in bytes as FormatMiB does, to a tenth of a
// MiB: "70.3 MiB", "1.5 GiB".
func FormatBytes(b int64) string {
	switch {
	case b >= 1<<40:
		return strconv.FormatFloat(float64(b)/(1<<40), 'f', 1, 64) + " TiB"
	case b >= 1<<30:
		return strconv.FormatFloat(float64(b)/(1<<30), 'f', 1, 64) + " GiB"
	default:
		return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64) + " MiB"
	}
}

// FormatCPU renders CPU seconds used against the cores granted: over the
// time ran, when known (> 0), as cores used on average, "0.98 / 1 cores
// (52.1 s)"; else as the seconds alone, "52.1 s / 1 cores".
func FormatCPU(seconds float64, cores int32, ran time.Duration) string {
	used := strconv.FormatFloat(seconds, 'f', 1, 64) + " s"
	granted := strconv.Itoa(int(cores)) + " cores"
	if ran <= 0 {
		return used + " / " + granted
	}
	return strconv.FormatFloat(seconds/ran.Seconds(), 'f', 2, 64) + " / " + granted + " (" + used + ")"
}
