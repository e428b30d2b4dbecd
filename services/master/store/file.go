package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
)

// Buckets of the file store, one per kind, keyed by id.
var (
	bucketWorkers  = []byte("workers")
	bucketApps     = []byte("applications")
	bucketDrivers  = []byte("drivers")
	bucketCounters = []byte("counters")
	keyCounters    = []byte("counters")
)

// MaxRecordBytes bounds one stored record when it is read back: a damaged
// or forged file cannot make the master allocate without limit.
const MaxRecordBytes = 4 << 20

// FileStore keeps the master's state in one bbolt file (--recovery-mode
// file): each change is a transaction, synced to disk before it returns.
type FileStore struct {
	db *bolt.DB
}

var _ Store = (*FileStore)(nil)

// OpenFileStore opens (or makes) the store in dir, readable by its owner
// only: it holds application and submit tokens.
func OpenFileStore(dir string) (*FileStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("recovery dir: %w", err)
	}
	path := filepath.Join(dir, "master.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open recovery store %s: %w (is another master using it?)", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketWorkers, bucketApps, bucketDrivers, bucketCounters} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open recovery store %s: %w", path, err)
	}
	return &FileStore{db: db}, nil
}

// Load reads every record back.
func (f *FileStore) Load() (*Recovered, error) {
	r := &Recovered{Counters: &masterv1.PersistedCounters{}}
	err := f.db.View(func(tx *bolt.Tx) error {
		return errors.Join(
			loadAll(tx.Bucket(bucketWorkers), &r.Workers),
			loadAll(tx.Bucket(bucketApps), &r.Applications),
			loadAll(tx.Bucket(bucketDrivers), &r.Drivers),
			loadOne(tx.Bucket(bucketCounters).Get(keyCounters), r.Counters),
		)
	})
	if err != nil {
		return nil, fmt.Errorf("load recovery store: %w", err)
	}
	return r, nil
}

func loadAll[T any, P interface {
	*T
	proto.Message
}](b *bolt.Bucket, out *[]P) error {
	return b.ForEach(func(k, v []byte) error {
		if err := appendRecord(v, out); err != nil {
			return fmt.Errorf("record %q: %w", k, err)
		}
		return nil
	})
}

func loadOne(v []byte, m proto.Message) error {
	if len(v) > MaxRecordBytes {
		return fmt.Errorf("%d bytes, the limit is %d", len(v), MaxRecordBytes)
	}
	return proto.Unmarshal(v, m)
}

func (f *FileStore) put(bucket []byte, key string, m proto.Message) error {
	v, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	return f.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Put([]byte(key), v) })
}

func (f *FileStore) delete(bucket []byte, key string) error {
	return f.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Delete([]byte(key)) })
}

func (f *FileStore) PutWorker(w *masterv1.PersistedWorker) error {
	return f.put(bucketWorkers, w.GetId(), w)
}
func (f *FileStore) DeleteWorker(id string) error { return f.delete(bucketWorkers, id) }
func (f *FileStore) PutApplication(a *masterv1.PersistedApplication) error {
	return f.put(bucketApps, a.GetId(), a)
}
func (f *FileStore) DeleteApplication(id string) error { return f.delete(bucketApps, id) }
func (f *FileStore) PutDriver(d *masterv1.PersistedDriver) error {
	return f.put(bucketDrivers, d.GetId(), d)
}
func (f *FileStore) DeleteDriver(id string) error { return f.delete(bucketDrivers, id) }
func (f *FileStore) PutCounters(c *masterv1.PersistedCounters) error {
	return f.put(bucketCounters, string(keyCounters), c)
}

// Close closes the file.
func (f *FileStore) Close() error { return f.db.Close() }
