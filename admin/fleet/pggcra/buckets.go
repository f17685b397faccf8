// Package pggcra keeps the fleet-wide buckets of Sluice's global rules in
// PostgreSQL: the same GCRA as package redisgcra (the same ops, arithmetic
// and outcomes), run by one SQL function call per ShouldRateLimit call.
//
// The bucket is one row (key, tat): tat is its theoretical arrival time in
// microseconds on the database's clock (clock_timestamp()). A call locks
// its rows in key order, reads the clock, applies its ops in order and
// writes the changed TATs back, in one statement: no update is ever lost,
// and concurrent calls on a key queue on its row lock instead of failing.
// Rows of full buckets are deleted off the request path by Clean.
//
// Global fixed, sliding and rolling windows and quotas are counters, one
// row per identity and window or sub-period (windows.go), with the
// semantics of the Redis backend's window.lua, sliding.lua and
// rolling.lua: all-or-nothing leases up to the limit, returns that only
// decrement their own (sub-)window's row, rows deleted by Clean once no
// window reads them.
package pggcra

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"

	"github.com/sluice-rl/sluice/admin/pgfiles"
)

// Options configure Open.
type Options struct {
	// URL is the connection string (postgres://user@host:port/db?...,
	// or key=value pairs), as libpq and pgx read it; pool_max_conns sets
	// the pool's size. The password may be in it, in PGPASSWORD or in
	// ~/.pgpass.
	URL string
}

// connectTimeout bounds the dials the pool makes by itself (keeping its
// size) when the connection string sets no connect_timeout; a call's
// dial is bounded by the call's context.
const connectTimeout = 5 * time.Second

// Retry reasons, the values of sluice_fleet_postgres_retries_total's label.
const (
	RetrySerialization = "serialization_failure" // SQLSTATE 40001
	RetryDeadlock      = "deadlock"              // SQLSTATE 40P01
	RetryNotSent       = "not_sent"              // the connection failed before the call was sent
	RetrySchema        = "schema"                // the table or function was missing: created again
)

// maxAttempts bounds the tries of one call. The function cannot fail with
// 40001 or 40P01 at READ COMMITTED, which the admin's sessions use; the
// retries are for a session whose level was changed behind its back (a
// pooler between the admin and the database). There a call that waited
// for a hot row's lock fails once with 40001, and is sent again in an
// explicit READ COMMITTED transaction, where it waits instead of failing:
// one retry. The bound matters only on a database that does not honour
// READ COMMITTED, and the call's budget (its context) ends the retries
// first.
const maxAttempts = 16

// maxBackoff bounds the random pause before a retry after a serialization
// failure or a deadlock.
const maxBackoff = 8 * time.Millisecond

// Buckets runs bucket operations on PostgreSQL.
type Buckets struct {
	pool    *pgxpool.Pool
	retries *prometheus.CounterVec
	cleaned prometheus.Counter
}

// Open connects, creates or upgrades the schema (the database must answer)
// and opens the pool's connections. Later, a connection that fails is
// dropped and dialled again: a database that comes back is used again
// without a new Open.
func Open(ctx context.Context, o Options) (*Buckets, error) {
	cfg, err := Config(o)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	b := newBuckets(pool)
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("creating the schema: %w", err)
	}
	// The connections made before the schema existed are not warmed up:
	// make them again, and wait for them.
	pool.Reset()
	warm(ctx, pool)
	return b, nil
}

// Config returns the pool configuration of o: o.URL, with the session
// settings every call depends on.
func Config(o Options) (*pgxpool.Config, error) {
	if strings.TrimSpace(o.URL) == "" {
		return nil, errors.New("empty connection string")
	}
	cfg, err := pgxpool.ParseConfig(o.URL)
	if err != nil {
		return nil, err // pgx's message never shows the password
	}
	if !strings.Contains(o.URL, "pool_max_conns") {
		// Calls are short and mostly wait on the network: more than one
		// connection per CPU keeps the server busy.
		cfg.MaxConns = int32(max(8, 4*runtime.NumCPU()))
	}
	if !strings.Contains(o.URL, "pool_min_conns") {
		// Connected ahead of the calls, which would otherwise pay for a
		// new connection (a server process, authentication, the first
		// statement) within their budget.
		cfg.MinConns = cfg.MaxConns
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = connectTimeout
	}
	rp := cfg.ConnConfig.RuntimeParams
	if _, ok := rp["application_name"]; !ok {
		rp["application_name"] = "sluice-admin"
	}
	// A bucket update is not worth a disk flush per call: a crash of the
	// database loses at most the last fraction of a second of updates
	// (buckets come back fuller), like a Redis failover. The connection
	// string's synchronous_commit=on restores durable commits.
	if _, ok := rp["synchronous_commit"]; !ok {
		rp["synchronous_commit"] = "off"
	}
	// Certificates and the password file are read again for each new
	// connection: rotated on disk, they are used without a restart.
	cfg.BeforeConnect = pgfiles.BeforeConnect(func() (*pgx.ConnConfig, error) {
		fresh, err := pgxpool.ParseConfig(o.URL)
		if err != nil {
			return nil, err
		}
		return fresh.ConnConfig, nil
	})
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		// Every call is one statement that locks its rows: READ COMMITTED
		// is exact for it, and the stricter levels would only turn waits
		// on a hot key's lock into serialization failures. This overrides
		// default_transaction_isolation from the connection string, the
		// role or the database.
		if _, err := c.Exec(ctx, `SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED`); err != nil {
			return err
		}
		return warmUp(ctx, c)
	}
	return cfg, nil
}

// warmUp prepares the calls, compiles the functions and plans their
// statements in the session of c now, not in a call's budget: a query (0
// tokens) of a bucket and of a window no real one is named, rolled back. Before the schema
// exists, not yet.
func warmUp(ctx context.Context, c *pgx.Conn) error {
	tx, err := c.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	zero := []int64{0}
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{callSQL, []any{[]string{""}, zero, zero, []bool{false}, []bool{false}, zero}},
		{windowSQL, windowWarmUp()},
	} {
		rows, err := tx.Query(ctx, q.sql, q.args...)
		if err == nil {
			rows.Close()
			err = rows.Err()
		}
		if retryReason(err) == RetrySchema {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return tx.Rollback(ctx)
}

// warm opens the pool's MinConns connections at once (AfterConnect warms
// each up). A failure is left to the calls to meet and report.
func warm(ctx context.Context, pool *pgxpool.Pool) {
	n := int(pool.Config().MinConns)
	conns := make(chan *pgxpool.Conn, n)
	for range n {
		go func() {
			c, _ := pool.Acquire(ctx)
			conns <- c
		}()
	}
	for range n {
		if c := <-conns; c != nil {
			defer c.Release()
		}
	}
}

func newBuckets(pool *pgxpool.Pool) *Buckets {
	b := &Buckets{pool: pool,
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_fleet_postgres_retries_total",
			Help: "Bucket calls sent to PostgreSQL again, by reason: serialization_failure (40001), deadlock (40P01), not_sent (the connection failed before the call left), schema (the table or function was missing and was created again). The callers never see these.",
		}, []string{"reason"}),
		cleaned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_fleet_postgres_cleaned_total",
			Help: "Rows of full buckets and of ended windows deleted by the periodic cleanup.",
		}),
	}
	for _, r := range []string{RetrySerialization, RetryDeadlock, RetryNotSent, RetrySchema} {
		b.retries.WithLabelValues(r)
	}
	return b
}

// Close closes the pool.
func (b *Buckets) Close() { b.pool.Close() }

// Pool is the connection pool (for tests and tools).
func (b *Buckets) Pool() *pgxpool.Pool { return b.pool }

// Register adds the backend's metrics to reg.
func (b *Buckets) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{b.retries, b.cleaned} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Retries returns the retries so far by reason (for tests).
func (b *Buckets) Retries(reason string) float64 {
	var m dto.Metric
	if err := b.retries.WithLabelValues(reason).Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

const callSQL = `SELECT allowed, backlog, now_us, charged FROM ` + functionTake + `($1, $2, $3, $4, $5, $6)`

// Run applies ops in one round trip, in redisgcra.Order, and returns their
// outcomes in the call's order.
// Bucket ops and window counter ops (Op.Counter) go to their own function;
// a call with both sends the two in one batch, one implicit transaction.
// On an error no outcome is returned; the call may have been applied (a
// timeout, a connection lost after the call was sent): tokens taken and
// unused, an under-admission, never an over-admission. A call is sent
// again only when it certainly did not run: a serialization failure or a
// deadlock (rolled back), or a connection that failed before sending.
func (b *Buckets) Run(ctx context.Context, ops []redisgcra.Op) ([]redisgcra.Outcome, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	if err := redisgcra.Check(ops); err != nil {
		return nil, err
	}
	c := newCall(ops)
	readCommitted := false
	for attempt := 1; ; attempt++ {
		out, err := c.send(ctx, b.pool, readCommitted)
		if err == nil {
			return out, nil
		}
		reason := retryReason(err)
		if reason == "" || attempt >= maxAttempts || ctx.Err() != nil {
			return nil, classify(ctx, err)
		}
		b.retries.WithLabelValues(reason).Inc()
		switch {
		case reason == RetrySchema:
			// A database restored without them, or dropped by hand.
			if err := migrate(ctx, b.pool); err != nil {
				return nil, classify(ctx, err)
			}
		case reason == RetrySerialization && !readCommitted:
			// The session runs at a stricter level than the one set
			// on connecting, and the call met a concurrent update.
			// At READ COMMITTED it waits for the row's lock instead:
			// no pause, and no second failure to race for.
			readCommitted = true
		case reason == RetrySerialization, reason == RetryDeadlock:
			// Callers that lost a race on one row would otherwise meet
			// again at once: a random pause, doubling, at most maxBackoff.
			pause := time.NewTimer(rand.N(min(time.Millisecond<<attempt, maxBackoff)))
			select {
			case <-ctx.Done():
				pause.Stop()
				return nil, classify(ctx, err)
			case <-pause.C:
			}
		}
	}
}

// call is a Run's ops as the two functions take them.
type call struct {
	n       int
	buckets bucketArgs
	windows windowArgs
}

type bucketArgs struct {
	at      []int // the op's index in the call
	keys    []string
	amounts []int64
	taus    []int64
	rets    []bool
	charges []bool
	blocks  []int64
}

// args are the bucket function's arguments.
func (a *bucketArgs) args() []any {
	return []any{a.keys, a.amounts, a.taus, a.rets, a.charges, a.blocks}
}

func newCall(ops []redisgcra.Op) call {
	c := call{n: len(ops)}
	for i, op := range ops {
		if op.Counter {
			continue
		}
		a := &c.buckets
		a.at = append(a.at, i)
		a.keys, a.amounts, a.taus = append(a.keys, op.Key), append(a.amounts, op.Amount), append(a.taus, op.Tau)
		a.rets, a.charges, a.blocks = append(a.rets, op.Return), append(a.charges, op.Charge), append(a.blocks, op.Block)
	}
	c.windows = newWindowArgs(ops)
	return c
}

// send makes one attempt of c: one round trip. With readCommitted it runs
// in an explicit READ COMMITTED transaction, whatever the session's level
// (or a pooler's): BEGIN and COMMIT go in the same batch, so the rows'
// locks are still released without waiting for the client. A failure
// there leaves the session in the failed transaction, and the pool closes
// that connection on release: a cost paid on retries only.
func (c call) send(ctx context.Context, pool *pgxpool.Pool, readCommitted bool) ([]redisgcra.Outcome, error) {
	out := make([]redisgcra.Outcome, c.n)
	bk, wn := &c.buckets, &c.windows
	switch {
	case readCommitted:
	case len(wn.at) == 0:
		rows, err := pool.Query(ctx, callSQL, bk.args()...)
		return out, bk.read(rows, err, out)
	case len(bk.at) == 0:
		rows, err := pool.Query(ctx, windowSQL, wn.args()...)
		return out, wn.read(rows, err, out)
	}
	batch := &pgx.Batch{}
	if readCommitted {
		batch.Queue(`BEGIN ISOLATION LEVEL READ COMMITTED`)
	}
	if len(bk.at) > 0 {
		batch.Queue(callSQL, bk.args()...)
	}
	if len(wn.at) > 0 {
		batch.Queue(windowSQL, wn.args()...)
	}
	if readCommitted {
		batch.Queue(`COMMIT`)
	}
	br := pool.SendBatch(ctx, batch)
	var err error
	if readCommitted {
		_, err = br.Exec()
	}
	if err == nil && len(bk.at) > 0 {
		rows, qerr := br.Query()
		err = bk.read(rows, qerr, out)
	}
	if err == nil && len(wn.at) > 0 {
		rows, qerr := br.Query()
		err = wn.read(rows, qerr, out)
	}
	if err == nil && readCommitted {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return out, err
}

// read scans the bucket function's rows into out.
func (a *bucketArgs) read(rows pgx.Rows, err error, out []redisgcra.Outcome) error {
	return readRows(rows, err, functionTake, a.at, func(o *redisgcra.Outcome) []any {
		return []any{&o.Allowed, &o.Backlog, &o.Now, &o.Charged}
	}, out)
}

// readRows scans one function's rows: the k-th into out[at[k]].
func readRows(rows pgx.Rows, err error, function string, at []int, dest func(*redisgcra.Outcome) []any, out []redisgcra.Outcome) error {
	if err != nil {
		return err
	}
	defer rows.Close()
	k := 0
	for rows.Next() {
		if k >= len(at) {
			k++
			continue
		}
		if err := rows.Scan(dest(&out[at[k]])...); err != nil {
			return err
		}
		k++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if k != len(at) {
		return fmt.Errorf("%s answered %d rows for %d ops", function, k, len(at))
	}
	return nil
}

func retryReason(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "40001":
			return RetrySerialization
		case "40P01":
			return RetryDeadlock
		case "42883", "42P01": // undefined function, undefined table
			return RetrySchema
		}
		return ""
	}
	if pgconn.SafeToRetry(err) {
		return RetryNotSent
	}
	return ""
}

// classify makes a timeout recognizable (errors.Is DeadlineExceeded): the
// RLS counts timeouts and errors apart.
func classify(ctx context.Context, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if pgconn.Timeout(err) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return err
}

// Ping checks that the database answers.
func (b *Buckets) Ping(ctx context.Context) error { return classify(ctx, b.pool.Ping(ctx)) }

// CleanBatch is the most rows one cleanup statement deletes.
const CleanBatch = 1000

// cleanSQL deletes up to $1 idle rows of one table: full buckets (tat not
// after now) or windows past their expiry, on the database's clock.
func cleanSQL(table, idle string) string {
	return `DELETE FROM ` + table + ` WHERE ctid = ANY (ARRAY(
	SELECT ctid FROM ` + table + `
	WHERE ` + idle + `
	LIMIT $1
	FOR UPDATE SKIP LOCKED))`
}

var cleanSQLs = []string{
	cleanSQL(tableBuckets, `tat <= (SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint)`),
	cleanSQL(tableWindows, `expires_ms < (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint)`),
}

// Clean deletes the rows of full buckets (tat not after now) and of
// windows past their expiry (their end and a grace), in statements of at
// most CleanBatch rows (short transactions, short locks), until a
// statement finds fewer. A deleted bucket is a full one, as a missing one
// is; a deleted window is never counted in again. Rows locked by a call
// are skipped, left for the next time. It returns the rows deleted.
func (b *Buckets) Clean(ctx context.Context) (int64, error) {
	var total int64
	for _, q := range cleanSQLs {
		for {
			tag, err := b.pool.Exec(ctx, q, CleanBatch)
			if err != nil {
				return total, err
			}
			n := tag.RowsAffected()
			total += n
			b.cleaned.Add(float64(n))
			if n < CleanBatch {
				break
			}
		}
	}
	return total, nil
}

// CleanEvery runs Clean every interval until ctx ends, logging failures
// through logf (a database that is down is reported by the RLS itself).
func (b *Buckets) CleanEvery(ctx context.Context, every time.Duration, logf func(err error)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, every)
		_, err := b.Clean(cctx)
		cancel()
		if err != nil && ctx.Err() == nil && logf != nil {
			logf(err)
		}
	}
}

// Name describes the database for people: host, port and database, never
// the password.
func Name(cfg *pgxpool.Config) string {
	c := cfg.ConnConfig
	host := c.Host
	if strings.HasPrefix(host, "/") {
		return fmt.Sprintf("postgres %s (socket %s) as %s", c.Database, host, c.User)
	}
	return fmt.Sprintf("postgres %s:%d/%s as %s", host, c.Port, c.Database, c.User)
}
