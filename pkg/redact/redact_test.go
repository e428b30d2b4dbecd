package redact

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
)

// TestSecretKeepsSparksDefaultPattern pins Spark's spark.redaction.regex
// default, case-insensitive and matched anywhere in the key or the value,
// plus access_key.
func TestSecretKeepsSparksDefaultPattern(t *testing.T) {
	tests := []struct {
		key, value string
		want       bool
	}{
		{"spark.authenticate.secret", "s3cr3t", true},
		{"spark.ssl.keyPassword", "pw", true},
		{"AWS_ACCESS_KEY", "AKIA", true},
		{"AWS_SECRET_ACCESS_KEY", "x", true},
		{"access.key", "x", true},
		{"fs.s3a.accesskey", "x", true},
		{"my.token", "x", true},
		{"GITHUB_TOKEN", "x", true},
		{"PASSWORD", "x", true},
		{"spark.jdbc.url", "jdbc:db://h/?user=a&password=b", true},
		{"spark.executor.memory", "1g", false},
		{"spark.app.name", "pi", false},
		{"access_key", "x", true},
		{"access-key", "x", false},
		{"PATH", "/usr/bin", false},
		{"", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			if got := (*Redactor)(nil).Secret(tt.key, tt.value); got != tt.want {
				t.Errorf("Secret(%q, %q) = %v, want %v", tt.key, tt.value, got, tt.want)
			}
		})
	}
}

func TestArgs(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{
			"--conf and its property as two arguments",
			[]string{"glint", "driver", "--conf", "spark.authenticate.secret=s3cr3t", "--conf", "spark.executor.memory=1g"},
			[]string{"glint", "driver", "--conf", "spark.authenticate.secret=" + Text, "--conf", "spark.executor.memory=1g"},
		},
		{
			"--conf=KEY=VALUE as one argument",
			[]string{"--conf=spark.ssl.keyPassword=pw", "--conf=spark.cores.max=2"},
			[]string{"--conf=spark.ssl.keyPassword=" + Text, "--conf=spark.cores.max=2"},
		},
		{
			"KEY=VALUE and -DKEY=VALUE",
			[]string{"AWS_ACCESS_KEY=AKIA", "-Dmy.token=t", "-Dspark.executor.memory=1g"},
			[]string{"AWS_ACCESS_KEY=" + Text, "-Dmy.token=" + Text, "-Dspark.executor.memory=1g"},
		},
		{
			"a secret value under a plain key",
			[]string{"--conf", "spark.jdbc.url=jdbc:db://h/?password=b"},
			[]string{"--conf", "spark.jdbc.url=" + Text},
		},
		{
			"only the first '=' splits",
			[]string{"access.key=a=b"},
			[]string{"access.key=" + Text},
		},
		{
			"arguments without '=' are kept",
			[]string{"--conf", "token", "secret", "{{EXECUTOR_ID}}"},
			[]string{"--conf", "token", "secret", "{{EXECUTOR_ID}}"},
		},
		{"no arguments", nil, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.args)
			got := (*Redactor)(nil).Args(tt.args)
			if !slices.Equal(got, tt.want) {
				t.Errorf("Args(%q) = %q, want %q", tt.args, got, tt.want)
			}
			if !slices.Equal(tt.args, in) {
				t.Errorf("Args changed its argument to %q", tt.args)
			}
		})
	}
}

func TestEnvHidesSecretVariablesOnly(t *testing.T) {
	env := map[string]string{"AWS_SECRET_ACCESS_KEY": "abc", "HOME": "/home/glint", "CONN": "user=a password=b"}
	got := (*Redactor)(nil).Env(env)
	want := map[string]string{"AWS_SECRET_ACCESS_KEY": Text, "HOME": "/home/glint", "CONN": Text}
	if !maps.Equal(got, want) {
		t.Errorf("Env = %v, want %v", got, want)
	}
	if env["AWS_SECRET_ACCESS_KEY"] != "abc" {
		t.Error("Env changed its argument")
	}
}

func TestNewTakesThePattern(t *testing.T) {
	r, err := New(`(?i)^glint\.private\.`)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Secret("glint.private.x", "v") || r.Secret("spark.authenticate.secret", "v") {
		t.Error("a Redactor of its own pattern uses Spark's instead")
	}
	if r, err := New(""); err != nil || !r.Secret("my.token", "v") {
		t.Errorf("New(\"\") = %v, %v; want Spark's default", r, err)
	}
	if _, err := New("("); err == nil || !strings.Contains(err.Error(), "redaction pattern") {
		t.Errorf("New(\"(\") = %v, want an error naming the redaction pattern", err)
	}
}

func TestCommandCopiesOnlyWhenSomethingIsSecret(t *testing.T) {
	plain := &masterv1.Command{Args: []string{"glint", "executor", "--conf", "spark.executor.memory=1g"}, Env: map[string]string{"A": "1"}}
	if got := (*Redactor)(nil).Command(plain); got != plain {
		t.Errorf("Command(plain) = %v, want the same command", got)
	}
	secret := &masterv1.Command{Args: []string{"glint", "--conf", "spark.authenticate.secret=s3cr3t"}, Env: map[string]string{"MY_TOKEN": "t0k3n", "A": "1"}}
	orig := proto.CloneOf(secret)
	got := (*Redactor)(nil).Command(secret)
	want := &masterv1.Command{Args: []string{"glint", "--conf", "spark.authenticate.secret=" + Text}, Env: map[string]string{"MY_TOKEN": Text, "A": "1"}}
	if !proto.Equal(got, want) {
		t.Errorf("Command = %v, want %v", got, want)
	}
	if !proto.Equal(secret, orig) {
		t.Errorf("Command changed its argument to %v", secret)
	}
	envOnly := &masterv1.Command{Args: []string{"glint"}, Env: map[string]string{"MY_TOKEN": "t0k3n"}}
	if got := (*Redactor)(nil).Command(envOnly); got.GetEnv()["MY_TOKEN"] != Text {
		t.Errorf("Command(a secret in the environment only) = %v, want it hidden", got)
	}
	if (*Redactor)(nil).Command(nil) != nil {
		t.Error("Command(nil) is not nil")
	}
}

func TestDescriptionsAreCopiedNotChanged(t *testing.T) {
	secret := &masterv1.Command{Args: []string{"glint", "--conf", "spark.authenticate.secret=s3cr3t"}}
	app := &masterv1.ApplicationDescription{Name: "pi", MemoryPerExecutorMib: 512, Command: secret}
	drv := &masterv1.DriverDescription{Name: "pi", Cores: 1, Command: secret}
	gotApp, gotDriver := (*Redactor)(nil).App(app), (*Redactor)(nil).Driver(drv)
	for _, shown := range []proto.Message{gotApp, gotDriver} {
		if strings.Contains(fmt.Sprint(shown), "s3cr3t") {
			t.Errorf("description shows the secret: %v", shown)
		}
	}
	if gotApp.GetName() != "pi" || gotApp.GetMemoryPerExecutorMib() != 512 || gotDriver.GetCores() != 1 {
		t.Errorf("descriptions lost fields: %v, %v", gotApp, gotDriver)
	}
	if secret.GetArgs()[2] != "spark.authenticate.secret=s3cr3t" || app.GetCommand() != secret || drv.GetCommand() != secret {
		t.Error("a description was changed")
	}
	plain := &masterv1.ApplicationDescription{Name: "pi", Command: &masterv1.Command{Args: []string{"glint"}}, Conf: map[string]string{"spark.x": "1"}}
	if (*Redactor)(nil).App(plain) != plain || (*Redactor)(nil).App(nil) != nil || (*Redactor)(nil).Driver(nil) != nil {
		t.Error("a description without secrets was copied")
	}
	// Its properties too, the description copied, not changed.
	described := &masterv1.ApplicationDescription{Name: "pi", Command: plain.Command, Conf: map[string]string{"spark.x": "1", "spark.my.password": "hunter2"}}
	shown := (*Redactor)(nil).App(described)
	if shown.GetConf()["spark.my.password"] != Text || shown.GetConf()["spark.x"] != "1" || described.GetConf()["spark.my.password"] != "hunter2" {
		t.Errorf("properties shown %v (the description's now %v): want the secret hidden in a copy", shown.GetConf(), described.GetConf())
	}
}
