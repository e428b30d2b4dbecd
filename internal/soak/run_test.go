package soak

import "testing"

func TestTheViewLearnsOnlyFromTheMasterThatLeads(t *testing.T) {
	a, b := &MasterJSON{URL: mA, Status: "ALIVE"}, &MasterJSON{URL: mB, Status: "ALIVE"}
	standbyB := &MasterJSON{URL: mB, Status: "STANDBY"}
	polls := func(js ...*MasterJSON) []polled {
		var out []polled
		for _, j := range js {
			out = append(out, polled{answer: MasterAnswer{URL: j.URL, Status: j.Status}, json: j})
		}
		return out
	}
	for _, c := range []struct {
		name  string
		round Round
		polls []polled
		want  *MasterJSON
	}{
		{"the one master", Round{}, polls(a), a},
		{"the elected one", Round{HA: true, EtcdKnown: true, EtcdBefore: mA, EtcdAfter: mA}, polls(a, standbyB), a},
		{"not a deposed one still ALIVE", Round{HA: true, EtcdKnown: true, EtcdBefore: mB, EtcdAfter: mB}, polls(a, b), b},
		{"none while the election changed", Round{HA: true, EtcdKnown: true, EtcdBefore: mA, EtcdAfter: mB}, polls(a, b), nil},
		{"the only ALIVE one when etcd did not answer", Round{HA: true}, polls(a, standbyB), a},
		{"none of two ALIVE when etcd did not answer", Round{HA: true}, polls(a, b), nil},
		{"none when none leads", Round{HA: true, EtcdKnown: true}, polls(standbyB), nil},
	} {
		if got := viewSource(c.round, c.polls); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
