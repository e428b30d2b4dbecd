package master

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/services/master/store"
)

// BenchmarkStateWritePerLaunch is the cost the file store adds to one
// executor launch: one application record written and synced.
func BenchmarkStateWritePerLaunch(b *testing.B) {
	st, err := store.OpenFileStore(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	p := &masterv1.PersistedApplication{Id: "app-20261130120000-0000", Description: appDesc(512, 1), DriverUrl: "http://127.0.0.1:1",
		AppToken: "t", StartTime: timestamppb.Now()}
	for b.Loop() {
		p.NextExecutorId++
		if err := st.PutApplication(p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRecover1000Apps is the time a master takes from opening a store
// that kept 1,000 applications on 100 workers to serving RECOVERING.
func BenchmarkRecover1000Apps(b *testing.B) {
	dir := b.TempDir()
	st, err := store.OpenFileStore(dir)
	if err != nil {
		b.Fatal(err)
	}
	for i := range 100 {
		if err := st.PutWorker(&masterv1.PersistedWorker{Id: fmt.Sprintf("worker-20261130120000-127.0.0.1-%d", 7000+i), Host: "127.0.0.1",
			Port: int32(7000 + i), WorkerUrl: fmt.Sprintf("http://127.0.0.1:%d", 7000+i), Cores: 8, MemoryMib: 16384}); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 1000 {
		if err := st.PutApplication(&masterv1.PersistedApplication{Id: fmt.Sprintf("app-20261130120000-%04d", i), Description: appDesc(512, 1),
			DriverUrl: "http://127.0.0.1:1", AppToken: "t", StartTime: timestamppb.Now(), NextExecutorId: 4}); err != nil {
			b.Fatal(err)
		}
	}
	st.Close()
	for b.Loop() {
		st, err := store.OpenFileStore(dir)
		if err != nil {
			b.Fatal(err)
		}
		m, err := New(Config{URL: "http://127.0.0.1:7077", Store: st, WorkerTimeout: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		if !m.recovering() {
			b.Fatal("not recovering")
		}
		m.cancel()
		st.Close()
	}
}
