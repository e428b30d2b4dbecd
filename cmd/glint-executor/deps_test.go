package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The executor's binary starts on every launch: it links nothing of the
// master, etcd's client, a network exporter or gRPC (its spans go through
// its worker's relay), nor Prometheus' client (its metrics are its own).
func TestTheExecutorLinksNoMasterEtcdExporterOrPrometheus(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/glint-cluster/glint/services/master", "go.etcd.io/etcd/",
			"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp", "go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc", "google.golang.org/grpc",
			"github.com/prometheus/"} {
			if strings.HasPrefix(pkg, banned) {
				t.Errorf("glint-executor links %s", pkg)
			}
		}
	}
}
