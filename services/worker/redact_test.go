package worker

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/pkg/redact"
	"github.com/glint-cluster/glint/pkg/telemetry"
)

// syncBuffer is a bytes.Buffer safe for the worker's concurrent logging.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestLaunchShowsNoSecretTheProcessIsGiven: an executor whose command carries
// secrets as --conf properties, KEY=VALUE arguments and environment variables
// gets them whole, while its launch-command header, the worker's spans and
// logs show none.
func TestLaunchShowsNoSecretTheProcessIsGiven(t *testing.T) {
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := startCluster(t, clusterConfig{worker: Config{Instruments: telemetry.Instruments{TracerProvider: tp, Logger: log}}})
	cmd := executorCommand(t, "hold", 0)
	cmd.Args = append(cmd.Args, "--conf", "spark.authenticate.secret=s3cr3t-conf", "--conf=spark.ssl.keyPassword=s3cr3t-eq", "AWS_ACCESS_KEY=s3cr3t-arg")
	cmd.Env["MY_TOKEN"] = "s3cr3t-env"
	secrets := []string{"s3cr3t-conf", "s3cr3t-eq", "s3cr3t-arg", "s3cr3t-env"}
	appID := c.registerApp(t, cmd, 1)
	c.waitMasterExecutor(t, appID, 0, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)
	dir := filepath.Join(c.worker.cfg.WorkDir, appID, "0")

	// The process got the whole command: it prints its arguments after the header.
	stdout := waitFileContains(t, filepath.Join(dir, "stdout"), "s3cr3t-conf", "s3cr3t-eq", "s3cr3t-arg")
	header, output, _ := strings.Cut(stdout, strings.Repeat("=", 40))
	if !strings.HasPrefix(header, "Launch command:") || !strings.Contains(header, "spark.authenticate.secret="+redact.Text) {
		t.Errorf("stdout header %q, want the launch command with the secret hidden", header)
	}
	if !strings.Contains(output, "spark.authenticate.secret=s3cr3t-conf") {
		t.Errorf("the executor's output %q does not show the argument it was given", output)
	}
	stderr, err := os.ReadFile(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c.waitMasterExecutor(t, appID, 0, masterv1.ExecutorState_EXECUTOR_STATE_EXITED)
	tooltest.Eventually(t, "process.wait span ended", func() bool {
		for _, s := range recorder.Ended() {
			if s.Name() == "process.wait" {
				return true
			}
		}
		return false
	})

	var spans strings.Builder
	for _, s := range recorder.Ended() {
		spans.WriteString(s.Name() + ":")
		for _, kv := range s.Attributes() {
			spans.WriteString(" " + string(kv.Key) + "=" + kv.Value.Emit())
		}
		for _, e := range s.Events() {
			for _, kv := range e.Attributes {
				spans.WriteString(" " + string(kv.Key) + "=" + kv.Value.Emit())
			}
		}
		spans.WriteString(" " + s.Status().Description + "\n")
	}
	if !strings.Contains(spans.String(), "spark.authenticate.secret="+redact.Text) {
		t.Errorf("no span shows the executor's command:\n%s", spans.String())
	}
	for _, s := range secrets {
		for where, shown := range map[string]string{"launch-command header": header, "stderr": string(stderr), "spans": spans.String(), "worker logs": logs.String()} {
			if strings.Contains(shown, s) {
				t.Errorf("%s show %q:\n%s", where, s, shown)
			}
		}
	}
}
