package worker

import (
	"slices"
	"testing"
)

func TestStepNamesAreStable(t *testing.T) {
	steps := []step{workdirStep{}, commandStep{}, logsStep{}, startStep{}, reportStep{}}
	var names []string
	for _, s := range steps {
		names = append(names, s.Name())
	}
	if want := []string{"workdir", "command", "logs", "process.start", "report"}; !slices.Equal(names, want) {
		t.Errorf("step names %v, want %v", names, want)
	}
}
