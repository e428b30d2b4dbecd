package telemetry

import (
	"encoding/binary"
	"math"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// A relayed process's spans are encoded here, as an OTLP
// ExportTraceServiceRequest, rather than by OpenTelemetry's exporters: their
// encoding is internal to the otlptrace module, whose exporters link gRPC —
// package initialisation every executor would pay for at its start, on the
// launch path. The tests decode what it makes with the official OTLP protos.

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
