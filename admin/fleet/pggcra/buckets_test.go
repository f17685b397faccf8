package pggcra_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/fleet/pggcra"
	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
)

func open(t testing.TB, url string) *pggcra.Buckets {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := pggcra.Open(ctx, pggcra.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

func rowCount(t *testing.T, b *pggcra.Buckets) int {
	t.Helper()
	var n int
	if err := b.Pool().QueryRow(context.Background(), `SELECT count(*) FROM sluice_fleet_buckets`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The concurrency tests: 64 callers on one key, each call checked against
// burst + rate x t exactly and for lost tokens (fleettest.Hammer), no call
// failing. The sessions really run at each level (openAt: a pool whose
// settings the admin's Config does not override, as behind a pooler or on
// a database that only offers SERIALIZABLE); at READ COMMITTED no retry
// is needed, at the stricter levels a call that waited for the hot row's
// lock is rolled back and sent again, which the caller never sees.
func TestExactUnderConcurrencyAtEveryIsolationLevel(t *testing.T) {
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{})
	for _, level := range []string{"read committed", "repeatable read", "serializable"} {
		t.Run(strings.ReplaceAll(level, " ", "_"), func(t *testing.T) {
			b := openAt(t, pg.URL, level)
			// The first call creates the schema: not in the hammered time.
			warm := redisgcra.Op{Key: redisgcra.Key("sluice", "warm", level), Tau: redisgcra.Limit{Rate: 1, Burst: 1}.Tau()}
			if _, err := b.Run(context.Background(), []redisgcra.Op{warm}); err != nil {
				t.Fatal(err)
			}
			key := redisgcra.Key("sluice", "hot", level)
			fleettest.Hammer(t, b.Run, []string{key}, 64)
			serial := b.Retries(pggcra.RetrySerialization)
			t.Logf("%s: %g calls sent again after a serialization failure", level, serial)
			if level == "read committed" && serial != 0 {
				t.Errorf("%g serialization retries at READ COMMITTED, where a call only waits for the row's lock", serial)
			}
			for _, r := range []string{pggcra.RetryDeadlock, pggcra.RetryNotSent} {
				if n := b.Retries(r); n != 0 {
					t.Errorf("%g retries for %s", n, r)
				}
			}
		})
	}
}

// The admin's own sessions run at READ COMMITTED whatever the connection
// string asks: exact for its one-statement calls, without the retries of
// the stricter levels.
func TestAdminSessionsRunAtReadCommitted(t *testing.T) {
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{})
	url := pg.URL + "&default_transaction_isolation=serializable"
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var got string
	if err := conn.QueryRow(context.Background(), `SHOW transaction_isolation`).Scan(&got); err != nil || got != "serializable" {
		t.Fatalf("a plain connection runs at %q (%v): the test would not show the override", got, err)
	}
	b := open(t, url)
	if err := b.Pool().QueryRow(context.Background(), `SHOW transaction_isolation`).Scan(&got); err != nil || got != "read committed" {
		t.Errorf("the admin's session runs at %q (%v), want read committed", got, err)
	}
}

// Calls of several buckets in opposite orders lock them in one order:
// no deadlock, no error, every grant accounted for.
func TestMultiBucketCallsDoNotDeadlock(t *testing.T) {
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{})
	b := open(t, pg.URL)
	limit := redisgcra.Limit{Rate: 0.001, Burst: 1e6} // no refill, never empty
	var keys []string
	for i := range 5 {
		keys = append(keys, redisgcra.Key("sluice", "multi", fmt.Sprint(i)))
	}
	const callers, calls = 16, 40
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for g := range callers {
		wg.Go(func() {
			ops := make([]redisgcra.Op, len(keys))
			for i := range keys {
				k := keys[i]
				if g%2 == 1 {
					k = keys[len(keys)-1-i]
				}
				ops[i] = redisgcra.Op{Key: k, Amount: limit.Cost(1), Tau: limit.Tau()}
			}
			for range calls {
				outs, err := b.Run(context.Background(), ops)
				if err != nil {
					errs <- err
					return
				}
				for _, o := range outs {
					if !o.Allowed {
						errs <- fmt.Errorf("refused: %+v", o)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	outs, err := b.Run(context.Background(), []redisgcra.Op{{Key: keys[0], Tau: limit.Tau()}, {Key: keys[4], Tau: limit.Tau()}})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range outs {
		if tokens := float64(o.Backlog) / float64(limit.Cost(1)); tokens < callers*calls-0.01 || tokens > callers*calls {
			t.Errorf("bucket owes %.3f tokens, want the %d granted", tokens, callers*calls)
		}
	}
	if n := b.Retries(pggcra.RetryDeadlock); n != 0 {
		t.Errorf("%g deadlocks retried", n)
	}
}

// The same arithmetic as the Redis script: all or nothing, returns never
// past full, a lowered burst, several ops on one bucket in one call.
func TestTakesAndReturnsAsTheRedisScript(t *testing.T) {
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{})
	b := open(t, pg.URL)
	ctx := context.Background()
	// One token per 100 s: nothing refills while the test runs.
	limit := redisgcra.Limit{Rate: 0.01, Burst: 20}
	key := redisgcra.Key("sluice", "slow", "a")
	op := func(n uint64, ret bool) redisgcra.Op {
		if ret {
			return redisgcra.Op{Key: key, Amount: limit.Credit(n), Tau: limit.Tau(), Return: true}
		}
		return redisgcra.Op{Key: key, Amount: limit.Cost(n), Tau: limit.Tau()}
	}
	run := func(ops ...redisgcra.Op) []redisgcra.Outcome {
		t.Helper()
		outs, err := b.Run(ctx, ops)
		if err != nil {
			t.Fatal(err)
		}
		return outs
	}
	tat := func(o redisgcra.Outcome) int64 { return o.Now + o.Backlog }
	o := run(op(15, false))[0]
	if !o.Allowed || o.Backlog != 1500e6 {
		t.Fatalf("take 15 of 20: %+v, want allowed with backlog 1500 s", o)
	}
	t0 := o.Now
	if o := run(op(6, false))[0]; o.Allowed || tat(o) != t0+1500e6 {
		t.Fatalf("take 6 with 5 left: %+v, want refused and nothing taken", o)
	}
	if o := run(op(5, false))[0]; !o.Allowed || tat(o) != t0+2000e6 || limit.Remaining(o.Backlog) != 0 {
		t.Fatalf("take the last 5: %+v", o)
	}
	lowered := redisgcra.Limit{Rate: limit.Rate, Burst: 10}
	outs := run(redisgcra.Op{Key: key, Amount: 0, Tau: lowered.Tau()}, redisgcra.Op{Key: key, Amount: lowered.Cost(1), Tau: lowered.Tau()})
	if !outs[0].Allowed || tat(outs[0]) != t0+2000e6 || outs[1].Allowed || tat(outs[1]) != t0+2000e6 {
		t.Fatalf("after lowering the burst: query %+v, take %+v; want the query OK and the take refused, TAT unchanged", outs[0], outs[1])
	}
	// Several ops on the bucket in one call apply in order.
	outs = run(op(4, true), op(4, false), op(3, false), op(1000, true), op(21, false), op(20, false))
	want := []struct {
		allowed bool
		tat     int64 // 0: full (TAT = now)
	}{{true, t0 + 1600e6}, {true, t0 + 2000e6}, {false, t0 + 2000e6}, {true, 0}, {false, 0}, {true, 0}}
	for i, w := range want {
		o := outs[i]
		wantTAT := w.tat
		if wantTAT == 0 {
			wantTAT = o.Now
		}
		if i == 5 {
			wantTAT = o.Now + 2000e6
		}
		if o.Allowed != w.allowed || tat(o) != wantTAT {
			t.Errorf("op %d of one call: %+v (TAT %d), want allowed=%v TAT %d", i, o, tat(o), w.allowed, wantTAT)
		}
	}
}

// Charges as gcra.lua's: unconditional, into debt, capped, never moving
// the TAT back, in order within a call; 64 callers charging one hot
// bucket at once lose no update (each waits for the row's lock).
func TestChargesAsTheRedisScript(t *testing.T) {
	b := open(t, fleettest.StartPostgres(t, fleettest.PostgresOptions{}).URL)
	fleettest.Charges(t, b.Run, redisgcra.Key("sluice", "charged", "a"))
	fleettest.ChargesLoseNothing(t, b.Run, redisgcra.Key("sluice", "charged", "hot"), 64, 10)
}

// Clean deletes the rows of full buckets, in batches, and nothing else;
// a deleted bucket answers exactly as one never used.
func TestCleanKeepsOnlyBucketsThatAreNotFull(t *testing.T) {
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{})
	b := open(t, pg.URL)
	ctx := context.Background()
	fast := redisgcra.Limit{Rate: 1000, Burst: 10}  // full again 5 ms after a take of 5
	slow := redisgcra.Limit{Rate: 0.001, Burst: 10} // not for hours
	const idle = 2*pggcra.CleanBatch + 500          // several batches
	var ops []redisgcra.Op
	for i := range idle {
		ops = append(ops, redisgcra.Op{Key: redisgcra.Key("sluice", "fast", fmt.Sprint(i)), Amount: fast.Cost(5), Tau: fast.Tau()})
	}
	busy := redisgcra.Key("sluice", "slow", "busy")
	for start := 0; start < len(ops); start += 250 {
		if _, err := b.Run(ctx, ops[start:min(start+250, len(ops))]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Run(ctx, []redisgcra.Op{{Key: busy, Amount: slow.Cost(5), Tau: slow.Tau()}}); err != nil {
		t.Fatal(err)
	}
	if n := rowCount(t, b); n != idle+1 {
		t.Fatalf("%d rows, want %d", n, idle+1)
	}
	time.Sleep(20 * time.Millisecond)
	n, err := b.Clean(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != idle || rowCount(t, b) != 1 {
		t.Fatalf("cleaned %d, %d rows left; want the %d full buckets gone and the busy one kept", n, rowCount(t, b), idle)
	}
	// Deleted and never used answer alike, for a query and for takes.
	used, never := redisgcra.Key("sluice", "fast", "7"), redisgcra.Key("sluice", "fast", "never")
	for _, amount := range []int64{0, fast.Cost(10), fast.Cost(1)} {
		outs, err := b.Run(ctx, []redisgcra.Op{{Key: used, Amount: amount, Tau: fast.Tau()}, {Key: never, Amount: amount, Tau: fast.Tau()}})
		if err != nil {
			t.Fatal(err)
		}
		if outs[0].Allowed != outs[1].Allowed || outs[0].Backlog != outs[1].Backlog {
			t.Fatalf("take of %d us: the cleaned bucket answers %+v, a new one %+v", amount, outs[0], outs[1])
		}
	}
	outs, err := b.Run(ctx, []redisgcra.Op{{Key: busy, Tau: slow.Tau()}})
	if err != nil || slow.Remaining(outs[0].Backlog) != 5 {
		t.Fatalf("the busy bucket after the cleanup: %+v %v, want 5 tokens left", outs, err)
	}
}

// The schema is created once; a second admin (or a restart) finds it; a
// schema newer than the admin is refused with a message.
func TestSchemaVersions(t *testing.T) {
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{})
	var wg sync.WaitGroup
	for range 3 { // replicas starting together
		wg.Go(func() { open(t, pg.URL) })
	}
	wg.Wait()
	b := open(t, pg.URL)
	var versions []int
	rows, err := b.Pool().Query(context.Background(), `SELECT version FROM sluice_fleet_schema ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	versions, err = pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil || !slices.Equal(versions, []int{1, 2, 3, 4, 5, 6}) {
		t.Fatalf("schema versions %v %v, want [1 2 3 4 5 6]", versions, err)
	}
	// Objects lost (a restore without them, a DROP by hand): created again
	// by the next call, which succeeds.
	if _, err := b.Pool().Exec(context.Background(), `DROP TABLE sluice_fleet_buckets; DROP FUNCTION sluice_fleet_gcra(text[], bigint[], bigint[], boolean[]),
		sluice_fleet_gcra(text[], bigint[], bigint[], boolean[], boolean[]),
		sluice_fleet_gcra(text[], bigint[], bigint[], boolean[], boolean[], bigint[]); DROP TABLE sluice_fleet_windows; DROP FUNCTION `+windowFunctions); err != nil {
		t.Fatal(err)
	}
	limit := redisgcra.Limit{Rate: 1, Burst: 1}
	if _, err := b.Run(context.Background(), []redisgcra.Op{{Key: "k", Amount: limit.Cost(1), Tau: limit.Tau()}, windowOp("A", 0, 1, 5, false)}); err != nil {
		t.Fatalf("a call after the schema was dropped: %v", err)
	}
	if n := b.Retries(pggcra.RetrySchema); n != 1 {
		t.Errorf("%g schema retries, want 1", n)
	}
	if _, err := b.Pool().Exec(context.Background(), `INSERT INTO sluice_fleet_schema (version) VALUES (99)`); err != nil {
		t.Fatal(err)
	}
	_, err = pggcra.Open(context.Background(), pggcra.Options{URL: pg.URL})
	if err == nil || !strings.Contains(err.Error(), "version 99, newer") {
		t.Fatalf("Open with schema version 99: %v", err)
	}
}

// A database of schema version 3 is upgraded by the next admin's start:
// its buckets kept, charges answered, and the bucket function of version
// 3 kept for the admins of that version still running during the
// upgrade, answering on the same buckets.
func TestSchemaUpgradeAddsChargesAndKeepsTheOldBucketFunction(t *testing.T) {
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{})
	old := open(t, pg.URL)
	ctx := context.Background()
	limit := redisgcra.Limit{Rate: 0.001, Burst: 10, MaxDebt: 5}
	key := redisgcra.Key("sluice", "tb", "A")
	if _, err := old.Run(ctx, []redisgcra.Op{{Key: key, Amount: limit.Cost(4), Tau: limit.Tau()}}); err != nil {
		t.Fatal(err)
	}
	// Back to version 3, as an admin of that version left it.
	if _, err := old.Pool().Exec(ctx, `DROP FUNCTION sluice_fleet_gcra(text[], bigint[], bigint[], boolean[], boolean[]),
		sluice_fleet_gcra(text[], bigint[], bigint[], boolean[], boolean[], bigint[]);
		DELETE FROM sluice_fleet_schema WHERE version >= 4`); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Pool().Exec(ctx, pggcra.MigrationSQL(1)); err != nil {
		t.Fatal(err)
	}
	// A call of version 3's admin: one op, no charges.
	v3 := func(b *pggcra.Buckets, amount int64) (allowed bool, backlog int64) {
		t.Helper()
		err := b.Pool().QueryRow(ctx, `SELECT allowed, backlog FROM sluice_fleet_gcra($1, $2, $3, $4)`,
			[]string{key}, []int64{amount}, []int64{limit.Tau()}, []bool{false}).Scan(&allowed, &backlog)
		if err != nil {
			t.Fatal(err)
		}
		return allowed, backlog
	}
	if ok, backlog := v3(old, limit.Cost(1)); !ok || limit.Remaining(backlog) != 5 {
		t.Fatalf("the version 3 function before the upgrade: %v, %d tokens left, want a grant and 5", ok, limit.Remaining(backlog))
	}
	old.Close()
	b := open(t, pg.URL)
	var functions int
	if err := b.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_proc WHERE proname = 'sluice_fleet_gcra'`).Scan(&functions); err != nil || functions != 3 {
		t.Fatalf("%d bucket functions (%v), want the new one, version 3's and version 5's", functions, err)
	}
	outs, err := b.Run(ctx, []redisgcra.Op{{Key: key, Tau: limit.Tau()}, {Key: key, Amount: limit.Cost(20), Tau: limit.ChargeCap(), Charge: true}})
	if err != nil {
		t.Fatal(err)
	}
	if limit.Remaining(outs[0].Backlog) != 5 || !outs[1].Allowed || outs[1].Backlog != limit.ChargeCap() {
		t.Errorf("after the upgrade: %+v, want the bucket's 5 tokens kept and a charge of 20 clamped at 5 in debt", outs)
	}
	if ok, backlog := v3(b, limit.Cost(1)); ok || backlog < limit.ChargeCap()-60e6 {
		t.Errorf("the version 3 function after the upgrade: %v, backlog %d, want the take refused in the debt", ok, backlog)
	}
	if n := b.Retries(pggcra.RetrySchema); n != 0 {
		t.Errorf("%g schema retries: the upgrade should happen at start", n)
	}
}

// Blocks as gcra.lua's: a bucket that cannot pay the request is put
// the burst plus the block below empty, one that can pay or is below
// empty already is left, returns move a block's TAT back, ops of one call
// in order, the backlog clamped.
func TestBlocksAsTheRedisScript(t *testing.T) {
	b := open(t, fleettest.StartPostgres(t, fleettest.PostgresOptions{}).URL)
	fleettest.Blocks(t, b.Run, redisgcra.Key("sluice", "blocked", "a"))
}

// A database of schema version 5 is upgraded by the next admin's start:
// its buckets kept, blocks answered, and the bucket function of versions
// 4 and 5 kept for the admins of those versions still running during the
// upgrade, answering on the same buckets (charges included).
func TestSchemaUpgradeAddsBlocksAndKeepsTheOldBucketFunction(t *testing.T) {
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{})
	old := open(t, pg.URL)
	ctx := context.Background()
	limit := redisgcra.Limit{Rate: 0.001, Burst: 10, MaxDebt: 5, BlockSeconds: 600}
	key := redisgcra.Key("sluice", "tb", "A")
	if _, err := old.Run(ctx, []redisgcra.Op{{Key: key, Amount: limit.Cost(4), Tau: limit.Tau()}}); err != nil {
		t.Fatal(err)
	}
	// Back to version 5, as an admin of that version left it: no
	// six-argument function, the five-argument one in PL/pgSQL.
	if _, err := old.Pool().Exec(ctx, `DROP FUNCTION sluice_fleet_gcra(text[], bigint[], bigint[], boolean[], boolean[], bigint[]);
		DELETE FROM sluice_fleet_schema WHERE version >= 6`); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Pool().Exec(ctx, pggcra.MigrationSQL(4)); err != nil {
		t.Fatal(err)
	}
	// A call of version 5's admin: a take or a charge.
	v5 := func(b *pggcra.Buckets, amount, tau int64, charge bool) (allowed bool, backlog int64) {
		t.Helper()
		err := b.Pool().QueryRow(ctx, `SELECT allowed, backlog FROM sluice_fleet_gcra($1, $2, $3, $4, $5)`,
			[]string{key}, []int64{amount}, []int64{tau}, []bool{false}, []bool{charge}).Scan(&allowed, &backlog)
		if err != nil {
			t.Fatal(err)
		}
		return allowed, backlog
	}
	if ok, backlog := v5(old, limit.Cost(1), limit.Tau(), false); !ok || limit.Remaining(backlog) != 5 {
		t.Fatalf("the version 5 function before the upgrade: %v, %d tokens left, want a grant and 5", ok, limit.Remaining(backlog))
	}
	old.Close()
	b := open(t, pg.URL)
	var functions int
	if err := b.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_proc WHERE proname = 'sluice_fleet_gcra'`).Scan(&functions); err != nil || functions != 3 {
		t.Fatalf("%d bucket functions (%v), want the new one, version 3's and version 5's", functions, err)
	}
	outs, err := b.Run(ctx, []redisgcra.Op{{Key: key, Tau: limit.Tau()}, {Key: key, Amount: limit.Cost(6), Tau: limit.Tau(), Block: limit.Block()}})
	if err != nil {
		t.Fatal(err)
	}
	if limit.Remaining(outs[0].Backlog) != 5 || outs[1].Allowed || outs[1].Backlog != limit.Tau()+limit.Block() {
		t.Errorf("after the upgrade: %+v, want the bucket's 5 tokens kept and an ask of 6 blocking it", outs)
	}
	if ok, backlog := v5(b, limit.Cost(1), limit.Tau(), false); ok || backlog < limit.Tau()+limit.Block()-60e6 {
		t.Errorf("the version 5 function after the upgrade: %v, backlog %d, want the take refused in the block", ok, backlog)
	}
	if ok, backlog := v5(b, limit.Cost(100), limit.ChargeCap(), true); !ok || backlog != limit.ChargeCap() {
		t.Errorf("a charge of the version 5 function after the upgrade: %v, backlog %d, want it clamped at %d", ok, backlog, limit.ChargeCap())
	}
	if n := b.Retries(pggcra.RetrySchema); n != 0 {
		t.Errorf("%g schema retries: the upgrade should happen at start", n)
	}
}

// CleanEvery runs Clean in the background until its context ends.
func TestCleanEveryRunsInTheBackground(t *testing.T) {
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{})
	b := open(t, pg.URL)
	fast := redisgcra.Limit{Rate: 1000, Burst: 10}
	if _, err := b.Run(context.Background(), []redisgcra.Op{{Key: "k", Amount: fast.Cost(1), Tau: fast.Tau()}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	// A pass that runs out of its time budget on a loaded machine is retried
	// by the next one; any other error fails the test.
	report := func(err error) {
		if errors.Is(err, context.DeadlineExceeded) {
			t.Logf("a cleanup pass timed out (retried): %v", err)
			return
		}
		t.Error(err)
	}
	go func() { defer close(done); b.CleanEvery(ctx, 20*time.Millisecond, report) }()
	deadline := time.Now().Add(5 * time.Second)
	for rowCount(t, b) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the full bucket's row is still there")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
}

// A database whose collation orders keys differently from their bytes
// ("a" before "B"): each op still meets its own bucket.
func TestKeysInANonByteCollation(t *testing.T) {
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{})
	admin := open(t, pg.URL)
	if _, err := admin.Pool().Exec(context.Background(),
		`CREATE DATABASE icu TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C'`); err != nil {
		t.Fatal(err)
	}
	b := open(t, strings.Replace(pg.URL, "/postgres?", "/icu?", 1))
	var before bool
	if err := b.Pool().QueryRow(context.Background(), `SELECT 'a' < 'B'`).Scan(&before); err != nil || !before {
		t.Fatalf("the database does not order 'a' before 'B' (%v): the test would not test that", err)
	}
	limit := redisgcra.Limit{Rate: 0.001, Burst: 100}
	keys := []string{"a", "B", "c", "D"}
	var ops []redisgcra.Op
	for i, k := range keys {
		ops = append(ops, redisgcra.Op{Key: k, Amount: limit.Cost(uint64(10 * (i + 1))), Tau: limit.Tau()})
	}
	tats := make([]int64, len(ops)) // nothing refills during the test: TATs are exact
	for round := 1; round <= 2; round++ {
		outs, err := b.Run(context.Background(), ops)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range outs {
			want := o.Now + ops[i].Amount // a full bucket
			if round > 1 {
				want = tats[i] + ops[i].Amount
			}
			if tats[i] = o.Now + o.Backlog; !o.Allowed || tats[i] != want {
				t.Errorf("round %d, bucket %q: %+v, TAT %d, want %d (its own takes only)", round, keys[i], o, tats[i], want)
			}
		}
	}
}
