package app

import (
	"context"
	"testing"
)

func noop(context.Context, Context, []string) error { return nil }

func TestRegistryRejectsBadAndDuplicateNames(t *testing.T) {
	for name, apps := range map[string][]*App{
		"empty name":     {{Name: "", Run: noop}},
		"dot in name":    {{Name: "a.b", Run: noop}},
		"slash in name":  {{Name: "a/b", Run: noop}},
		"duplicate name": {{Name: "a", Run: noop}, {Name: "a", Run: noop}},
		"no run":         {{Name: "a"}},
	} {
		if _, err := NewRegistry(apps...); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestRegistryFindsTasksByAppQualifiedName(t *testing.T) {
	task := func(context.Context, []byte) ([]byte, error) { return []byte("ok"), nil }
	r, err := NewRegistry(&App{Name: "b", Run: noop}, &App{Name: "a", Run: noop, Tasks: map[string]TaskFunc{"t": task}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Task("t"); ok {
		t.Error("unqualified task name found")
	}
	fn, ok := r.Task(TaskID("a", "t"))
	if out, _ := fn(context.Background(), nil); !ok || string(out) != "ok" {
		t.Error("qualified task not found")
	}
	if apps := r.Apps(); apps[0].Name != "a" || apps[1].Name != "b" {
		t.Errorf("Apps() not sorted: %v, %v", apps[0].Name, apps[1].Name)
	}
}
