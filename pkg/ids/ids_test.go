package ids

import (
	"errors"
	"testing"
	"time"
)

func TestMadeIDsValidate(t *testing.T) {
	at := time.Date(2026, 11, 29, 14, 3, 5, 0, time.UTC)
	for _, tc := range []struct {
		id       string
		want     string
		validate func(string) error
	}{
		{App(at, 7), "app-20261129140305-0007", ValidateApp},
		{Driver(at, 12345), "driver-20261129140305-12345", ValidateDriver},
		{Worker(at, "10.0.0.1", 7078), "worker-20261129140305-10.0.0.1-7078", ValidateWorker},
	} {
		if tc.id != tc.want {
			t.Errorf("got %q, want %q", tc.id, tc.want)
		}
		if err := tc.validate(tc.id); err != nil {
			t.Errorf("validate %q: %v", tc.id, err)
		}
	}
}

func TestPathLikeIDsAreRejected(t *testing.T) {
	for _, tc := range []struct {
		id       string
		validate func(string) error
	}{
		{"app-20261129140305-0001/../x", ValidateApp},
		{"../app-20261129140305-0001", ValidateApp},
		{"app-2026112914030-0001", ValidateApp},
		{"driver-20261129140305-0001/x", ValidateDriver},
		{"worker-20261129140305-a..b-7078", ValidateWorker},
		{"worker-20261129140305-a/b-7078", ValidateWorker},
		{"", ValidateWorker},
	} {
		if err := tc.validate(tc.id); !errors.Is(err, ErrInvalid) {
			t.Errorf("validate %q = %v, want ErrInvalid", tc.id, err)
		}
	}
	if err := ValidateExecutor(-1); !errors.Is(err, ErrInvalid) {
		t.Errorf("ValidateExecutor(-1) = %v, want ErrInvalid", err)
	}
}
