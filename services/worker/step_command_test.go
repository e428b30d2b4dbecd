package worker

import (
	"context"
	"slices"
	"strings"
	"testing"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
)

func TestCommandStepSubstitutesArgumentByArgument(t *testing.T) {
	t.Setenv("GLINT_WORKER_TEST_FROM_WORKER", "worker")
	t.Setenv("GLINT_WORKER_TEST_OVERRIDDEN", "worker")
	l := &launch{
		template: &masterv1.Command{
			Args: []string{"sh", "-c", "echo {{APP_ID}} $(id)", "{{EXECUTOR_ID}}{{CORES}}", "{{UNKNOWN}}", "{{APP_ID}} {{APP_ID}}"},
			Env:  map[string]string{"GLINT_WORKER_TEST_OVERRIDDEN": "command", "GLINT_WORK_DIR": "/elsewhere"},
		},
		vars: map[string]string{"APP_ID": testAppID, "EXECUTOR_ID": "7", "CORES": "2"},
		env:  []string{"GLINT_WORK_DIR=/work/app/7"},
	}
	if err := (commandStep{}).Run(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	wantArgs := []string{"sh", "-c", "echo " + testAppID + " $(id)", "72", "{{UNKNOWN}}", testAppID + " " + testAppID}
	if !slices.Equal(l.argv, wantArgs) {
		t.Errorf("argv = %q, want %q", l.argv, wantArgs)
	}
	env := map[string][]string{}
	for _, kv := range l.environ {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = append(env[k], v)
	}
	for k, want := range map[string]string{
		"GLINT_WORKER_TEST_FROM_WORKER": "worker",
		"GLINT_WORKER_TEST_OVERRIDDEN":  "command",
		"GLINT_WORK_DIR":                "/work/app/7",
	} {
		if got := env[k]; len(got) != 1 || got[0] != want {
			t.Errorf("environment %s = %q, want exactly %q", k, got, want)
		}
	}
}

func TestValidateCommand(t *testing.T) {
	tests := []struct {
		name    string
		cmd     *masterv1.Command
		wantErr bool
	}{
		{"plain command", &masterv1.Command{Args: []string{"glint", "executor"}, Env: map[string]string{"A": "1"}}, false},
		{"nil command", nil, true},
		{"no arguments", &masterv1.Command{}, true},
		{"empty argv[0]", &masterv1.Command{Args: []string{""}}, true},
		{"NUL in an argument", &masterv1.Command{Args: []string{"glint", "a\x00b"}}, true},
		{"empty environment key", &masterv1.Command{Args: []string{"glint"}, Env: map[string]string{"": "1"}}, true},
		{"'=' in an environment key", &masterv1.Command{Args: []string{"glint"}, Env: map[string]string{"A=B": "1"}}, true},
		{"NUL in an environment value", &masterv1.Command{Args: []string{"glint"}, Env: map[string]string{"A": "\x00"}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validateCommand(tt.cmd)
			if (err != nil) != tt.wantErr {
				t.Errorf("validateCommand = %v, want error: %v", err, tt.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "\x00") {
				t.Errorf("error echoes the value: %q", err)
			}
		})
	}
}

func TestMergeEnvLaterValueWinsInPlace(t *testing.T) {
	got := mergeEnv([]string{"A=1", "B=2"}, []string{"B=3", "C=4"}, []string{"A=5"})
	if want := []string{"A=5", "B=3", "C=4"}; !slices.Equal(got, want) {
		t.Errorf("mergeEnv = %q, want %q", got, want)
	}
}

func TestValidateCommandDoesNotQuoteAMalformedKey(t *testing.T) {
	err := validateCommand(&masterv1.Command{Args: []string{"glint"}, Env: map[string]string{"MY_TOKEN=s3cr3t": "x"}})
	if err == nil || strings.Contains(err.Error(), "s3cr3t") || !strings.Contains(err.Error(), "name is empty or holds '='") {
		t.Errorf("validateCommand = %v, want an error on the name that does not quote it", err)
	}
}

func TestCommandStepGivesGOMAXPROCSTheCoresUnlessTheCommandSetsIt(t *testing.T) {
	t.Setenv("GOMAXPROCS", "16") // the worker's own
	for _, tt := range []struct {
		env  map[string]string
		want string
	}{{nil, "3"}, {map[string]string{"GOMAXPROCS": "8"}, "8"}} {
		l := &launch{template: &masterv1.Command{Args: []string{"glint"}, Env: tt.env}, defaults: coresEnv(3)}
		if err := (commandStep{}).Run(context.Background(), l); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, kv := range l.environ {
			if v, ok := strings.CutPrefix(kv, "GOMAXPROCS="); ok {
				got = append(got, v)
			}
		}
		if !slices.Equal(got, []string{tt.want}) {
			t.Errorf("command environment %v: GOMAXPROCS %q, want exactly %s", tt.env, got, tt.want)
		}
	}
	if coresEnv(0) != nil {
		t.Errorf("coresEnv(0) = %q, want nothing", coresEnv(0))
	}
}
