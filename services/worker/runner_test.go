package worker

import (
	"slices"
	"testing"
)

func TestStepNamesAreStable(t *testing.T) {
	steps := []step{commandStep{}, claimStep{}, workdirStep{}, logsStep{}, startStep{}, handoverStep{}, reportStep{}}
	var names []string
	for _, s := range steps {
		names = append(names, s.Name())
	}
	if want := []string{"command", "claim", "workdir", "logs", "process.start", "handover", "report"}; !slices.Equal(names, want) {
		t.Errorf("step names %v, want %v", names, want)
	}
}
