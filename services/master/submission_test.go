package master

import (
	"context"
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"

	masterv1 "github.com/glint-cluster/glint/pkg/api/glint/master/v1"
	"github.com/glint-cluster/glint/services/master/store"
)

func driverDesc(name string) *masterv1.DriverDescription {
	return &masterv1.DriverDescription{Name: name, Cores: 1, MemoryMib: 256, Command: &masterv1.Command{Args: []string{"/bin/true"}}}
}

// submitDriver sends SubmitDriver for desc with the submission id, and
// returns the driver id the master answers.
func (c *cluster) submitDriver(t *testing.T, submission string, desc *masterv1.DriverDescription) (string, error) {
	t.Helper()
	resp, err := c.client.SubmitDriver(context.Background(), connect.NewRequest(&masterv1.SubmitDriverRequest{Description: desc, SubmissionId: submission}))
	if err != nil {
		return "", err
	}
	return resp.Msg.GetDriverId(), nil
}

// activeDrivers is how many drivers the master keeps active.
func (c *cluster) activeDrivers() int { return len(c.srv.clusterState().GetActiveDrivers()) }

// TestASubmissionSentTwiceMakesOneDriver: a SubmitDriver repeated with its
// submission id (a retry whose answer was lost) is answered with the driver
// the first made, while it waits and after it ended; another id makes
// another driver; none is no key at all.
func TestASubmissionSentTwiceMakesOneDriver(t *testing.T) {
	c := newCluster(t, Config{})
	first, err := c.submitDriver(t, "sub-1", driverDesc("d"))
	if err != nil {
		t.Fatal(err)
	}
	if again, err := c.submitDriver(t, "sub-1", driverDesc("d")); err != nil || again != first || c.activeDrivers() != 1 {
		t.Fatalf("the same submission again: %q %v, %d active drivers; want %s and one driver", again, err, c.activeDrivers(), first)
	}
	if other, err := c.submitDriver(t, "sub-2", driverDesc("d")); err != nil || other == first || c.activeDrivers() != 2 {
		t.Fatalf("another submission: %q %v, %d active drivers; want a second driver", other, err, c.activeDrivers())
	}
	for range 2 {
		if _, err := c.submitDriver(t, "", driverDesc("d")); err != nil {
			t.Fatal(err)
		}
	}
	if c.activeDrivers() != 4 {
		t.Fatalf("two submissions without an id made %d drivers in all, want 4", c.activeDrivers())
	}

	if _, err := c.client.KillDriver(context.Background(), connect.NewRequest(&masterv1.KillDriverRequest{DriverId: first})); err != nil {
		t.Fatal(err)
	}
	if again, err := c.submitDriver(t, "sub-1", driverDesc("d")); err != nil || again != first || c.activeDrivers() != 3 {
		t.Fatalf("the submission of a driver that ended: %q %v, %d active drivers; want %s and no new driver", again, err, c.activeDrivers(), first)
	}
}

// TestASubmissionIDIsCheckedAndNotReusedForAnotherDriver: a submission id
// is 1 to 64 of A-Z, a-z, 0-9, '-' and '_'; one sent with another
// description is refused, not answered with the driver it made.
func TestASubmissionIDIsCheckedAndNotReusedForAnotherDriver(t *testing.T) {
	c := newCluster(t, Config{})
	for _, id := range []string{strings.Repeat("a", maxSubmissionID+1), "a/../b", "a b", "ü"} {
		if _, err := c.submitDriver(t, id, driverDesc("d")); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("submission id %q: %v, want InvalidArgument", id, err)
		}
	}
	if _, err := c.submitDriver(t, strings.Repeat("Az09-_", 10)+"abcd", driverDesc("d")); err != nil {
		t.Errorf("a 64-byte submission id of every allowed kind: %v", err)
	}
	first, err := c.submitDriver(t, "sub-1", driverDesc("d"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.submitDriver(t, "sub-1", driverDesc("other"))
	if connect.CodeOf(err) != connect.CodeAlreadyExists || !strings.Contains(err.Error(), first) {
		t.Errorf("the submission id of %s with another description: %v, want AlreadyExists naming it", first, err)
	}
	if c.activeDrivers() != 2 {
		t.Errorf("%d active drivers, want 2", c.activeDrivers())
	}
}

// TestASubmissionIsKeptAcrossARestart: the submission id is kept with its
// driver, so a retry reaching the master after it restarted gets the same
// driver, while it recovers and after.
func TestASubmissionIsKeptAcrossARestart(t *testing.T) {
	dir := t.TempDir()
	st, err := store.OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	before := newCluster(t, Config{Store: st})
	first, err := before.submitDriver(t, "sub-1", driverDesc("d"))
	if err != nil {
		t.Fatal(err)
	}
	before.srv.mu.Lock()
	err = st.Close()
	before.srv.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}

	c := recoveringCluster(t, dir, Config{})
	if again, err := c.submitDriver(t, "sub-1", driverDesc("d")); err != nil || again != first {
		t.Fatalf("the submission again, to the recovering master: %q %v; want %s", again, err, first)
	}
	c.srv.mu.Lock()
	c.srv.completeRecoveryLocked(context.Background())
	c.srv.mu.Unlock()
	if again, err := c.submitDriver(t, "sub-1", driverDesc("d")); err != nil || again != first || c.activeDrivers() != 1 {
		t.Fatalf("the submission again, after the recovery: %q %v, %d active drivers; want %s alone", again, err, c.activeDrivers(), first)
	}
}

// keptButRefused is a Store whose first driver write is kept but answered
// with an error, as an etcd write whose answer was lost.
type keptButRefused struct {
	store.Store
	refused bool
}

func (s *keptButRefused) PutDriver(p *masterv1.PersistedDriver) error {
	if err := s.Store.PutDriver(p); err != nil || s.refused {
		return err
	}
	s.refused = true
	return errors.New("context deadline exceeded")
}

// TestADriverKeptByAWriteThatSeemedToFailNeverRuns: a SubmitDriver whose
// write was kept but answered with an error is refused, and the client's
// retry makes a second driver; the master that recovers from that store
// keeps only the one the client was answered with, and drops the other
// from the store.
func TestADriverKeptByAWriteThatSeemedToFailNeverRuns(t *testing.T) {
	dir := t.TempDir()
	st := &keptButRefused{Store: mustOpen(t, dir)}
	before := newCluster(t, Config{Store: st})
	if _, err := before.submitDriver(t, "sub-1", driverDesc("d")); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("a submission whose write seemed to fail: %v, want Unavailable", err)
	}
	answered, err := before.submitDriver(t, "sub-1", driverDesc("d"))
	if err != nil {
		t.Fatal(err)
	}
	before.srv.mu.Lock()
	err = st.Close()
	before.srv.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}

	c := recoveringCluster(t, dir, Config{})
	active := c.srv.clusterState().GetActiveDrivers()
	if len(active) != 1 || active[0].GetId() != answered {
		t.Fatalf("the recovered master keeps %v, want %s alone (the driver its client was answered with)", active, answered)
	}
	c.kept(t)
	c.srv.mu.Lock()
	err = c.srv.cfg.Store.Close()
	c.srv.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	rec, err := mustOpen(t, dir).Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Drivers) != 1 || rec.Drivers[0].GetId() != answered {
		t.Errorf("the store keeps %d drivers after the recovery, want %s alone", len(rec.Drivers), answered)
	}
}
