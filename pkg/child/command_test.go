package child

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/spf13/pflag"
)

func TestTheExecutorTemplateSubstitutedParsesIntoWhatTheWorkerKnew(t *testing.T) {
	template := append([]string{"/bin/glint", "executor"}, ExecutorTemplate("http://driver:4040")...)
	argv := Substitute(template, map[string]string{
		VarExecutorID: "7", VarHostname: "node-1", VarCores: "3",
		VarAppID: "app-20261130120000-0001", VarWorkerURL: "http://node-1:7078",
	})
	var got ExecutorArgs
	fs := pflag.NewFlagSet("executor", pflag.ContinueOnError)
	got.Flags(fs)
	if err := fs.Parse(argv[2:]); err != nil {
		t.Fatal(err)
	}
	want := ExecutorArgs{DriverURL: "http://driver:4040", ExecutorID: 7, Hostname: "node-1", Cores: 3,
		AppID: "app-20261130120000-0001", WorkerURL: "http://node-1:7078"}
	if got != want || fs.NArg() != 0 {
		t.Errorf("parsed %+v (extra %v), want %+v", got, fs.Args(), want)
	}
}

func TestTheDriverTemplateSubstitutedParsesIntoTheDriverID(t *testing.T) {
	argv := Substitute(DriverTemplate(), map[string]string{VarDriverID: "driver-20261130120000-0003"})
	var id string
	fs := pflag.NewFlagSet("driver", pflag.ContinueOnError)
	DriverIDFlag(fs, &id)
	if err := fs.Parse(argv); err != nil || id != "driver-20261130120000-0003" {
		t.Errorf("parsed %q (%v), want the driver id", id, err)
	}
}

func TestSubstituteReplacesEachArgumentSeparately(t *testing.T) {
	got := Substitute([]string{"{{APP_ID}}/{{EXECUTOR_ID}}", "{{APP_ID}} x", "{{UNKNOWN}}", "{{APP_ID"},
		map[string]string{VarAppID: "a b", VarExecutorID: "{{APP_ID}}"})
	want := []string{"a b/{{APP_ID}}", "a b x", "{{UNKNOWN}}", "{{APP_ID"}
	if !slices.Equal(got, want) {
		t.Errorf("Substitute = %q, want %q (values are never substituted again)", got, want)
	}
}

func TestABinarysExecutorsRunItsExecutorProgramWhenOneIsBesideIt(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "glint")
	program := self + ExecutorSuffix
	for _, tc := range []struct {
		name string
		make func() error
		want []string
	}{
		{"none beside it", func() error { return nil }, []string{self, "executor"}},
		{"a directory", func() error { return os.Mkdir(program, 0o755) }, []string{self, "executor"}},
		{"a file no one may run", func() error { return os.WriteFile(program, nil, 0o644) }, []string{self, "executor"}},
		{"an executable file", func() error { return os.WriteFile(program, nil, 0o755) }, []string{program}},
	} {
		if err := os.RemoveAll(program); err != nil {
			t.Fatal(err)
		}
		if err := tc.make(); err != nil {
			t.Fatal(err)
		}
		if got := ExecutorCommand(self); !slices.Equal(got, tc.want) {
			t.Errorf("%s: executor command %q, want %q", tc.name, got, tc.want)
		}
	}
}
