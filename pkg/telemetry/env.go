package telemetry

import (
	"context"

	"go.opentelemetry.io/contrib/propagators/envcar"
)

// InjectEnv returns env with the trace context of ctx added as TRACEPARENT and
// TRACESTATE (and BAGGAGE), for a child process that continues the trace. Any
// trace context env already held is replaced.
func InjectEnv(ctx context.Context, env []string) []string {
	injected := map[string]string{}
	Propagator.Inject(ctx, &envcar.Carrier{SetEnvFunc: func(k, v string) { injected[k] = v }})
	out := make([]string, 0, len(env)+len(injected))
	for _, kv := range env {
		if !replaced(kv, injected) {
			out = append(out, kv)
		}
	}
	for k, v := range injected {
		out = append(out, k+"="+v)
	}
	return out
}

func replaced(kv string, injected map[string]string) bool {
	for k := range injected {
		if len(kv) > len(k) && kv[:len(k)] == k && kv[len(k)] == '=' {
			return true
		}
	}
	return false
}

// ContextFromEnv returns ctx with the trace context this process was started
// with (TRACEPARENT, TRACESTATE), so its first spans are children of the span
// that started it.
func ContextFromEnv(ctx context.Context) context.Context {
	return Propagator.Extract(ctx, &envcar.Carrier{})
}
