package main

import (
	"slices"
	"testing"
	"time"

	"github.com/glint-cluster/glint/internal/soak"
)

func TestParseSettingsReadsTheEnvironment(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	s, err := parseSettings(env(nil))
	if err != nil || s.duration != 10*time.Minute || !slices.Equal(s.modes, []soak.Mode{soak.ModeFile, soak.ModeHA}) || s.keep {
		t.Fatalf("defaults: %+v, %v", s, err)
	}
	other, _ := parseSettings(env(nil))
	if other.seed == s.seed {
		t.Fatalf("two runs without SOAK_SEED both have seed %d", s.seed)
	}
	s, err = parseSettings(env(map[string]string{"SOAK_MINUTES": "1.5", "SOAK_SEED": "42", "SOAK_MODE": "ha", "SOAK_KEEP": "1"}))
	if err != nil || s.duration != 90*time.Second || s.seed != 42 || !slices.Equal(s.modes, []soak.Mode{soak.ModeHA}) || !s.keep {
		t.Fatalf("set: %+v, %v", s, err)
	}
	for _, bad := range []map[string]string{
		{"SOAK_MINUTES": "0"}, {"SOAK_MINUTES": "-1"}, {"SOAK_MINUTES": "ten"}, {"SOAK_MINUTES": "100000"},
		{"SOAK_SEED": "-3"}, {"SOAK_SEED": "x"}, {"SOAK_MODE": "etcd"},
	} {
		if _, err := parseSettings(env(bad)); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}
