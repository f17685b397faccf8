package pggcra_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/fleet/pggcra"
	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
)

// windowOp is a counter op of the window starting at start (unix ms) of
// identity id, as the admin's server makes it.
func windowOp(id string, start, amount, limit int64, ret bool) redisgcra.Op {
	return redisgcra.Op{Key: redisgcra.WindowKey("sluice", "win", id, start), StartMS: start, Counter: true,
		Amount: amount, Limit: limit, Return: ret, ExpireAtMS: start + 3_600_000}
}

// slidingOp is a sliding window's take (a return is a windowOp) of the
// window of length ms starting at start, at the admin's now, as the
// admin's server makes it.
func slidingOp(id string, start, length, now, amount, limit int64) redisgcra.Op {
	op := windowOp(id, start, amount, limit, false)
	op.PrevKey = redisgcra.WindowKey("sluice", "win", id, start-length)
	op.NowMS, op.LengthMS, op.ExpireAtMS = now, length, start+2*length+1000
	return op
}

// rollingOp is a rolling window's op counted in (or returned to) the
// sub-period starting at field, the window's oldest sub-period starting at
// oldest, one sub-period capped at maxPer (0: no cap).
func rollingOp(id string, field, oldest, amount, limit, maxPer int64, ret bool) redisgcra.Op {
	return redisgcra.Op{Key: redisgcra.RollingKey("sluice", "win", id), Counter: true, Rolling: true,
		FieldMS: field, OldestMS: oldest, MaxPerPeriod: maxPer, Amount: amount, Limit: limit, Return: ret,
		ExpireAtMS: field + 3_600_000}
}

// openAt opens Buckets whose sessions really run at level: the admin's
// Config forces READ COMMITTED, this pool (a pooler's, say) does not.
func openAt(t *testing.T, url, level string) *pggcra.Buckets {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 16
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, `SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL `+level)
		return err
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var got string
	if err := pool.QueryRow(context.Background(), `SHOW transaction_isolation`).Scan(&got); err != nil || got != level {
		t.Fatalf("the pool runs at %q (%v), want %q: the test would not test that level", got, err, level)
	}
	return pggcra.NewOnPool(pool)
}

// windowFunctions are the window function's two signatures: the one with
// charges (schema version 5) and the one of versions 3 and 4.
const windowFunctions = `sluice_fleet_window(text[], bigint[], bigint[], bigint[], bigint[], boolean[], smallint[], bigint[], bigint[], bigint[], bigint[], boolean[]),
	sluice_fleet_window(text[], bigint[], bigint[], bigint[], bigint[], boolean[], smallint[], bigint[], bigint[], bigint[], bigint[])`

func windowRows(t *testing.T, b *pggcra.Buckets) int {
	t.Helper()
	var n int
	if err := b.Pool().QueryRow(context.Background(), `SELECT count(*) FROM sluice_fleet_windows`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// 64 callers leasing 1 to 3 from one window at once, half of them giving
// one of a grant of 2 or 3 back at once, each asking for less once refused
// with room left: no call fails, no retry is needed, and each window ends
// holding exactly what its limit leaves room for, as the callers' own
// tally says: two fixed windows of one identity one after the other, a
// sliding window whose previous window's count weighs 100, a rolling
// window whose older sub-period holds 100 and whose cap leaves 350.
func TestWindowExactUnderConcurrencyAtEveryIsolationLevel(t *testing.T) {
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{})
	const limit, callers = 500, 64
	open(t, pg.URL) // the schema
	for _, level := range []string{"read committed", "serializable"} {
		t.Run(strings.ReplaceAll(level, " ", "_"), func(t *testing.T) {
			b := openAt(t, pg.URL, level)
			ctx := context.Background()
			start := time.Now().Truncate(time.Hour).UnixMilli()
			const hour = 3_600_000
			id := level
			fixed := func(start int64) func(int64, bool) redisgcra.Op {
				return func(n int64, ret bool) redisgcra.Op { return windowOp(id, start, n, limit, ret) }
			}
			sliding := func(n int64, ret bool) redisgcra.Op {
				if ret {
					return windowOp(id+"/s", start, n, limit, true)
				}
				return slidingOp(id+"/s", start, hour, start+hour/2, n, limit)
			}
			rolling := func(n int64, ret bool) redisgcra.Op {
				return rollingOp(id+"/r", start, start-hour, n, limit, 350, ret)
			}
			// The sliding window's previous window: 200 × (1 − 1/2).
			// The rolling window's older sub-period: 100.
			if _, err := b.Run(ctx, []redisgcra.Op{windowOp(id+"/s", start-hour, 200, limit, false),
				rollingOp(id+"/r", start-hour, start-hour, 100, limit, 0, false)}); err != nil {
				t.Fatal(err)
			}
			for _, w := range []struct {
				name string
				op   func(amount int64, ret bool) redisgcra.Op
				want int64 // the most the callers can hold
			}{
				{"fixed window", fixed(start), limit},
				{"the next fixed window", fixed(start + hour), limit},
				{"sliding window", sliding, limit - 100},
				{"rolling window", rolling, 350},
			} {
				var held, calls atomic.Int64
				var wg sync.WaitGroup
				for g := range callers {
					wg.Go(func() {
						rng := rand.New(rand.NewPCG(uint64(g), uint64(len(w.name))))
						ask := int64(1 + rng.IntN(3))
						for {
							calls.Add(1)
							outs, err := b.Run(ctx, []redisgcra.Op{w.op(ask, false)})
							if err != nil {
								t.Error(err)
								return
							}
							if o := outs[0]; !o.Allowed {
								if o.Count >= limit {
									return
								}
								ask = min(ask, limit-o.Count)
								continue
							}
							held.Add(ask)
							if g%2 == 0 && ask > 1 { // keeps some: every caller ends refused at the limit
								if _, err := b.Run(ctx, []redisgcra.Op{w.op(1, true)}); err != nil {
									t.Error(err)
									return
								}
								held.Add(-1)
							}
						}
					})
				}
				wg.Wait()
				outs, err := b.Run(ctx, []redisgcra.Op{w.op(0, false)})
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%s: %d calls", w.name, calls.Load())
				if held.Load() != w.want || outs[0].Count != limit {
					t.Errorf("%s: the callers hold %d, the window's use is %d; want exactly %d held, the use at the limit %d", w.name, held.Load(), outs[0].Count, w.want, limit)
				}
			}
			ser, dead := b.Retries(pggcra.RetrySerialization), b.Retries(pggcra.RetryDeadlock)
			t.Logf("retries: %g serialization, %g deadlock", ser, dead)
			// Under READ COMMITTED nothing is retried; under SERIALIZABLE the
			// lost races are, unseen by the callers, and counted.
			if wantRetries := level == "serializable"; (ser > 0) != wantRetries || dead != 0 {
				t.Errorf("retries %g serialization, %g deadlock; want serialization retries only at serializable", ser, dead)
			}
		})
	}
}

// Takes are all or nothing; a return decrements only its own window's
// row, never below zero, and never creates one.
func TestWindowTakesAndReturnsAsTheRedisScript(t *testing.T) {
	b := open(t, fleettest.StartPostgres(t, fleettest.PostgresOptions{}).URL)
	ctx := context.Background()
	const w0, w1 = 1_000_000, 1_060_000
	for _, c := range []struct {
		name    string
		op      redisgcra.Op
		allowed bool
		count   int64
	}{
		{"a return to a window never leased creates nothing", windowOp("A", w0, 5, 10, true), true, 0},
		{"a take of more than the limit", windowOp("A", w0, 11, 10, false), false, 0},
		{"a take of 6", windowOp("A", w0, 6, 10, false), true, 6},
		{"a take of 5 with 4 left", windowOp("A", w0, 5, 10, false), false, 6},
		{"a query", windowOp("A", w0, 0, 10, false), true, 6},
		{"the next window is its own", windowOp("A", w1, 10, 10, false), true, 10},
		{"another identity is its own", windowOp("B", w0, 10, 10, false), true, 10},
		{"a return of 2", windowOp("A", w0, 2, 10, true), true, 4},
		{"a return of more than leased stops at zero", windowOp("A", w0, 50, 10, true), true, 0},
		{"the next window kept its count", windowOp("A", w1, 0, 10, false), true, 10},

		// Sliding (sliding.lua): prev × (1 − f) + cur + n <= limit, f the
		// fraction of the window elapsed; Count is the limit minus what
		// still fits. S's previous window w0 holds 8.
		{"sliding: the previous window's lease", windowOp("S", w0, 8, 10, false), true, 8},
		{"sliding: at f = 1/4 the estimate is 6", slidingOp("S", w1, 60_000, w1+15_000, 0, 10), true, 6},
		{"sliding: a take of 5 with 4 left", slidingOp("S", w1, 60_000, w1+15_000, 5, 10), false, 6},
		{"sliding: a take of 4", slidingOp("S", w1, 60_000, w1+15_000, 4, 10), true, 10},
		{"sliding: at f = 0.55, 3.6 + 4: 2 fit", slidingOp("S", w1, 60_000, w1+33_000, 0, 10), true, 8},
		{"sliding: a take of 3 past 10", slidingOp("S", w1, 60_000, w1+33_000, 3, 10), false, 8},
		{"sliding: a take of 2 to 9.6", slidingOp("S", w1, 60_000, w1+33_000, 2, 10), true, 10},
		{"sliding: a return goes to the window leased in", windowOp("S", w0, 3, 10, true), true, 5},
		{"sliding: the current window kept its 6", slidingOp("S", w1, 60_000, w1+33_000, 0, 10), true, 9},
		{"sliding: with no previous window, the window's count", slidingOp("T", w1, 60_000, w1, 7, 10), true, 7},

		// Rolling (rolling.lua): the sum of the sub-periods starting at
		// the oldest or later, and one sub-period's cap.
		{"rolling: a take of 4 in sub-period 0", rollingOp("R", 0, -2000, 4, 10, 0, false), true, 4},
		{"rolling: a take of 5 in sub-period 1", rollingOp("R", 1000, -1000, 5, 10, 0, false), true, 9},
		{"rolling: a take of 2 past the sum", rollingOp("R", 2000, 0, 2, 10, 0, false), false, 9},
		{"rolling: sub-period 0 left the window", rollingOp("R", 3000, 1000, 2, 10, 0, false), true, 7},
		{"rolling: no return to a sub-period that left", rollingOp("R", 0, 1000, 4, 10, 0, true), true, 7},
		{"rolling: a return to its own sub-period", rollingOp("R", 1000, 1000, 3, 10, 0, true), true, 4},
		{"rolling: a return of more than counted stops at zero", rollingOp("R", 1000, 1000, 9, 10, 0, true), true, 2},
		{"rolling: a return to a sub-period never leased creates nothing", rollingOp("R", 4000, 2000, 1, 10, 0, true), true, 2},
		{"rolling: the cap refuses a take the sum admits", rollingOp("R", 3000, 1000, 3, 10, 4, false), false, 8},
		{"rolling: a take up to the cap", rollingOp("R", 3000, 1000, 2, 10, 4, false), true, 10},
		{"rolling: a query reports the cap", rollingOp("R", 3000, 1000, 0, 10, 4, false), true, 10},
	} {
		outs, err := b.Run(ctx, []redisgcra.Op{c.op})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if o := outs[0]; o.Allowed != c.allowed || o.Count != c.count || o.Now == 0 {
			t.Errorf("%s: %+v, want allowed %v, count %d and the database's clock", c.name, o, c.allowed, c.count)
		}
	}
	if n := windowRows(t, b); n != 9 {
		t.Errorf("%d window rows, want 9 (A's two windows, B's one, S's two, T's one, R's three sub-periods; the returns created none)", n)
	}
}

// A call of buckets and windows together runs both, in one transaction,
// and answers each op in its own place; the same window twice in a call
// counts both, in order.
func TestCallsMixingBucketsAndWindows(t *testing.T) {
	b := open(t, fleettest.StartPostgres(t, fleettest.PostgresOptions{}).URL)
	limit := redisgcra.Limit{Rate: 0.001, Burst: 10}
	bucket := redisgcra.Op{Key: redisgcra.Key("sluice", "tb", "A"), Amount: limit.Cost(4), Tau: limit.Tau()}
	ops := []redisgcra.Op{windowOp("Z", 0, 3, 5, false), bucket, windowOp("A", 0, 1, 5, false), windowOp("Z", 0, 3, 5, false), bucket}
	outs, err := b.Run(context.Background(), ops)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		allowed bool
		count   int64
		tokens  uint64
	}{{true, 3, 0}, {true, 0, 6}, {true, 1, 0}, {false, 3, 0}, {true, 0, 2}}
	for i, o := range outs {
		w := want[i]
		if o.Allowed != w.allowed || o.Count != w.count || (!ops[i].Counter && limit.Remaining(o.Backlog) != w.tokens) {
			t.Errorf("op %d: %+v (%d tokens left), want allowed %v, count %d, %d tokens left", i, o, limit.Remaining(o.Backlog), w.allowed, w.count, w.tokens)
		}
	}
}

// Calls of several windows in opposite orders lock their rows in one
// order: no deadlock, no retry.
func TestMultiWindowCallsDoNotDeadlock(t *testing.T) {
	b := open(t, fleettest.StartPostgres(t, fleettest.PostgresOptions{}).URL)
	ids := []string{"a", "b", "c", "d"}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for range 50 {
				ops := make([]redisgcra.Op, len(ids))
				for i, id := range ids {
					if g%2 == 1 {
						id = ids[len(ids)-1-i]
					}
					ops[i] = windowOp(id, 0, 1, 1_000_000, false)
				}
				if _, err := b.Run(context.Background(), ops); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	outs, err := b.Run(context.Background(), []redisgcra.Op{windowOp("a", 0, 0, 1, false), windowOp("d", 0, 0, 1, false)})
	if err != nil || outs[0].Count != 16*50 || outs[1].Count != 16*50 {
		t.Fatalf("counts %+v %v, want %d each", outs, err, 16*50)
	}
	if n := b.Retries(pggcra.RetryDeadlock); n != 0 {
		t.Errorf("%g deadlock retries", n)
	}
}

// Clean deletes the rows of windows past their expiry, in batches, and
// keeps the current ones: the table holds the active windows only.
func TestCleanDeletesEndedWindowsOnly(t *testing.T) {
	b := open(t, fleettest.StartPostgres(t, fleettest.PostgresOptions{}).URL)
	ctx := context.Background()
	now := time.Now().UnixMilli()
	const ended = pggcra.CleanBatch + 200
	var ops []redisgcra.Op
	for i := range ended {
		op := windowOp(fmt.Sprint(i), now-120_000, 1, 10, false)
		op.ExpireAtMS = now - 1000
		ops = append(ops, op)
	}
	ops = append(ops, windowOp("live", now-1000, 4, 10, false))
	for start := 0; start < len(ops); start += 250 {
		if _, err := b.Run(ctx, ops[start:min(start+250, len(ops))]); err != nil {
			t.Fatal(err)
		}
	}
	if n := windowRows(t, b); n != ended+1 {
		t.Fatalf("%d rows, want %d", n, ended+1)
	}
	n, err := b.Clean(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != ended || windowRows(t, b) != 1 {
		t.Fatalf("cleaned %d, %d rows left; want the %d ended windows gone and the live one kept", n, windowRows(t, b), ended)
	}
	outs, err := b.Run(ctx, []redisgcra.Op{windowOp("live", now-1000, 0, 10, false)})
	if err != nil || outs[0].Count != 4 {
		t.Fatalf("the live window after the cleanup: %+v %v, want its count 4", outs, err)
	}
}

// A database of the first schema version (token buckets only) is upgraded
// by the next admin's start: its buckets kept, the window table added.
func TestSchemaUpgradeAddsWindowsAndKeepsBuckets(t *testing.T) {
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{})
	old := open(t, pg.URL)
	ctx := context.Background()
	limit := redisgcra.Limit{Rate: 0.001, Burst: 10}
	bucket := redisgcra.Key("sluice", "tb", "A")
	if _, err := old.Run(ctx, []redisgcra.Op{{Key: bucket, Amount: limit.Cost(4), Tau: limit.Tau()}}); err != nil {
		t.Fatal(err)
	}
	// Back to version 1, as an admin of that version left it.
	if _, err := old.Pool().Exec(ctx, `DROP TABLE sluice_fleet_windows; DROP FUNCTION `+windowFunctions+`; DELETE FROM sluice_fleet_schema WHERE version >= 2`); err != nil {
		t.Fatal(err)
	}
	old.Close()
	b := open(t, pg.URL)
	var versions int
	if err := b.Pool().QueryRow(ctx, `SELECT count(*) FROM sluice_fleet_schema`).Scan(&versions); err != nil || versions != pggcra.SchemaVersion {
		t.Fatalf("%d schema versions recorded (%v), want %d", versions, err, pggcra.SchemaVersion)
	}
	outs, err := b.Run(ctx, []redisgcra.Op{{Key: bucket, Tau: limit.Tau()}, windowOp("A", 0, 3, 5, false)})
	if err != nil {
		t.Fatal(err)
	}
	if limit.Remaining(outs[0].Backlog) != 6 || !outs[1].Allowed || outs[1].Count != 3 {
		t.Errorf("after the upgrade: %+v, want the bucket's 6 tokens kept and a window lease of 3", outs)
	}
	if n := b.Retries(pggcra.RetrySchema); n != 0 {
		t.Errorf("%g schema retries: the upgrade should happen at start", n)
	}
}

// A database of schema version 2 (fixed windows only, the window function
// of six arguments) is upgraded by the next admin's start: the old
// function replaced (by the one with charges, and the one of version 3
// kept on top of it), its windows' counts kept, sliding and rolling
// windows counted.
func TestSchemaUpgradeReplacesTheWindowFunctionAndKeepsWindows(t *testing.T) {
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{})
	old := open(t, pg.URL)
	ctx := context.Background()
	if _, err := old.Run(ctx, []redisgcra.Op{windowOp("A", 0, 3, 5, false)}); err != nil {
		t.Fatal(err)
	}
	// Back to version 2, as an admin of that version left it.
	if _, err := old.Pool().Exec(ctx, `DROP FUNCTION `+windowFunctions+`; DELETE FROM sluice_fleet_schema WHERE version >= 3`); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Pool().Exec(ctx, pggcra.MigrationSQL(2)); err != nil {
		t.Fatal(err)
	}
	old.Close()
	b := open(t, pg.URL)
	var functions int
	if err := b.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_proc WHERE proname = 'sluice_fleet_window'`).Scan(&functions); err != nil || functions != 2 {
		t.Fatalf("%d window functions (%v), want the new one and version 3's, not version 2's", functions, err)
	}
	outs, err := b.Run(ctx, []redisgcra.Op{windowOp("A", 0, 0, 5, false), slidingOp("A", 60_000, 60_000, 90_000, 2, 5),
		rollingOp("A", 0, 0, 5, 5, 0, false)})
	if err != nil {
		t.Fatal(err)
	}
	if outs[0].Count != 3 || !outs[1].Allowed || outs[1].Count != 4 || !outs[2].Allowed || outs[2].Count != 5 {
		t.Errorf("after the upgrade: %+v, want the window's 3 kept, a sliding take over 1.5 + 2 and a rolling take of 5", outs)
	}
	if n := b.Retries(pggcra.RetrySchema); n != 0 {
		t.Errorf("%g schema retries: the upgrade should happen at start", n)
	}
}

// Admins whose clocks disagree across a boundary: 64 callers leasing from
// one rolling window at once, half of them (the clock behind) in the
// earlier sub-period, half in the next, each half's window holding both.
// The two sub-periods' rows still sum to exactly the limit: neither half's
// take ever reads the other's row stale.
func TestRollingWindowExactWhenAdminClocksStraddleABoundary(t *testing.T) {
	b := open(t, fleettest.StartPostgres(t, fleettest.PostgresOptions{}).URL)
	ctx := context.Background()
	const limit, callers, minute = 300, 64, 60_000
	start := time.Now().Truncate(time.Hour).UnixMilli()
	take := func(behind bool) redisgcra.Op {
		if behind {
			return rollingOp("skew", start-minute, start-2*minute, 1, limit, 0, false)
		}
		return rollingOp("skew", start, start-minute, 1, limit, 0, false)
	}
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for {
				outs, err := b.Run(ctx, []redisgcra.Op{take(g%2 == 1)})
				if err != nil {
					t.Error(err)
					return
				}
				if !outs[0].Allowed {
					return
				}
			}
		})
	}
	wg.Wait()
	var sum, rows int64
	if err := b.Pool().QueryRow(ctx, `SELECT coalesce(sum(n), 0), count(*) FROM sluice_fleet_windows WHERE key = $1`,
		redisgcra.RollingKey("sluice", "win", "skew")).Scan(&sum, &rows); err != nil {
		t.Fatal(err)
	}
	if sum != limit || rows != 2 {
		t.Errorf("the two sub-periods hold %d in %d rows after the race, want exactly the limit %d in 2", sum, rows, limit)
	}
}

// Charges of fixed windows and quotas as window.lua's: unconditional,
// counted past the limit up to the cap, never back, in order within a
// call, the row created as by a take (expiring at the window's end); 64
// callers charging and taking one hot window at once lose no update, at
// every isolation level (a session at SERIALIZABLE sends a call that lost
// a race again).
func TestWindowChargesAsTheRedisScript(t *testing.T) {
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{})
	b := open(t, pg.URL)
	ctx := context.Background()
	const start, expire = 1_000_000, 9_000_000
	fleettest.WindowCharges(t, b.Run, "a", start, expire)
	var expires []int64
	rows, err := b.Pool().Query(ctx, `SELECT expires_ms FROM sluice_fleet_windows WHERE key = $1`, redisgcra.Key("sluice", "charged-window", "a"))
	if err == nil {
		expires, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	}
	if err != nil || len(expires) != 2 || expires[0] != expire || expires[1] != expire {
		t.Errorf("the charged windows' rows expire at %v (%v), want two at %d", expires, err, expire)
	}
	for _, level := range []string{"read committed", "serializable"} {
		fleettest.WindowChargesLoseNothing(t, openAt(t, pg.URL, level).Run, "hot "+level, start, expire, 64, 10)
	}
	sliding := slidingOp("s", start, 60_000, start, 1, 10)
	sliding.Charge = true
	rolling := rollingOp("r", start, start, 1, 10, 0, false)
	rolling.Charge = true
	for _, op := range []redisgcra.Op{sliding, rolling} {
		if _, err := b.Run(ctx, []redisgcra.Op{windowOp("x", start, 1, 10, false), op}); err == nil {
			t.Errorf("a charge of %s: no error", op.Key)
		}
	}
	// The function refuses them too, whoever calls it.
	_, err = b.Pool().Exec(ctx, `SELECT * FROM sluice_fleet_window($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
		[]string{"k"}, []int64{start}, []int64{expire}, []int64{1}, []int64{10}, []bool{false}, []int16{2},
		[]int64{0}, []int64{0}, []int64{start}, []int64{0}, []bool{true})
	if err == nil || !strings.Contains(err.Error(), "a charge applies to a fixed window or a quota") {
		t.Errorf("the function charging a rolling window: %v, want its error", err)
	}
	if n := windowRows(t, b); n != 4 {
		t.Errorf("%d window rows, want 4 (a's two windows, the two hot ones; the calls refused wrote none)", n)
	}
}

// A database of schema version 4 is upgraded by the next admin's start:
// its windows kept, charges counted, and the window function of versions
// 3 and 4 kept for the admins of those versions still running during the
// upgrade, answering on the same rows.
func TestSchemaUpgradeAddsWindowChargesAndKeepsTheOldWindowFunction(t *testing.T) {
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{})
	old := open(t, pg.URL)
	ctx := context.Background()
	if _, err := old.Run(ctx, []redisgcra.Op{windowOp("A", 0, 3, 10, false)}); err != nil {
		t.Fatal(err)
	}
	// Back to version 4, as an admin of that version left it.
	if _, err := old.Pool().Exec(ctx, `DROP FUNCTION `+windowFunctions+`; DELETE FROM sluice_fleet_schema WHERE version >= 5`); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Pool().Exec(ctx, pggcra.MigrationSQL(3)); err != nil {
		t.Fatal(err)
	}
	// A call of version 4's admin: one fixed window op, no charges.
	v4 := func(b *pggcra.Buckets, amount int64) (allowed bool, count int64) {
		t.Helper()
		err := b.Pool().QueryRow(ctx, `SELECT allowed, counted FROM sluice_fleet_window($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
			[]string{redisgcra.Key("sluice", "win", "A")}, []int64{0}, []int64{3_600_000}, []int64{amount}, []int64{10}, []bool{false},
			[]int16{0}, []int64{0}, []int64{0}, []int64{0}, []int64{0}).Scan(&allowed, &count)
		if err != nil {
			t.Fatal(err)
		}
		return allowed, count
	}
	if ok, count := v4(old, 2); !ok || count != 5 {
		t.Fatalf("the version 4 function before the upgrade: %v, count %d, want a grant and 5", ok, count)
	}
	old.Close()
	b := open(t, pg.URL)
	var functions int
	if err := b.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_proc WHERE proname = 'sluice_fleet_window'`).Scan(&functions); err != nil || functions != 2 {
		t.Fatalf("%d window functions (%v), want the new one and version 4's", functions, err)
	}
	charge := windowOp("A", 0, 20, 12, false)
	charge.Charge = true
	outs, err := b.Run(ctx, []redisgcra.Op{windowOp("A", 0, 0, 10, false), charge})
	if err != nil {
		t.Fatal(err)
	}
	if outs[0].Count != 5 || !outs[1].Allowed || outs[1].Count != 12 || outs[1].Charged != 7 {
		t.Errorf("after the upgrade: %+v, want the window's 5 kept and a charge of 20 clamped at 12", outs)
	}
	if ok, count := v4(b, 1); ok || count != 12 {
		t.Errorf("the version 4 function after the upgrade: %v, count %d, want the take refused past the limit, at 12", ok, count)
	}
	if n := b.Retries(pggcra.RetrySchema); n != 0 {
		t.Errorf("%g schema retries: the upgrade should happen at start", n)
	}
}
