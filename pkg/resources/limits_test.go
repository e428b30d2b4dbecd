package resources

import (
	"strings"
	"testing"
)

func TestCheckCommandNeverQuotesAMalformedEnvironmentName(t *testing.T) {
	err := CheckCommand([]string{"glint"}, map[string]string{"X_TOKEN=hunter2": strings.Repeat("v", MaxArgBytes+1)})
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("CheckCommand = %v, want an error that does not quote the malformed name", err)
	}
}
