package worker

import (
	"os"
	"testing"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
)

func TestOnlyThisBinarysExecutorWithoutItsOwnEnvironmentClaimsAPrestartedProcess(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		argv  []string
		env   map[string]string
		claim bool
	}{
		{"this binary's executor", []string{self, "executor", "--cores", "1"}, nil, true},
		{"with an environment of its own", []string{self, "executor"}, map[string]string{"GOMAXPROCS": "1"}, false},
		{"another subcommand", []string{self, "driver"}, nil, false},
		{"another binary", []string{"/bin/true", "executor"}, nil, false},
	} {
		p := &prestart{path: self, idle: []*standby{{url: "http://127.0.0.1:1"}}}
		l := &launch{argv: tc.argv, template: &masterv1.Command{Args: tc.argv, Env: tc.env}}
		if got := p.take(l) != nil; got != tc.claim {
			t.Errorf("%s: claimed %v, want %v", tc.name, got, tc.claim)
		}
		if left := len(p.idle); left != map[bool]int{true: 0, false: 1}[tc.claim] {
			t.Errorf("%s: %d idle processes left", tc.name, left)
		}
	}
}
