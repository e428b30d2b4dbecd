package telemetry

import (
	"encoding/binary"
	"math/rand/v2"

	"go.opentelemetry.io/otel/trace"
)

// Unsampled returns a new span context that is not sampled: its children are
// not recorded in any process that samples by its parent, and the calls made
// in it pass it on without spans (Interceptor).
func Unsampled() trace.SpanContext {
	var tid trace.TraceID
	var sid trace.SpanID
	binary.BigEndian.PutUint64(tid[:8], rand.Uint64()|1)
	binary.BigEndian.PutUint64(tid[8:], rand.Uint64())
	binary.BigEndian.PutUint64(sid[:], rand.Uint64()|1)
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid})
}
