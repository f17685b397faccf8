package auth

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func newThrottle(cfg ThrottleConfig) (*Throttle, *time.Time) {
	th := NewThrottle(cfg)
	now := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	th.SetClock(func() time.Time { return now })
	return th, &now
}

func TestThrottleLocksTheAccountForTheAttackerOnly(t *testing.T) {
	th, now := newThrottle(ThrottleConfig{})
	for i := 1; i < DefaultThrottle.PairLockAfter; i++ {
		if d := th.Check("10.0.0.1", "ann"); d.Refuse {
			t.Fatalf("attempt %d refused", i)
		}
		if got := th.Fail("password", "10.0.0.1", "ann"); got != nil {
			t.Fatalf("attempt %d started a lock: %v", i, got)
		}
	}
	if got := th.Fail("password", "10.0.0.1", "ann"); !slices.Equal(got, []string{ScopeAccountAddress}) {
		t.Fatalf("the 5th failure locked %v", got)
	}
	d := th.Check("10.0.0.1", "ann")
	if !d.Refuse || d.Scope != ScopeAccountAddress || d.RetryAfter != time.Second {
		t.Errorf("after 5 failures: %+v, want refused for 1s", d)
	}
	if d := th.Check("10.0.0.2", "ann"); d.Refuse {
		t.Errorf("another address is locked out of the account: %+v", d)
	}
	if d := th.Check("10.0.0.1", "bob"); d.Refuse {
		t.Errorf("the attacker's address is locked out of other accounts: %+v", d)
	}
	// Each further failure doubles the lock.
	*now = now.Add(time.Second)
	th.Fail("password", "10.0.0.1", "ann")
	if d := th.Check("10.0.0.1", "ann"); d.RetryAfter != 2*time.Second {
		t.Errorf("after the 6th failure: %+v, want 2s", d)
	}
	// A success elsewhere does not clear it; one from the address does.
	th.Succeed("10.0.0.2", "ann")
	if d := th.Check("10.0.0.1", "ann"); !d.Refuse {
		t.Error("a success from another address cleared the lock")
	}
	th.Succeed("10.0.0.1", "ann")
	if d := th.Check("10.0.0.1", "ann"); d.Refuse {
		t.Error("still locked after a success")
	}
}

func TestThrottleAccountWideIsOnlyASoftDelay(t *testing.T) {
	th, now := newThrottle(ThrottleConfig{})
	// Failures from many addresses (a botnet) on one account.
	for i := range 40 {
		addr := "10.1.0." + string(rune('0'+i%10)) + string(rune('0'+i/10))
		th.Fail("password", addr, "ann")
	}
	*now = now.Add(time.Minute)
	d := th.Check("192.168.1.1", "ann")
	if d.Refuse || d.Delay != DefaultThrottle.DelayMax {
		t.Errorf("the real user from a fresh address: %+v, want not refused, delayed %v", d, DefaultThrottle.DelayMax)
	}
	if d := th.Check("192.168.1.1", "bob"); d.Delay != 0 {
		t.Errorf("another account is delayed: %+v", d)
	}
}

func TestThrottleLocksAnAddressAcrossAccountsAndTokens(t *testing.T) {
	th, now := newThrottle(ThrottleConfig{AddressLockAfter: 10})
	for range 9 {
		th.Fail("bearer", "2001:db8::1", "")
	}
	if got := th.Fail("password", "2001:db8::2", "u"); !slices.Contains(got, ScopeAddress) {
		t.Fatalf("the 10th failure from the /64 locked %v", got)
	}
	if d := th.Check("2001:db8::ffff", ""); !d.Refuse || d.Scope != ScopeAddress {
		t.Errorf("another address of the /64: %+v", d)
	}
	if d := th.Check("2001:db8:1::1", ""); d.Refuse {
		t.Errorf("another /64 is locked: %+v", d)
	}
	*now = now.Add(time.Second)
	if d := th.Check("2001:db8::1", "x"); d.Refuse {
		t.Errorf("still locked after the lock's second: %+v", d)
	}
	if got := testutil.ToFloat64(th.failures.WithLabelValues("bearer")); got != 9 {
		t.Errorf("failures{bearer} = %v", got)
	}
	if got := testutil.ToFloat64(th.lockouts.WithLabelValues(ScopeAddress)); got != 1 {
		t.Errorf("lockouts{address} = %v", got)
	}
	reg := prometheus.NewRegistry()
	if err := th.Register(reg); err != nil {
		t.Fatal(err)
	}
}

// TestThrottleSeriesExistAtZeroBeforeTheFirstFailure: Prometheus's
// increase() sees nothing of a counter whose series appears at 1, so an
// alert on the first lockout needs the series at 0 beforehand.
func TestThrottleSeriesExistAtZeroBeforeTheFirstFailure(t *testing.T) {
	th, _ := newThrottle(ThrottleConfig{})
	reg := prometheus.NewRegistry()
	if err := th.Register(reg); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{"sluice_admin_auth_failures_total": 3, "sluice_admin_auth_lockouts_total": 2, "sluice_admin_auth_throttled_total": 2} {
		if n := testutil.CollectAndCount(reg, name); n != want {
			t.Errorf("%s has %d series before any failure, want %d at 0", name, n, want)
		}
	}
}

func TestThrottleMemoryIsBounded(t *testing.T) {
	th, _ := newThrottle(ThrottleConfig{MaxEntries: 100})
	for i := range 10_000 {
		th.Fail("bearer", "10.2."+string(rune('a'+i%26))+string(rune('a'+i/26%26))+string(rune('a'+i/676)), "")
	}
	if n := len(th.entries); n > 100 {
		t.Errorf("%d counters kept, want at most 100", n)
	}
}
