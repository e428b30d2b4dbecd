package worker

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/glint-cluster/glint/internal/tooltest"
	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/services/master"
)

// TestAnEndWhoseReportIsLostReachesTheMasterWithAHeartbeat: once the
// executor runs, the master answers no ExecutorStateChanged (503, as a master
// going down leaves them); the worker keeps the executor's end and its next
// heartbeat carries it. The master then shows the executor EXITED, and the
// worker forgets the end once a heartbeat was answered.
func TestAnEndWhoseReportIsLostReachesTheMasterWithAHeartbeat(t *testing.T) {
	var refuse, refused atomic.Bool
	c := startCluster(t, clusterConfig{
		master: master.Config{WorkerTimeout: 2 * time.Second},
		wrapMaster: func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if refuse.Load() && strings.HasSuffix(r.URL.Path, "/ExecutorStateChanged") {
					refused.Store(true)
					http.Error(w, "master going down", http.StatusServiceUnavailable)
					return
				}
				h.ServeHTTP(w, r)
			})
		},
	})
	app := c.registerApp(t, executorCommand(t, "hold", 0), 1)
	c.waitMasterExecutor(t, app, 0, masterv1.ExecutorState_EXECUTOR_STATE_RUNNING)
	refuse.Store(true)
	if err := os.WriteFile(filepath.Join(c.worker.cfg.WorkDir, app, "0", "release"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c.worker.waitFinishedExecutor(t, app, 0)
	tooltest.Eventually(t, "the end's report refused", refused.Load)
	c.waitMasterExecutor(t, app, 0, masterv1.ExecutorState_EXECUTOR_STATE_EXITED)
	tooltest.Eventually(t, "the end forgotten once acknowledged", func() bool {
		c.worker.mu.Lock()
		defer c.worker.mu.Unlock()
		return len(c.worker.finals.executors) == 0
	})
}
