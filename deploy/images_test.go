package deploy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/glint-cluster/glint/internal/tooltest"
)

// moduleVersion is the version a tools module's go.mod requires of module.
func moduleVersion(t *testing.T, modfile, module string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(tooltest.Root(t), modfile))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(module) + ` (v\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s requires no %s", modfile, module)
	}
	return string(m[1])
}

// imageTag is an image reference's tag.
func imageTag(image string) string {
	ref, _, _ := strings.Cut(image, "@")
	return ref[strings.LastIndex(ref, ":")+1:]
}

// make compose-test runs the images .env names from local builds
// (deploy/images): each is built from the version .env's tag names.
func TestLocalImagesAreEnvsVersions(t *testing.T) {
	env := loadCompose(t).Environment
	var minor, patch int
	// Jaeger v2's Go module is tagged v1: v2.x.y is v1.(x+63).y.
	if _, err := fmt.Sscanf(moduleVersion(t, "tools/jaeger/go.mod", "github.com/jaegertracing/jaeger"), "v1.%d.%d", &minor, &patch); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprintf("%d.%d.%d", 2, minor-63, patch), imageTag(env["JAEGER_IMAGE"]); got != want {
		t.Errorf("tools/jaeger builds Jaeger %s, .env's JAEGER_IMAGE is %s", got, want)
	}
	// Prometheus v3.x.y's Go module is v0.3xx.y.
	if _, err := fmt.Sscanf(moduleVersion(t, "tools/go.mod", "github.com/prometheus/prometheus"), "v0.3%d.%d", &minor, &patch); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprintf("v3.%d.%d", minor, patch), imageTag(env["PROMETHEUS_IMAGE"]); got != want {
		t.Errorf("tools/go.mod builds Prometheus %s, .env's PROMETHEUS_IMAGE is %s", got, want)
	}
	var builder struct {
		Dist struct{ Name, Version string }
	}
	tooltest.ReadYAML(t, filepath.Join(tooltest.Root(t), "tools/otelcol/builder.yaml"), &builder)
	if got, want := builder.Dist.Version, imageTag(env["OTEL_COLLECTOR_IMAGE"]); got != want {
		t.Errorf("tools/otelcol/builder.yaml builds collector %s, .env's OTEL_COLLECTOR_IMAGE is %s", got, want)
	}
	recipe, err := os.ReadFile(filepath.Join(tooltest.Root(t), "deploy/images/otelcol/Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if entrypoint := `ENTRYPOINT ["/` + builder.Dist.Name + `"]`; !strings.Contains(string(recipe), entrypoint) {
		t.Errorf("tools/otelcol/builder.yaml builds %s; deploy/images/otelcol/Dockerfile has no %s", builder.Dist.Name, entrypoint)
	}
}

// collectorComponents maps each component module tools/otelcol/builder.yaml
// may name to the component type deploy/otel/collector.yaml configures it as.
var collectorComponents = map[string]string{
	"receiver/otlpreceiver":            "otlp",
	"processor/batchprocessor":         "batch",
	"processor/memorylimiterprocessor": "memory_limiter",
	"processor/tailsamplingprocessor":  "tail_sampling",
	"connector/spanmetricsconnector":   "spanmetrics",
	"exporter/otlpexporter":            "otlp",
	"exporter/prometheusexporter":      "prometheus",
}

// The collector make compose-test builds has exactly the components
// deploy/otel/collector.yaml uses: one missing would stop it, one more would make
// it differ from what the file is tested with for no use.
func TestCollectorBuilderHasTheConfigsComponents(t *testing.T) {
	root := tooltest.Root(t)
	type components []struct{ Gomod string }
	var b struct{ Receivers, Processors, Connectors, Exporters, Extensions components }
	tooltest.ReadYAML(t, filepath.Join(root, "tools/otelcol/builder.yaml"), &b)
	builder := map[string]components{"receivers": b.Receivers, "processors": b.Processors, "connectors": b.Connectors, "exporters": b.Exporters, "extensions": b.Extensions}
	var config map[string]any
	tooltest.ReadYAML(t, filepath.Join(root, "deploy/otel/collector.yaml"), &config)
	for _, kind := range []string{"receivers", "processors", "connectors", "exporters", "extensions"} {
		var built []string
		for _, c := range builder[kind] {
			module, _, _ := strings.Cut(c.Gomod, " ")
			parts := strings.Split(module, "/")
			key := strings.Join(parts[len(parts)-2:], "/")
			typ, ok := collectorComponents[key]
			if !ok {
				t.Errorf("tools/otelcol/builder.yaml: %s: no component type known for %s; add it to collectorComponents", kind, module)
				continue
			}
			built = append(built, typ)
		}
		var used []string
		section, _ := config[kind].(map[string]any)
		for id := range section {
			typ, _, _ := strings.Cut(id, "/") // otlp/jaeger is an otlp exporter
			used = append(used, typ)
		}
		slices.Sort(built)
		slices.Sort(used)
		if used = slices.Compact(used); !slices.Equal(built, used) {
			t.Errorf("%s: tools/otelcol/builder.yaml builds %v, deploy/otel/collector.yaml uses %v", kind, built, used)
		}
	}
}
