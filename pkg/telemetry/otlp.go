package telemetry

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// otlpExporter sends spans as OTLP/HTTP protobuf (an ExportTraceServiceRequest
// POSTed to …/v1/traces). It is written here rather than taken from
// otlptracehttp because that package links gRPC and grpc-gateway, whose
// package initialisation every Glint process — every executor's start on the
// launch path — would pay for; the wire format is small and stable, and the
// tests decode what it sends with the official OTLP protos.
type otlpExporter struct {
	url      string
	headers  http.Header
	gzip     bool
	timeout  time.Duration
	client   func() *http.Client
	shutdown atomic.Bool
	// relay, when set, is where the exports go instead of the collector: the
	// pipe to the worker that started this process (RelayFDEnv).
	relay io.WriteCloser

	// The buffers an export encodes its request into, kept for the next:
	// exports are never concurrent (the batcher holds exporting), and the
	// transport reads a request's body only until its export returns
	// (sending). A process exporting every few seconds makes no garbage of
	// its requests.
	msg    []byte
	zipped bytes.Buffer
	zw     *gzip.Writer
}

var _ sdktrace.SpanExporter = (*otlpExporter)(nil)

// Retries of an export that failed for a reason that may pass (the
// collector busy or restarting): from otlpRetryFirst, doubling up to
// otlpRetryMax, for as long as the batch processor's deadline allows.
const (
	otlpRetryFirst = 100 * time.Millisecond
	otlpRetryMax   = 5 * time.Second
	// otlpAnswerLimit bounds how much of a collector's answer is read.
	otlpAnswerLimit = 64 << 10
)

// otlpEnv returns OTEL_EXPORTER_OTLP_TRACES_<name>, else OTEL_EXPORTER_OTLP_<name>.
func otlpEnv(name string) string {
	if v := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_" + name); v != "" {
		return v
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_" + name)
}

// newOTLPExporter configures an exporter from the standard variables:
// …_ENDPOINT (the traces one used as it is, the general one with /v1/traces
// added), …_HEADERS, …_TIMEOUT (ms), …_COMPRESSION (gzip or none) and
// …_CERTIFICATE, …_CLIENT_CERTIFICATE, …_CLIENT_KEY for https.
func newOTLPExporter() (*otlpExporter, error) {
	endpoint := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		endpoint = strings.TrimSuffix(os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), "/") + "/v1/traces"
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("OTLP endpoint %q: want an http:// or https:// URL", endpoint)
	}
	e := &otlpExporter{url: u.String(), headers: http.Header{}, timeout: 10 * time.Second}
	if err := parseOTLPHeaders(otlpEnv("HEADERS"), e.headers); err != nil {
		return nil, err
	}
	if v := otlpEnv("TIMEOUT"); v != "" {
		ms, err := strconv.ParseUint(v, 10, 31)
		if err != nil || ms == 0 {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_TIMEOUT %q: want a positive number of milliseconds", v)
		}
		e.timeout = time.Duration(ms) * time.Millisecond
	}
	switch v := otlpEnv("COMPRESSION"); v {
	case "", "none":
	case "gzip":
		e.gzip = true
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_COMPRESSION %q: want gzip or none", v)
	}
	relay, err := relayOut()
	if err != nil {
		return nil, err
	}
	if relay != nil {
		// Relayed: no collector is called, no client is made.
		e.relay = relay
		return e, nil
	}
	var tlsConfig *tls.Config
	if u.Scheme == "https" {
		if tlsConfig, err = otlpTLS(); err != nil {
			return nil, err
		}
	}
	// The client is made at the first export, off the process's start.
	e.client = sync.OnceValue(func() *http.Client {
		transport := http.DefaultTransport.(*http.Transport).Clone()
		transport.TLSClientConfig = tlsConfig
		return &http.Client{Transport: transport}
	})
	return e, nil
}

// parseOTLPHeaders adds "key=value,key2=value2" (values URL-encoded) to h.
func parseOTLPHeaders(s string, h http.Header) error {
	for pair := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		value, err := url.PathUnescape(strings.TrimSpace(v))
		if !ok || k == "" || err != nil {
			return fmt.Errorf("OTEL_EXPORTER_OTLP_HEADERS: %q is not key=value (value URL-encoded)", pair)
		}
		h.Add(k, value)
	}
	return nil
}

// otlpTLS is the client TLS configuration the certificate variables name.
func otlpTLS() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if file := otlpEnv("CERTIFICATE"); file != "" {
		pem, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_CERTIFICATE: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_CERTIFICATE %s: no PEM certificate in it", file)
		}
	}
	cert, key := otlpEnv("CLIENT_CERTIFICATE"), otlpEnv("CLIENT_KEY")
	if cert != "" || key != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE/CLIENT_KEY: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// ExportSpans sends spans, retrying while the collector answers that it is
// busy or cannot be reached, until ctx ends.
func (e *otlpExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	return e.exportRelayed(ctx, spans, nil)
}

// exportRelayed sends spans and the resource_spans entries relayed from
// started processes in one request — or, in a process whose exports are
// relayed, writes them to its relay as a frame.
func (e *otlpExporter) exportRelayed(ctx context.Context, spans []sdktrace.ReadOnlySpan, relayed []byte) error {
	if e.shutdown.Load() {
		return errors.New("OTLP exporter: shut down")
	}
	if len(spans) == 0 && len(relayed) == 0 {
		return nil
	}
	if e.relay != nil {
		e.msg = append(appendTraceRequest(e.msg[:0], spans), relayed...)
		return writeFrame(e.relay, e.msg)
	}
	body, err := e.encode(spans, relayed)
	if err != nil {
		return err
	}
	wait := otlpRetryFirst
	for {
		retry, err := e.post(ctx, body)
		if err == nil || retry == 0 {
			return err
		}
		timer := time.NewTimer(max(wait, retry))
		select {
		case <-ctx.Done():
			timer.Stop()
			return errors.Join(err, ctx.Err())
		case <-timer.C:
		}
		wait = min(2*wait, otlpRetryMax)
	}
}

// encode is the request body: the spans as an ExportTraceServiceRequest,
// the relayed entries after them, gzipped if asked for, in e's buffers.
func (e *otlpExporter) encode(spans []sdktrace.ReadOnlySpan, relayed []byte) ([]byte, error) {
	e.msg = append(appendTraceRequest(e.msg[:0], spans), relayed...)
	if !e.gzip {
		return e.msg, nil
	}
	e.zipped.Reset()
	if e.zw == nil {
		e.zw = gzip.NewWriter(&e.zipped)
	} else {
		e.zw.Reset(&e.zipped)
	}
	if _, err := e.zw.Write(e.msg); err != nil {
		return nil, err
	}
	if err := e.zw.Close(); err != nil {
		return nil, err
	}
	return e.zipped.Bytes(), nil
}

// post sends one request. A failure that may pass returns a positive retry:
// how long the collector asked to wait, or a nanosecond when it did not say.
func (e *otlpExporter) post(ctx context.Context, body []byte) (retry time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	sending := &sending{body: body}
	defer sending.end()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, sending.reader())
	if err != nil {
		return 0, err
	}
	req.GetBody = func() (io.ReadCloser, error) { return sending.reader(), nil }
	req.ContentLength = int64(len(body))
	for k, v := range e.headers {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	if e.gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := e.client().Do(req)
	if err != nil {
		return time.Nanosecond, fmt.Errorf("OTLP export to %s: %w", e.url, err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, otlpAnswerLimit))
	if resp.StatusCode/100 == 2 {
		return 0, nil
	}
	err = fmt.Errorf("OTLP export to %s: %s: %.200q", e.url, resp.Status, answer)
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		retry = time.Nanosecond
		if s, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && s > 0 {
			retry = min(time.Duration(s)*time.Second, otlpRetryMax)
		}
		return retry, err
	}
	return 0, err
}

// sending is the body of one request, which the transport reads through
// readers (the first, and one for each resend) until the request is done
// (end): a transport may read on after post returned — it got the answer
// before it wrote everything, a cancelled write — but by then the body's
// bytes are the next export's buffer.
type sending struct {
	mu   sync.Mutex
	body []byte
	done bool
}

// errExportDone is what a body read after its request was done gets.
var errExportDone = errors.New("OTLP export: the request is done")

func (s *sending) reader() io.ReadCloser { return &bodyReader{s: s} }

func (s *sending) end() {
	s.mu.Lock()
	s.done = true
	s.mu.Unlock()
}

type bodyReader struct {
	s   *sending
	off int
}

func (r *bodyReader) Read(p []byte) (int, error) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	if r.s.done {
		return 0, errExportDone
	}
	if r.off == len(r.s.body) {
		return 0, io.EOF
	}
	n := copy(p, r.s.body[r.off:])
	r.off += n
	return n, nil
}

func (*bodyReader) Close() error { return nil }

// Shutdown stops further exports (and closes the relay); nothing is held
// to flush.
func (e *otlpExporter) Shutdown(context.Context) error {
	e.shutdown.Store(true)
	if e.relay != nil {
		return e.relay.Close()
	}
	e.client().CloseIdleConnections()
	return nil
}

// OTLP field numbers (opentelemetry/proto/trace/v1/trace.proto and
// common/v1/common.proto, resource/v1/resource.proto).
const (
	fRequestResourceSpans protowire.Number = 1

	fResourceSpansResource   protowire.Number = 1
	fResourceSpansScopeSpans protowire.Number = 2
	fResourceSpansSchemaURL  protowire.Number = 3
	fResourceAttributes      protowire.Number = 1

	fScopeSpansScope     protowire.Number = 1
	fScopeSpansSpans     protowire.Number = 2
	fScopeSpansSchemaURL protowire.Number = 3
	fScopeName           protowire.Number = 1
	fScopeVersion        protowire.Number = 2
	fScopeAttributes     protowire.Number = 3

	fSpanTraceID                protowire.Number = 1
	fSpanSpanID                 protowire.Number = 2
	fSpanTraceState             protowire.Number = 3
	fSpanParentSpanID           protowire.Number = 4
	fSpanName                   protowire.Number = 5
	fSpanKind                   protowire.Number = 6
	fSpanStart                  protowire.Number = 7
	fSpanEnd                    protowire.Number = 8
	fSpanAttributes             protowire.Number = 9
	fSpanDroppedAttributesCount protowire.Number = 10
	fSpanEvents                 protowire.Number = 11
	fSpanDroppedEventsCount     protowire.Number = 12
	fSpanLinks                  protowire.Number = 13
	fSpanDroppedLinksCount      protowire.Number = 14
	fSpanStatus                 protowire.Number = 15
	fSpanFlags                  protowire.Number = 16

	fEventTime                   protowire.Number = 1
	fEventName                   protowire.Number = 2
	fEventAttributes             protowire.Number = 3
	fEventDroppedAttributesCount protowire.Number = 4

	fLinkTraceID                protowire.Number = 1
	fLinkSpanID                 protowire.Number = 2
	fLinkTraceState             protowire.Number = 3
	fLinkAttributes             protowire.Number = 4
	fLinkDroppedAttributesCount protowire.Number = 5
	fLinkFlags                  protowire.Number = 6

	fStatusMessage protowire.Number = 2
	fStatusCode    protowire.Number = 3

	fKeyValueKey   protowire.Number = 1
	fKeyValueValue protowire.Number = 2

	fValueString protowire.Number = 1
	fValueBool   protowire.Number = 2
	fValueInt    protowire.Number = 3
	fValueDouble protowire.Number = 4
	fValueArray  protowire.Number = 5
	fValueKVList protowire.Number = 6
	fValueBytes  protowire.Number = 7
	fListValues  protowire.Number = 1

	// Span flags: the W3C trace flags in the low byte, then whether the
	// parent's remoteness is known, and whether it is remote.
	flagHasIsRemote = 0x100
	flagIsRemote    = 0x200
)

// OTLP status codes (Status.StatusCode), which order differently from codes.Code.
const (
	statusOK    = 1
	statusError = 2
)

// scopeGroup is the spans of one resource and instrumentation scope.
type scopeGroup struct {
	res   *resource.Resource
	scope instrumentation.Scope
	spans []sdktrace.ReadOnlySpan
}

// appendTraceRequest appends spans as an ExportTraceServiceRequest: one
// ScopeSpans per resource and scope, in the order they first appear, and one
// ResourceSpans for each run of them with the same resource (a process has
// one resource, so in practice one).
func appendTraceRequest(b []byte, spans []sdktrace.ReadOnlySpan) []byte {
	type key struct {
		res   attribute.Distinct
		scope instrumentation.Scope
	}
	var groups []*scopeGroup
	index := map[key]*scopeGroup{}
	for _, s := range spans {
		res := s.Resource()
		if res == nil {
			res = resource.Empty()
		}
		k := key{res.Equivalent(), s.InstrumentationScope()}
		g := index[k]
		if g == nil {
			g = &scopeGroup{res: res, scope: k.scope}
			index[k] = g
			groups = append(groups, g)
		}
		g.spans = append(g.spans, s)
	}
	for i := 0; i < len(groups); {
		j := i + 1
		for j < len(groups) && groups[j].res.Equivalent() == groups[i].res.Equivalent() {
			j++
		}
		b = appendMessage(b, fRequestResourceSpans, func(b []byte) []byte {
			return appendResourceSpans(b, groups[i:j])
		})
		i = j
	}
	return b
}

// appendResourceSpans appends one ResourceSpans of groups sharing a resource.
func appendResourceSpans(b []byte, groups []*scopeGroup) []byte {
	res := groups[0].res
	b = appendMessage(b, fResourceSpansResource, func(b []byte) []byte {
		return appendAttributes(b, fResourceAttributes, res.Attributes())
	})
	for _, g := range groups {
		b = appendMessage(b, fResourceSpansScopeSpans, func(b []byte) []byte {
			b = appendMessage(b, fScopeSpansScope, func(b []byte) []byte {
				b = appendString(b, fScopeName, g.scope.Name)
				b = appendString(b, fScopeVersion, g.scope.Version)
				return appendAttributes(b, fScopeAttributes, g.scope.Attributes.ToSlice())
			})
			for _, s := range g.spans {
				b = appendMessage(b, fScopeSpansSpans, func(b []byte) []byte { return appendSpan(b, s) })
			}
			return appendString(b, fScopeSpansSchemaURL, g.scope.SchemaURL)
		})
	}
	return appendString(b, fResourceSpansSchemaURL, res.SchemaURL())
}

func appendSpan(b []byte, s sdktrace.ReadOnlySpan) []byte {
	sc, parent := s.SpanContext(), s.Parent()
	tid, sid := sc.TraceID(), sc.SpanID()
	b = appendBytes(b, fSpanTraceID, tid[:])
	b = appendBytes(b, fSpanSpanID, sid[:])
	b = appendString(b, fSpanTraceState, sc.TraceState().String())
	if parent.SpanID().IsValid() {
		pid := parent.SpanID()
		b = appendBytes(b, fSpanParentSpanID, pid[:])
	}
	b = appendString(b, fSpanName, s.Name())
	if k := s.SpanKind(); k > trace.SpanKindUnspecified && k <= trace.SpanKindConsumer {
		b = appendVarint(b, fSpanKind, uint64(k))
	}
	b = appendFixed64(b, fSpanStart, unixNano(s.StartTime()))
	b = appendFixed64(b, fSpanEnd, unixNano(s.EndTime()))
	b = appendAttributes(b, fSpanAttributes, s.Attributes())
	b = appendVarint(b, fSpanDroppedAttributesCount, uint64(s.DroppedAttributes()))
	for _, ev := range s.Events() {
		b = appendMessage(b, fSpanEvents, func(b []byte) []byte {
			b = appendFixed64(b, fEventTime, unixNano(ev.Time))
			b = appendString(b, fEventName, ev.Name)
			b = appendAttributes(b, fEventAttributes, ev.Attributes)
			return appendVarint(b, fEventDroppedAttributesCount, uint64(ev.DroppedAttributeCount))
		})
	}
	b = appendVarint(b, fSpanDroppedEventsCount, uint64(s.DroppedEvents()))
	for _, l := range s.Links() {
		b = appendMessage(b, fSpanLinks, func(b []byte) []byte {
			ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
			b = appendBytes(b, fLinkTraceID, ltid[:])
			b = appendBytes(b, fLinkSpanID, lsid[:])
			b = appendString(b, fLinkTraceState, l.SpanContext.TraceState().String())
			b = appendAttributes(b, fLinkAttributes, l.Attributes)
			b = appendVarint(b, fLinkDroppedAttributesCount, uint64(l.DroppedAttributeCount))
			return protowire.AppendFixed32(protowire.AppendTag(b, fLinkFlags, protowire.Fixed32Type), spanFlags(l.SpanContext))
		})
	}
	b = appendVarint(b, fSpanDroppedLinksCount, uint64(s.DroppedLinks()))
	st := s.Status()
	b = appendMessage(b, fSpanStatus, func(b []byte) []byte {
		b = appendString(b, fStatusMessage, st.Description)
		switch st.Code {
		case codes.Error:
			b = appendVarint(b, fStatusCode, statusError)
		case codes.Ok:
			b = appendVarint(b, fStatusCode, statusOK)
		}
		return b
	})
	flags := uint32(sc.TraceFlags()) | flagHasIsRemote
	if parent.IsRemote() {
		flags |= flagIsRemote
	}
	return protowire.AppendFixed32(protowire.AppendTag(b, fSpanFlags, protowire.Fixed32Type), flags)
}

// spanFlags is a link's flags: its trace flags, known remoteness.
func spanFlags(sc trace.SpanContext) uint32 {
	flags := uint32(sc.TraceFlags()) | flagHasIsRemote
	if sc.IsRemote() {
		flags |= flagIsRemote
	}
	return flags
}

func appendAttributes(b []byte, num protowire.Number, kvs []attribute.KeyValue) []byte {
	for _, kv := range kvs {
		b = appendMessage(b, num, func(b []byte) []byte {
			b = appendString(b, fKeyValueKey, string(kv.Key))
			return appendMessage(b, fKeyValueValue, func(b []byte) []byte { return appendValue(b, kv.Value) })
		})
	}
	return b
}

// appendValue appends the fields of an AnyValue holding v.
func appendValue(b []byte, v attribute.Value) []byte {
	switch v.Type() {
	case attribute.BOOL:
		return appendBool(b, fValueBool, v.AsBool())
	case attribute.INT64:
		return protowire.AppendVarint(protowire.AppendTag(b, fValueInt, protowire.VarintType), uint64(v.AsInt64()))
	case attribute.FLOAT64:
		return protowire.AppendFixed64(protowire.AppendTag(b, fValueDouble, protowire.Fixed64Type), math.Float64bits(v.AsFloat64()))
	case attribute.STRING:
		return protowire.AppendString(protowire.AppendTag(b, fValueString, protowire.BytesType), v.AsString())
	case attribute.BYTESLICE:
		return protowire.AppendBytes(protowire.AppendTag(b, fValueBytes, protowire.BytesType), v.AsByteSlice())
	case attribute.BOOLSLICE:
		return appendList(b, v.AsBoolSlice(), attribute.BoolValue)
	case attribute.INT64SLICE:
		return appendList(b, v.AsInt64Slice(), attribute.Int64Value)
	case attribute.FLOAT64SLICE:
		return appendList(b, v.AsFloat64Slice(), attribute.Float64Value)
	case attribute.STRINGSLICE:
		return appendList(b, v.AsStringSlice(), attribute.StringValue)
	case attribute.SLICE:
		return appendList(b, v.AsSlice(), func(v attribute.Value) attribute.Value { return v })
	case attribute.MAP:
		return appendMessage(b, fValueKVList, func(b []byte) []byte { return appendAttributes(b, fListValues, v.AsMap()) })
	}
	return b
}

// appendList appends an ArrayValue of items, each made a Value by value.
func appendList[T any](b []byte, items []T, value func(T) attribute.Value) []byte {
	return appendMessage(b, fValueArray, func(b []byte) []byte {
		for _, it := range items {
			b = appendMessage(b, fListValues, func(b []byte) []byte { return appendValue(b, value(it)) })
		}
		return b
	})
}

// appendMessage appends field num as a length-delimited message whose
// fields fill appends: they are written in place, then moved along by the
// length's size, so no message is built twice.
func appendMessage(b []byte, num protowire.Number, fill func([]byte) []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	at := len(b)
	b = fill(b)
	n := len(b) - at
	var size [binary.MaxVarintLen64]byte
	l := protowire.AppendVarint(size[:0], uint64(n))
	b = append(b, l...)
	copy(b[at+len(l):], b[at:at+n])
	copy(b[at:], l)
	return b
}

// The scalar appenders leave out a field holding its zero value, as proto3 does.

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

func appendBool(b []byte, num protowire.Number, v bool) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), protowire.EncodeBool(v))
}

func appendFixed64(b []byte, num protowire.Number, v uint64) []byte {
	return protowire.AppendFixed64(protowire.AppendTag(b, num, protowire.Fixed64Type), v)
}

func unixNano(t time.Time) uint64 {
	if t.IsZero() {
		return 0
	}
	return uint64(t.UnixNano())
}
