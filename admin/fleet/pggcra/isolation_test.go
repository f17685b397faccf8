package pggcra_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/fleet/pggcra"
	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
)

// A session found at a stricter level than READ COMMITTED (a pooler lost
// the admin's setting) fails a call that waited for a row's lock with
// 40001. The call is sent again once, in an explicit READ COMMITTED
// transaction, where a second wait cannot fail it: one retry per call,
// however hot the key. A trigger records the level each committed update
// of the bucket ran at; the failed attempt's record is rolled back with it.
func TestCallThatLostARaceIsSentAgainAtReadCommitted(t *testing.T) {
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{})
	const app = "sluice-under-test"
	for _, level := range []string{"repeatable read", "serializable"} {
		t.Run(level, func(t *testing.T) {
			b := openAt(t, pg.URL+"&application_name="+app, level)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			limit := redisgcra.Limit{Rate: 1, Burst: 100}
			key := redisgcra.Key("sluice", "raced", level)
			take := redisgcra.Op{Key: key, Amount: limit.Cost(1), Tau: limit.Tau()}
			// With a window op the call is a batch of both functions.
			ops := []redisgcra.Op{take, windowOp(level, 0, 1, 10, false)}
			if _, err := b.Run(ctx, ops); err != nil { // the schema and the row
				t.Fatal(err)
			}

			other, err := pgx.Connect(ctx, pg.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close(context.Background())
			for _, q := range []string{
				`CREATE TABLE IF NOT EXISTS levels_seen (app text, level text)`,
				`TRUNCATE levels_seen`,
				`CREATE OR REPLACE FUNCTION record_level() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN
					INSERT INTO levels_seen VALUES (current_setting('application_name'), current_setting('transaction_isolation'));
					RETURN NEW;
				END $$`,
				`CREATE OR REPLACE TRIGGER record_level BEFORE UPDATE ON sluice_fleet_buckets
				FOR EACH ROW EXECUTE FUNCTION record_level()`,
			} {
				if _, err := other.Exec(ctx, q); err != nil {
					t.Fatal(err)
				}
			}

			// Another session updates the row and holds its lock.
			tx, err := other.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background())
			if _, err := tx.Exec(ctx, `UPDATE sluice_fleet_buckets SET tat = tat WHERE key = $1`, key); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := b.Run(ctx, ops)
				done <- err
			}()
			waitForLockWait(t, ctx, other, app)
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("the call failed: %v", err)
			}

			if n := b.Retries(pggcra.RetrySerialization); n != 1 {
				t.Errorf("%g serialization retries, want 1", n)
			}
			rows, err := other.Query(ctx, `SELECT level FROM levels_seen WHERE app = $1`, app)
			if err != nil {
				t.Fatal(err)
			}
			levels, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			// The lock's no-op update and the new TAT's: one transaction.
			if len(levels) == 0 || slices.ContainsFunc(levels, func(l string) bool { return l != "read committed" }) {
				t.Errorf("the call's committed updates ran at %q, want read committed", levels)
			}
		})
	}
}

// waitForLockWait returns once a session of application app waits for a
// lock.
func waitForLockWait(t *testing.T, ctx context.Context, conn *pgx.Conn, app string) {
	t.Helper()
	for {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the call never waited for the row's lock")
		case <-time.After(5 * time.Millisecond):
		}
	}
}
