// Package otlp is where a Glint process's spans go: OpenTelemetry's OTLP
// exporters, otlptracehttp by default and otlptracegrpc when
// OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL is grpc, each set by the standard
// OTEL_EXPORTER_OTLP_* variables (endpoint, headers, timeout, compression,
// certificates) and retrying as they do. The executor's binary does not link
// it: an executor's spans go through its worker, whose exporter sends them on.
package otlp

import (
	"context"
	"fmt"
	"net/url"
	"os"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Exporter is a telemetry.Exporter: the span exporter the OTEL_EXPORTER_OTLP_*
// variables describe, and the upload, through the same client, of the
// ExportTraceServiceRequests the processes it starts relay to it.
func Exporter(ctx context.Context) (sdktrace.SpanExporter, func(context.Context, []byte) error, error) {
	client, err := newClient()
	if err != nil {
		return nil, nil, err
	}
	exporter, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, nil, fmt.Errorf("start the OTLP exporter: %w", err)
	}
	upload := func(ctx context.Context, frame []byte) error {
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(frame, &req); err != nil {
			return fmt.Errorf("a relayed export that is no ExportTraceServiceRequest: %w", err)
		}
		return client.UploadTraces(ctx, req.GetResourceSpans())
	}
	return exporter, upload, nil
}

// env returns OTEL_EXPORTER_OTLP_TRACES_<name>, else OTEL_EXPORTER_OTLP_<name>.
func env(name string) string {
	if v := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_" + name); v != "" {
		return v
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_" + name)
}

// newClient is the client of the protocol the variables name, once their
// endpoint is known to be one it can call: the exporters take a malformed
// one for their default endpoint, and a process would send its spans to
// nobody without a word.
func newClient() (otlptrace.Client, error) {
	protocol, endpoint := env("PROTOCOL"), env("ENDPOINT")
	if protocol != "" && protocol != "http/protobuf" && protocol != "grpc" {
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: want http/protobuf or grpc", protocol)
	}
	if u, err := url.Parse(endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("OTLP endpoint %q: want an http:// or https:// URL (http:// for a collector without TLS)", endpoint)
	}
	if protocol == "grpc" {
		return otlptracegrpc.NewClient(), nil
	}
	return otlptracehttp.NewClient(), nil
}
