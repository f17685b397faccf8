package auth

import (
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ThrottleConfig sets how failed logins and bad bearer tokens are slowed
// and refused. Three counters of failures are kept:
//
//   - per (address, account): after PairLockAfter failures, that account
//     is locked for that address: attempts are refused without checking,
//     for LockBase, doubling with each further failure up to LockMax. Only
//     the attacker's address is locked out of the account.
//   - per address (every account and every bearer token from it): after
//     AddressLockAfter failures, the address is locked the same way.
//   - per account (from every address): never locked (an attacker could
//     otherwise lock a real user out); after AccountDelayAfter failures
//     each attempt on it is answered only after a delay of DelayStep per
//     failure beyond, at most DelayMax.
//
// A success clears its (address, account) counter. A counter not touched
// for Forget is dropped. IPv6 addresses count per /64.
type ThrottleConfig struct {
	PairLockAfter     int
	AddressLockAfter  int
	AccountDelayAfter int
	LockBase          time.Duration
	LockMax           time.Duration
	DelayStep         time.Duration
	DelayMax          time.Duration
	Forget            time.Duration
	MaxEntries        int // counters kept at most (memory bound)
}

// DefaultThrottle is the admin's throttling.
var DefaultThrottle = ThrottleConfig{
	PairLockAfter: 5, AddressLockAfter: 50, AccountDelayAfter: 10,
	LockBase: time.Second, LockMax: 15 * time.Minute,
	DelayStep: 100 * time.Millisecond, DelayMax: time.Second,
	Forget: time.Hour, MaxEntries: 100_000,
}

// Scopes of a lock, as reported in metrics and the audit log.
const (
	ScopeAddress        = "address"
	ScopeAccountAddress = "account_address"
)

// Throttle counts failures. It is safe for concurrent use.
type Throttle struct {
	cfg     ThrottleConfig
	now     func() time.Time
	mu      sync.Mutex
	entries map[throttleKey]*throttleEntry

	failures *prometheus.CounterVec
	refused  *prometheus.CounterVec
	lockouts *prometheus.CounterVec
	delayed  prometheus.Counter
}

type throttleKey struct {
	scope   byte // 'a' address, 'p' (address, account), 'u' account
	addr    string
	account string
}

type throttleEntry struct {
	failures    int
	lockedUntil time.Time
	last        time.Time
}

// NewThrottle returns a throttle; zero fields of cfg take DefaultThrottle's.
func NewThrottle(cfg ThrottleConfig) *Throttle {
	d := DefaultThrottle
	for _, p := range []struct{ v, def *int }{{&cfg.PairLockAfter, &d.PairLockAfter}, {&cfg.AddressLockAfter, &d.AddressLockAfter}, {&cfg.AccountDelayAfter, &d.AccountDelayAfter}, {&cfg.MaxEntries, &d.MaxEntries}} {
		if *p.v <= 0 {
			*p.v = *p.def
		}
	}
	for _, p := range []struct{ v, def *time.Duration }{{&cfg.LockBase, &d.LockBase}, {&cfg.LockMax, &d.LockMax}, {&cfg.DelayStep, &d.DelayStep}, {&cfg.DelayMax, &d.DelayMax}, {&cfg.Forget, &d.Forget}} {
		if *p.v <= 0 {
			*p.v = *p.def
		}
	}
	t := &Throttle{
		cfg: cfg, now: time.Now, entries: map[throttleKey]*throttleEntry{},
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_admin_auth_failures_total",
			Help: "Failed logins and bad bearer tokens, by method (password, token, bearer)."}, []string{"method"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_admin_auth_throttled_total",
			Help: "Authentication attempts refused unchecked because the address, or the account from that address, is locked, by scope."}, []string{"scope"}),
		lockouts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_admin_auth_lockouts_total",
			Help: "Lockouts started, by scope (address, account_address)."}, []string{"scope"}),
		delayed: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_admin_auth_delayed_total",
			Help: "Login attempts answered late because their account had many failures."}),
	}
	// Every series exists from the start, at 0: a counter that appears at
	// 1 has no increase() in Prometheus, and an alert on the first lockout
	// would never fire.
	for _, m := range []string{"password", "token", "bearer"} {
		t.failures.WithLabelValues(m)
	}
	for _, s := range []string{ScopeAddress, ScopeAccountAddress} {
		t.refused.WithLabelValues(s)
		t.lockouts.WithLabelValues(s)
	}
	return t
}

// SetClock replaces the clock (tests).
func (t *Throttle) SetClock(now func() time.Time) { t.now = now }

// Register adds the throttle's metrics to reg.
func (t *Throttle) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{t.failures, t.refused, t.lockouts, t.delayed} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Decision is what to do with an attempt before checking it.
type Decision struct {
	Refuse     bool          // locked: refuse without checking
	Scope      string        // what is locked
	RetryAfter time.Duration // when the lock ends
	Delay      time.Duration // answer only after this (account-wide soft delay)
}

// AddressKey is the throttling key of a client address: the address, or
// its /64 for IPv6.
func AddressKey(addr string) string {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

// Check says whether an attempt for account ("" for a bearer token or the
// admin token) from addr may be checked.
func (t *Throttle) Check(addr, account string) Decision {
	addr = AddressKey(addr)
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	var d Decision
	locked := func(k throttleKey, scope string) bool {
		e := t.entries[k]
		if e == nil || !now.Before(e.lockedUntil) {
			return false
		}
		d = Decision{Refuse: true, Scope: scope, RetryAfter: e.lockedUntil.Sub(now)}
		t.refused.WithLabelValues(scope).Inc()
		return true
	}
	if locked(throttleKey{'a', addr, ""}, ScopeAddress) {
		return d
	}
	if account == "" {
		return d
	}
	if locked(throttleKey{'p', addr, account}, ScopeAccountAddress) {
		return d
	}
	if e := t.entries[throttleKey{'u', "", account}]; e != nil && e.failures >= t.cfg.AccountDelayAfter {
		d.Delay = min(time.Duration(e.failures-t.cfg.AccountDelayAfter+1)*t.cfg.DelayStep, t.cfg.DelayMax)
		t.delayed.Inc()
	}
	return d
}

// Fail records a failed attempt by method ("password", "token", "bearer")
// and returns the scopes this failure locked (for the audit log).
func (t *Throttle) Fail(method, addr, account string) []string {
	addr = AddressKey(addr)
	now := t.now()
	t.failures.WithLabelValues(method).Inc()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.prune(now)
	var started []string
	bump := func(k throttleKey, lockAfter int, scope string) {
		e := t.entries[k]
		if e == nil || now.Sub(e.last) > t.cfg.Forget && !now.Before(e.lockedUntil) {
			e = &throttleEntry{}
			t.entries[k] = e
		}
		e.failures++
		e.last = now
		if lockAfter > 0 && e.failures >= lockAfter {
			wasLocked := now.Before(e.lockedUntil)
			lock := t.cfg.LockMax
			if n := e.failures - lockAfter; n < 30 {
				lock = min(t.cfg.LockBase<<n, t.cfg.LockMax)
			}
			e.lockedUntil = now.Add(lock)
			if !wasLocked {
				started = append(started, scope)
				t.lockouts.WithLabelValues(scope).Inc()
			}
		}
	}
	bump(throttleKey{'a', addr, ""}, t.cfg.AddressLockAfter, ScopeAddress)
	if account != "" {
		bump(throttleKey{'p', addr, account}, t.cfg.PairLockAfter, ScopeAccountAddress)
		bump(throttleKey{'u', "", account}, 0, "")
	}
	return started
}

// Succeed clears the (address, account) counter after a good login.
func (t *Throttle) Succeed(addr, account string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.entries, throttleKey{'p', AddressKey(addr), account})
}

// prune drops forgotten counters when the table is full, then any
// unlocked ones (the memory bound holds against many addresses).
func (t *Throttle) prune(now time.Time) {
	if len(t.entries) < t.cfg.MaxEntries {
		return
	}
	for k, e := range t.entries {
		if now.Sub(e.last) > t.cfg.Forget && !now.Before(e.lockedUntil) {
			delete(t.entries, k)
		}
	}
	for k, e := range t.entries {
		if len(t.entries) < t.cfg.MaxEntries {
			return
		}
		if !now.Before(e.lockedUntil) {
			delete(t.entries, k)
		}
	}
}
