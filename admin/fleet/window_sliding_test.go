package fleet

import (
	"context"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
	"github.com/sluice-rl/sluice/shared/policy"
)

// offsetClock is the admin's clock in the sliding and rolling window
// tests: base (the start of a future hour, so that Redis' real clock never
// expires the keys under test) plus an offset the test sets.
type offsetClock struct {
	base time.Time
	at   atomic.Int64
}

func newOffsetClock() *offsetClock {
	return &offsetClock{base: time.Now().Truncate(time.Hour).Add(time.Hour)}
}

func (c *offsetClock) set(d time.Duration) { c.at.Store(int64(d)) }
func (c *offsetClock) now() time.Time      { return c.base.Add(time.Duration(c.at.Load())) }
func (c *offsetClock) ms(d time.Duration) int64 {
	return c.base.Add(d).UnixMilli()
}

func TestGlobalSlidingWindowLeasesAgainstTheEstimateAcrossTheBoundary(t *testing.T) {
	forEachBackend(t, testGlobalSlidingWindow)
}

func testGlobalSlidingWindow(t *testing.T, b Backend) {
	clock := newOffsetClock()
	rules := &StaticRules{Windows: map[string]Window{"slide": {Limit: 10, Seconds: 3600, Sliding: true}}}
	s := startRLS(t, Options{Backend: b, Rules: rules, Timeout: time.Second, Now: clock.now})
	OK, OVER := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT

	clock.set(20 * time.Minute)
	st := s.mustCall(t, "n1", desc("slide", "A", 6, false)).Statuses[0]
	checkStatus(t, "lease 6 of 10, nothing before", st, OK, 4)
	if d := st.DurationUntilReset.AsDuration(); d != 40*time.Minute {
		t.Errorf("duration_until_reset = %v, want the time to the window's end (the lease's), 40m", d)
	}
	if cl := st.CurrentLimit; cl.Unit != rlsv3.RateLimitResponse_RateLimit_HOUR || cl.RequestsPerUnit != 10 {
		t.Errorf("current_limit = %v, want 10 per HOUR", cl)
	}
	checkStatus(t, "lease 5 with 4 left: nothing", s.mustCall(t, "n2", desc("slide", "A", 5, false)).Statuses[0], OVER, 4)
	checkStatus(t, "lease the last 4", s.mustCall(t, "n2", desc("slide", "A", 4, false)).Statuses[0], OK, 0)

	// Halfway through the next window the previous 10 weigh 5.
	clock.set(90 * time.Minute)
	checkStatus(t, "estimate 5: a lease of 6 is refused", s.mustCall(t, "n1", desc("slide", "A", 6, false)).Statuses[0], OVER, 5)
	checkStatus(t, "a lease of 5 fills it", s.mustCall(t, "n1", desc("slide", "A", 5, false)).Statuses[0], OK, 0)
	// A return to the previous window lowers its weight: 6 × 0.5 + 5 = 8.
	// (A sliding window's return answers for the window it names, 6 left in it.)
	checkStatus(t, "return 4 to the previous window", s.mustCall(t, "n1", windowReturn("slide", "A", 4, clock.ms(0))).Statuses[0], OK, 4)
	checkStatus(t, "estimate 8", s.mustCall(t, "n1", desc("slide", "A", 0, false)).Statuses[0], OK, 2)
	// Later in the window the previous count weighs less: 6 × 0.25 + 5 = 6.5.
	clock.set(105 * time.Minute)
	checkStatus(t, "estimate 6.5: 3 fit", s.mustCall(t, "n1", desc("slide", "A", 4, false)).Statuses[0], OVER, 3)
	checkStatus(t, "lease 3: estimate 9.5", s.mustCall(t, "n1", desc("slide", "A", 3, false)).Statuses[0], OK, 0)

	// Two windows on, nothing counts: the window leased in is neither
	// current nor previous.
	clock.set(3*time.Hour + 10*time.Minute)
	s.mustCall(t, "n1", windowReturn("slide", "A", 8, clock.ms(time.Hour)))
	checkStatus(t, "a return to a window that left the estimate changes nothing", s.mustCall(t, "n1", desc("slide", "A", 0, false)).Statuses[0], OK, 10)
	// A return never creates a counter (nor goes below zero).
	s.mustCall(t, "n1", windowReturn("slide", "A", 5, clock.ms(3*time.Hour)))
	checkStatus(t, "lease 10 after a return to an empty window", s.mustCall(t, "n1", desc("slide", "A", 10, false)).Statuses[0], OK, 0)
	checkStatus(t, "the return made no room", s.mustCall(t, "n1", desc("slide", "A", 1, false)).Statuses[0], OVER, 0)
}

func TestGlobalRollingWindowSumsItsSubPeriodsAndDropsThoseThatLeft(t *testing.T) {
	key := redisgcra.RollingKey("sluice", "roll", "A")
	t.Run("redis", func(t *testing.T) {
		srv := fleettest.StartRedis(t)
		b := redisBackend(t, srv.Addr)
		clock := testGlobalRollingWindow(t, b)
		c := redis.NewClient(&redis.Options{Addr: srv.Addr})
		defer c.Close()
		ctx := context.Background()
		fields := func() []int64 {
			t.Helper()
			keys, err := c.HKeys(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			var starts []int64
			for _, k := range keys {
				n, err := strconv.ParseInt(k, 10, 64)
				if err != nil {
					t.Fatalf("field %q: %v", k, err)
				}
				starts = append(starts, n)
			}
			slices.Sort(starts)
			return starts
		}
		// The quarters that left the window less than a window ago stay
		// (unsummed), as PostgreSQL's rows stay until cleaned: an admin
		// whose clock is behind may still count them.
		if got, want := fields(), []int64{clock.ms(0), clock.ms(quarter), clock.ms(4 * quarter)}; !slices.Equal(got, want) {
			t.Errorf("fields %v, want quarters 1, 2 and 5 %v", got, want)
		}
		exp, err := c.PExpireTime(ctx, key).Result()
		if want := clock.base.Add(8*quarter + windowKeyGrace); err != nil || !time.UnixMilli(int64(exp/time.Millisecond)).Equal(want) {
			t.Errorf("expiry %v (%v), want when the fifth quarter leaves the window, %v", exp, err, want)
		}
		// A take in the ninth quarter (the window its sixth to ninth)
		// deletes those that left it a window ago or more: the first two.
		take := redisgcra.Op{Key: key, Counter: true, Rolling: true, Amount: 1, Limit: 10,
			FieldMS: clock.ms(8 * quarter), OldestMS: clock.ms(5 * quarter), ExpireAtMS: clock.base.Add(12*quarter + windowKeyGrace).UnixMilli()}
		if _, err := b.Run(ctx, []redisgcra.Op{take}); err != nil {
			t.Fatal(err)
		}
		if got, want := fields(), []int64{clock.ms(4 * quarter), clock.ms(8 * quarter)}; !slices.Equal(got, want) {
			t.Errorf("fields after a take two windows on %v, want quarters 5 and 9 %v", got, want)
		}
	})
	t.Run("postgres", func(t *testing.T) {
		b := postgresBackend(t, fleettest.StartPostgres(t, fleettest.PostgresOptions{}).URL)
		clock := testGlobalRollingWindow(t, b)
		// One row per sub-period leased in (quarters 1, 2 and 5), each
		// kept (then deleted by Clean) until it leaves the window.
		rows, err := b.Pool().Query(context.Background(), `SELECT ARRAY[start_ms, expires_ms] FROM sluice_fleet_windows WHERE key = $1 ORDER BY start_ms`, key)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[[2]int64])
		var want [][2]int64
		for _, q := range []time.Duration{0, 1, 4} {
			want = append(want, [2]int64{clock.ms(q * quarter), clock.base.Add((q+4)*quarter + windowKeyGrace).UnixMilli()})
		}
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("rows (start, expiry) %v (%v), want %v", got, err, want)
		}
	})
}

// quarter is the rolling window test's sub-period.
const quarter = 15 * time.Minute

// testGlobalRollingWindow leases and returns in a rolling window of four
// quarters of an hour over b, and returns the admin's clock it ran on.
func testGlobalRollingWindow(t *testing.T, b Backend) *offsetClock {
	clock := newOffsetClock()
	// 10 per hour in four quarters, at most 6 in one.
	rules := &StaticRules{Windows: map[string]Window{"roll": {Limit: 10, Seconds: 900, Periods: 4, MaxPerPeriod: 6}}}
	s := startRLS(t, Options{Backend: b, Rules: rules, Timeout: time.Second, Now: clock.now})
	OK, OVER := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT

	clock.set(5 * time.Minute)
	st := s.mustCall(t, "n1", desc("roll", "A", 6, false)).Statuses[0]
	checkStatus(t, "lease the quarter's 6", st, OK, 0)
	if d := st.DurationUntilReset.AsDuration(); d != 10*time.Minute {
		t.Errorf("duration_until_reset = %v, want the time to the sub-period's end (the lease's), 10m", d)
	}
	if cl := st.CurrentLimit; cl.Unit != rlsv3.RateLimitResponse_RateLimit_HOUR || cl.RequestsPerUnit != 10 {
		t.Errorf("current_limit = %v, want 10 per HOUR", cl)
	}
	checkStatus(t, "the quarter's cap holds", s.mustCall(t, "n1", desc("roll", "A", 1, false)).Statuses[0], OVER, 0)

	clock.set(quarter + time.Minute)
	checkStatus(t, "5 with 4 left in the window: nothing", s.mustCall(t, "n1", desc("roll", "A", 5, false)).Statuses[0], OVER, 4)
	checkStatus(t, "lease the window's last 4", s.mustCall(t, "n1", desc("roll", "A", 4, false)).Statuses[0], OK, 0)
	checkStatus(t, "return 2 to the first quarter", s.mustCall(t, "n1", windowReturn("roll", "A", 2, clock.ms(0))).Statuses[0], OK, 2)
	checkStatus(t, "a return of more than was leased stops at zero",
		s.mustCall(t, "n1", windowReturn("roll", "A", 50, clock.ms(quarter))).Statuses[0], OK, 6)
	checkStatus(t, "lease 4 again", s.mustCall(t, "n1", desc("roll", "A", 4, false)).Statuses[0], OK, 2)

	// An hour after the first quarter it has left the window: 4 remain.
	clock.set(4*quarter + time.Minute)
	checkStatus(t, "the first quarter left the sum", s.mustCall(t, "n1", desc("roll", "A", 0, false)).Statuses[0], OK, 6)
	s.mustCall(t, "n1", windowReturn("roll", "A", 4, clock.ms(0)))
	checkStatus(t, "a return to a quarter that left the window changes nothing", s.mustCall(t, "n1", desc("roll", "A", 6, false)).Statuses[0], OK, 0)
	clock.set(5*quarter + time.Minute)
	checkStatus(t, "the second quarter left too", s.mustCall(t, "n1", desc("roll", "A", 0, false)).Statuses[0], OK, 4)

	return clock
}

func TestGlobalSlidingAndRollingRulesBecomeWindows(t *testing.T) {
	doc := []byte(`{"fleet":{"cluster":"rls"},"rules":[
	  {"name":"s","scope":"global","limit_keys":["header:x-k"],"algorithm":"sliding_window","algorithm_config":{"limit":10.5,"window_seconds":60}},
	  {"name":"r","scope":"global","limit_keys":["header:x-k"],"algorithm":"rolling_window","algorithm_config":{"limit":100,"window_seconds":86400,"period_seconds":3600,"max_per_period":20}},
	  {"name":"one","scope":"global","limit_keys":["header:x-k"],"algorithm":"rolling_window","algorithm_config":{"limit":100,"window_seconds":60,"period_seconds":60,"max_per_period":20}}]}`)
	if _, err := policy.Parse(doc); err != nil {
		t.Fatal(err)
	}
	ws, _ := GlobalWindows(doc)
	for name, want := range map[string]Window{
		"s":   {Limit: 10, Seconds: 60, Sliding: true},
		"r":   {Limit: 100, Seconds: 3600, Periods: 24, MaxPerPeriod: 20},
		"one": {Limit: 20, Seconds: 60, Periods: 1}, // one period: a fixed window of the cap (a rolling window's: never charged)
	} {
		if got := ws[name]; got != want {
			t.Errorf("%s: %+v, want %+v", name, got, want)
		}
	}
}
