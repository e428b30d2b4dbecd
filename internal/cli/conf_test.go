package cli

import (
	"strings"
	"testing"
)

func TestABadConfNeverEchoesAValue(t *testing.T) {
	if _, err := parseConf([]string{"=hunter2"}); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("parseConf(=hunter2) = %v, want an error that does not quote the value", err)
	}
}
