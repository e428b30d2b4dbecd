package soak

import (
	"slices"
	"testing"
)

func TestViewReportsAFinalStateThatChanged(t *testing.T) {
	v := NewView()
	app := func(state string) MasterJSON {
		a := AppJSON{ID: "app-20261202000000-0001", Name: "soak-file-0001-client-pi", State: state}
		if finalApp[state] {
			return MasterJSON{CompletedApps: []AppJSON{a}}
		}
		return MasterJSON{ActiveApps: []AppJSON{a}}
	}
	for _, state := range []string{"WAITING", "RUNNING", "FINISHED", "FINISHED"} {
		if vs := v.Observe(app(state)); len(vs) > 0 {
			t.Fatalf("%s: %v", state, vs)
		}
	}
	if vs := v.Observe(app("RUNNING")); !slices.Equal(kinds(vs), []string{FinalStateChanged}) {
		t.Fatalf("a FINISHED application RUNNING again: %v", vs)
	}
	driver := func(state string) MasterJSON {
		return MasterJSON{ActiveDrivers: []DriverJSON{{ID: "driver-20261202000000-0001", State: state}}}
	}
	for _, state := range []string{"SUBMITTED", "RUNNING", "FINISHED"} {
		if vs := v.Observe(driver(state)); len(vs) > 0 {
			t.Fatalf("%s: %v", state, vs)
		}
	}
	if vs := v.Observe(driver("RUNNING")); !slices.Equal(kinds(vs), []string{FinalStateChanged}) {
		t.Fatalf("a FINISHED driver RUNNING again: %v", vs)
	}
	if got, ok := v.AppFinal("app-20261202000000-0001"); !ok || got != "FINISHED" {
		t.Fatalf("AppFinal = %q, %v", got, ok)
	}
}

func TestViewKeepsEveryApplicationOfAName(t *testing.T) {
	v := NewView()
	v.Observe(MasterJSON{ActiveApps: []AppJSON{{ID: "app-2", Name: "job"}}})
	v.Observe(MasterJSON{CompletedApps: []AppJSON{{ID: "app-2", Name: "job", State: "FINISHED"}}, ActiveApps: []AppJSON{{ID: "app-1", Name: "job"}}})
	v.Observe(MasterJSON{}) // a master that forgot them
	if got := v.Apps("job"); !slices.Equal(got, []string{"app-1", "app-2"}) {
		t.Fatalf("Apps = %v", got)
	}
}

func TestViewFollowsARelaunchedDriversChain(t *testing.T) {
	v := NewView()
	v.Observe(MasterJSON{CompletedDrivers: []DriverJSON{
		{ID: "driver-1-0001", State: "RELAUNCHING", Message: "its worker was lost; relaunched as driver-1-0002"},
		{ID: "driver-1-0002", State: "RELAUNCHING", Message: "its worker was lost; relaunched as driver-1-0003"},
	}, ActiveDrivers: []DriverJSON{{ID: "driver-1-0003", State: "RUNNING"}}})
	chain, last := v.Chain("driver-1-0001")
	if !slices.Equal(chain, []string{"driver-1-0001", "driver-1-0002", "driver-1-0003"}) || last.State != "RUNNING" {
		t.Fatalf("chain %v ending %+v", chain, last)
	}
	if chain, last := v.Chain("driver-9-0009"); len(chain) != 1 || last.State != "" {
		t.Fatalf("an unknown driver's chain %v ending %+v", chain, last)
	}
}

// An application its driver unregistered FINISHED and then failed (it
// exited non-zero) turns FAILED: the one change of a final state the
// master makes. It never turns back.
func TestViewTakesAnApplicationFailedAfterItsDriverUnregisteredIt(t *testing.T) {
	v := NewView()
	app := func(state string) MasterJSON {
		return MasterJSON{CompletedApps: []AppJSON{{ID: "app-20261202000000-0002", Name: "soak-file-0002-cluster-wordcount", State: state}}}
	}
	for _, state := range []string{"FINISHED", "FAILED"} {
		if vs := v.Observe(app(state)); len(vs) > 0 {
			t.Fatalf("%s: %v", state, vs)
		}
	}
	if got, ok := v.AppFinal("app-20261202000000-0002"); !ok || got != "FAILED" {
		t.Fatalf("AppFinal = %q, %v; want FAILED", got, ok)
	}
	if vs := v.Observe(app("FINISHED")); !slices.Equal(kinds(vs), []string{FinalStateChanged}) {
		t.Fatalf("a FAILED application FINISHED again: %v", vs)
	}
}
