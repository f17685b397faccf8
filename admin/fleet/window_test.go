package fleet

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/shared/limiter"
)

// windowClock is the admin's clock in the window tests: a fixed offset into
// window number n of an hour-long window, from the current real hour on
// (the counters expire at their window's end on Redis' real clock, so the
// windows must not be in the past).
type windowClock struct {
	base time.Time
	n    atomic.Int64
}

func newWindowClock() *windowClock {
	return &windowClock{base: time.Now().Truncate(time.Hour).Add(10 * time.Second)}
}

func (c *windowClock) now() time.Time {
	return c.base.Add(time.Duration(c.n.Load()) * time.Hour)
}

func (c *windowClock) start() int64 { return c.now().Truncate(time.Hour).UnixMilli() }

func windowReturn(rule, id string, hits int64, startMS int64) *ratelimitv3.RateLimitDescriptor {
	d := desc(rule, id, hits, true)
	d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: KeyWindow, Value: strconv.FormatInt(startMS, 10)})
	return d
}

func TestGlobalWindowLeasesAreAllOrNothingAndReturnsStayInTheirWindow(t *testing.T) {
	forEachBackend(t, testGlobalWindowLeases)
}

func testGlobalWindowLeases(t *testing.T, b Backend) {
	clock := newWindowClock()
	rules := &StaticRules{Windows: map[string]Window{"win": {Limit: 10, Seconds: 3600}}}
	s := startRLS(t, Options{Backend: b, Rules: rules, Timeout: time.Second, Now: clock.now})
	OK, OVER := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT

	resp := s.mustCall(t, "n1", desc("win", "A", 6, false))
	checkStatus(t, "lease 6 of 10", resp.Statuses[0], OK, 4)
	if d := resp.Statuses[0].DurationUntilReset.AsDuration(); d != time.Hour-10*time.Second {
		t.Errorf("duration_until_reset = %v, want the time to the window's end, 59m50s", d)
	}
	if cl := resp.Statuses[0].CurrentLimit; cl.Unit != rlsv3.RateLimitResponse_RateLimit_HOUR || cl.RequestsPerUnit != 10 {
		t.Errorf("current_limit = %v, want 10 per HOUR", cl)
	}
	checkStatus(t, "lease 5 with 4 left: nothing", s.mustCall(t, "n2", desc("win", "A", 5, false)).Statuses[0], OVER, 4)
	checkStatus(t, "lease the last 4", s.mustCall(t, "n2", desc("win", "A", 4, false)).Statuses[0], OK, 0)
	checkStatus(t, "another identity has its own window", s.mustCall(t, "n2", desc("win", "B", 10, false)).Statuses[0], OK, 0)

	checkStatus(t, "return 3 in the window", s.mustCall(t, "n1", windowReturn("win", "A", 3, clock.start())).Statuses[0], OK, 3)
	checkStatus(t, "query", s.mustCall(t, "n1", desc("win", "A", 0, false)).Statuses[0], OK, 3)

	prev := clock.start()
	clock.n.Add(1)
	checkStatus(t, "the next window starts empty", s.mustCall(t, "n1", desc("win", "A", 10, false)).Statuses[0], OK, 0)
	s.mustCall(t, "n1", windowReturn("win", "A", 5, prev))
	checkStatus(t, "a return naming the past window frees nothing now", s.mustCall(t, "n1", desc("win", "A", 1, false)).Statuses[0], OVER, 0)
	checkStatus(t, "a return of more than was leased stops at zero",
		s.mustCall(t, "n1", windowReturn("win", "A", 50, clock.start())).Statuses[0], OK, 10)
	checkStatus(t, "a return without its window counts in the current one",
		s.mustCall(t, "n1", desc("win", "A", 10, false), desc("win", "A", 4, true)).Statuses[1], OK, 4)
}

func TestGlobalQuotaCountsInTheCalendarPeriodOfItsZone(t *testing.T) {
	forEachBackend(t, testGlobalQuota)
}

func testGlobalQuota(t *testing.T, b Backend) {
	loc, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	q := limiter.Quota{Limit: 5, Period: limiter.PeriodDay, Location: loc}
	now := time.Now()
	start, end := limiter.PeriodBounds(limiter.PeriodDay, loc, float64(now.Unix()))
	rules := &StaticRules{Windows: map[string]Window{"daily": {Limit: 5, Quota: q}}}
	s := startRLS(t, Options{Backend: b, Rules: rules, Timeout: time.Second, Now: func() time.Time { return now }})
	st := s.mustCall(t, "n1", desc("daily", "A", 5, false)).Statuses[0]
	checkStatus(t, "lease the day's 5", st, rlsv3.RateLimitResponse_OK, 0)
	want := time.Unix(int64(end), 0).Sub(now)
	if d := st.DurationUntilReset.AsDuration(); d != want {
		t.Errorf("duration_until_reset = %v, want %v (to New York's next midnight)", d, want)
	}
	if cl := st.CurrentLimit; cl.Unit != rlsv3.RateLimitResponse_RateLimit_DAY || cl.RequestsPerUnit != 5 {
		t.Errorf("current_limit = %v, want 5 per DAY", cl)
	}
	checkStatus(t, "the day is spent", s.mustCall(t, "n1", desc("daily", "A", 1, false)).Statuses[0], rlsv3.RateLimitResponse_OVER_LIMIT, 0)
	// The return names the period by its start, as the plugin does.
	checkStatus(t, "a return in the period", s.mustCall(t, "n1", windowReturn("daily", "A", 2, int64(start)*1000)).Statuses[0],
		rlsv3.RateLimitResponse_OK, 2)
}

// Many hosts leasing and returning at once: in every window, what the
// fleet holds (leased minus returned) never passes the limit, and once
// every host has asked until refused with nothing left, it is exactly the
// limit (all-or-nothing grants sized by limit_remaining lose nothing).
func TestGlobalWindowHostsTogetherNeverLeaseMoreThanTheLimit(t *testing.T) {
	forEachBackend(t, testGlobalWindowHostsTogether)
}

func testGlobalWindowHostsTogether(t *testing.T, b Backend) {
	clock := newWindowClock()
	const limit, hosts = 200, 8
	rules := &StaticRules{Windows: map[string]Window{"win": {Limit: limit, Seconds: 3600}}}
	s := startRLS(t, Options{Backend: b, Rules: rules, Timeout: time.Second, Now: clock.now})
	for round := 0; round < 3; round++ {
		var held atomic.Int64
		start := clock.start()
		var wg sync.WaitGroup
		for h := 0; h < hosts; h++ {
			wg.Add(1)
			go func(seed uint64) {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, 1))
				ask := int64(1 + rng.IntN(20))
				for {
					st, err := s.one(t, desc("win", "A", ask, false))
					if err != nil {
						t.Error(err)
						return
					}
					if st.Code == rlsv3.RateLimitResponse_OK {
						held.Add(ask)
						if rng.IntN(3) == 0 { // give part of it back
							back := 1 + rng.Int64N(ask)
							if _, err := s.one(t, windowReturn("win", "A", back, start)); err != nil {
								t.Error(err)
								return
							}
							held.Add(-back)
						}
						continue
					}
					if st.LimitRemaining == 0 {
						return
					}
					ask = min(ask, int64(st.LimitRemaining))
				}
			}(uint64(round*hosts + h))
		}
		wg.Wait()
		if got := held.Load(); got != limit {
			t.Fatalf("window %d: the hosts hold %d, want exactly the limit %d", round, got, limit)
		}
		clock.n.Add(1)
	}
}

func TestWindowEntryErrorsNameTheField(t *testing.T) {
	for _, c := range []struct {
		d    *ratelimitv3.RateLimitDescriptor
		want string
	}{
		{windowReturn("win", "A", 1, -1), "entries[3]: sluice_window"},
		{func() *ratelimitv3.RateLimitDescriptor {
			d := desc("win", "A", 1, false)
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: KeyWindow, Value: "0"})
			return d
		}(), "sluice_window without sluice_op"},
		{func() *ratelimitv3.RateLimitDescriptor {
			d := windowReturn("win", "A", 1, 0)
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: KeyWindow, Value: "0"})
			return d
		}(), "appears twice"},
	} {
		if _, err := parseDescriptor(0, c.d, 0); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one containing %q", err, c.want)
		}
	}
}

// one makes a call of one descriptor (safe in a goroutine: no Fatal).
func (r *rls) one(t *testing.T, d *ratelimitv3.RateLimitDescriptor) (*rlsv3.RateLimitResponse_DescriptorStatus, error) {
	resp, _, err := r.call(t, "host", &rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
	if err != nil {
		return nil, err
	}
	return resp.Statuses[0], nil
}

func TestPolicyRulesListTheGlobalWindows(t *testing.T) {
	rules := &PolicyRules{}
	rules.Set(3, []byte(`{"fleet":{"cluster":"rls"},"rules":[
	  {"name":"tb","scope":"global","limit_keys":["header:x-k"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}},
	  {"name":"daily","scope":"global","limit_keys":["header:x-k"],"algorithm":"quota","algorithm_config":{"limit":100,"period":"day"}},
	  {"name":"minute","scope":"global","limit_keys":["header:x-k"],"algorithm":"fixed_window","algorithm_config":{"limit":10,"window_seconds":60}}]}`))
	if _, ok := rules.GlobalWindow("minute"); !ok {
		t.Fatal("the fixed window is not among the global windows")
	}
	if got := strings.Join(rules.Names(), ","); got != "tb,daily,minute" {
		t.Errorf("Names() = %s, want tb,daily,minute (the dashboard lists the windows too)", got)
	}
	o := NewServer(Options{Backend: &fakeBackend{}, Rules: rules}).Overview()
	if len(o.Rules) != 3 || !o.Rules[2].Known || o.Rules[2].Limit.Burst != 10 || o.Rules[2].Limit.Rate != 10.0/60 {
		t.Errorf("dashboard rules %+v, want minute known with its 10 per 60 s", o.Rules)
	}
}

// TestGlobalQuotasCountCalendarPeriods: a global quota's window is its
// calendar period in its zone, a year included.
func TestGlobalQuotasCountCalendarPeriods(t *testing.T) {
	rules := &PolicyRules{}
	rules.Set(1, []byte(`{"fleet":{"cluster":"rls"},"rules":[
	  {"name":"yearly","scope":"global","limit_keys":["header:x-k"],"algorithm":"quota","algorithm_config":{"limit":1000,"period":"year","time_zone":"Asia/Tokyo"}},
	  {"name":"monthly","scope":"global","limit_keys":["header:x-k"],"algorithm":"quota","algorithm_config":{"limit":100,"period":"month"}}]}`))
	now := float64(time.Date(2026, 12, 31, 16, 0, 0, 0, time.UTC).Unix()) // 2027-01-01 01:00 in Tokyo
	for name, want := range map[string][2]time.Time{
		"yearly":  {time.Date(2026, 12, 31, 15, 0, 0, 0, time.UTC), time.Date(2027, 12, 31, 15, 0, 0, 0, time.UTC)},
		"monthly": {time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		w, ok := rules.GlobalWindow(name)
		if !ok || !w.valid() {
			t.Fatalf("%s: no valid global window", name)
		}
		start, end := w.Quota.Bounds(now)
		if start != float64(want[0].Unix()) || end != float64(want[1].Unix()) {
			t.Errorf("%s: period [%v, %v), want [%v, %v)", name, time.Unix(int64(start), 0).UTC(), time.Unix(int64(end), 0).UTC(), want[0], want[1])
		}
	}
}
