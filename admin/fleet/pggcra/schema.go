package pggcra

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Table and function names. They live in the connection's search_path
// (public unless the connection string says otherwise).
const (
	tableBuckets   = "sluice_fleet_buckets"
	tableWindows   = "sluice_fleet_windows"
	tableSchema    = "sluice_fleet_schema"
	functionTake   = "sluice_fleet_gcra"
	functionWindow = "sluice_fleet_window"
	schemaVersion  = 6
)

// schemaObjects are the tables and functions the latest schema version
// has: when one is missing, every migration runs again.
var schemaObjects = []struct{ table, function string }{
	{tableBuckets, functionTake + "(text[], bigint[], bigint[], boolean[], boolean[], bigint[])"},
	{tableWindows, functionWindow + "(text[], bigint[], bigint[], bigint[], bigint[], boolean[], smallint[], bigint[], bigint[], bigint[], bigint[], boolean[])"},
}

// migrations[i] brings the schema from version i to i+1. Each runs in one
// transaction with the version's row, and may run again over its own
// result (IF NOT EXISTS, OR REPLACE): a database that lost the objects but
// kept the version row is repaired by running them again.
var migrations = []string{
	// 1: the buckets and the GCRA function.
	`
CREATE TABLE IF NOT EXISTS sluice_fleet_buckets (
	-- The bucket's name (the Redis backend's key for the same domain,
	-- rule and id), compared bytewise.
	key text COLLATE "C" PRIMARY KEY,
	-- Its theoretical arrival time, microseconds since the epoch on the
	-- database's clock: the moment the bucket is full again. A row whose
	-- tat is not after now is a full bucket, the same as no row.
	tat bigint NOT NULL
-- Room for each updated row in its own page (HOT updates: tat has no
-- index, so an update does not touch the primary key's index).
) WITH (fillfactor = 50);

-- One ShouldRateLimit call: the ops, in order, each an all-or-nothing take
-- of amounts[i] microseconds, or a return of them, against a bucket of
-- burst taus[i] microseconds; exactly the arithmetic of the Redis
-- backend's gcra.lua. Every bucket of the call is locked (and created as
-- full where missing) first, in key order so that calls never deadlock,
-- then the clock is read once: no other call can change these buckets
-- until this one commits, and none that commits later reads an earlier
-- clock. Never wrong at any isolation level, but at REPEATABLE READ or
-- SERIALIZABLE a call that waited for another's lock fails with a
-- serialization error (rolled back, and sent again by the admin), so the
-- admin runs its sessions at READ COMMITTED.
CREATE OR REPLACE FUNCTION sluice_fleet_gcra(p_keys text[], p_amounts bigint[], p_taus bigint[], p_returns boolean[])
RETURNS TABLE (allowed boolean, backlog bigint, now_us bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
	v_keys text[];      -- the distinct keys, sorted
	v_tats bigint[];    -- their TATs as the ops change them
	v_dirty boolean[];  -- changed by an op: written back
	v_now bigint;
	v_tat bigint;
	v_new bigint;
	i int;
	j int;
BEGIN
	IF coalesce(cardinality(p_keys), 0) = 0 THEN
		RETURN; -- nothing to do (a connection's warm-up)
	END IF;
	-- Lock every bucket, in key order. The no-op update locks an existing
	-- row; a missing one is inserted full (tat 0). A row deleted by the
	-- cleanup meanwhile is inserted again: it was full.
	IF cardinality(p_keys) = 1 THEN -- the common case, in fewer steps
		v_keys := p_keys;
		INSERT INTO sluice_fleet_buckets AS b (key, tat) VALUES (p_keys[1], 0)
		ON CONFLICT (key) DO UPDATE SET tat = b.tat
		RETURNING ARRAY[b.tat] INTO v_tats;
	ELSE
		-- Bytewise order (COLLATE "C") everywhere, whatever the database's
		-- collation: the keys and their TATs must come in the same order.
		SELECT array_agg(k ORDER BY k COLLATE "C") INTO v_keys
		FROM (SELECT DISTINCT k FROM unnest(p_keys) AS u(k)) AS d;
		WITH locked AS (
			INSERT INTO sluice_fleet_buckets AS b (key, tat)
			SELECT k, 0 FROM unnest(v_keys) AS u(k) ORDER BY k COLLATE "C"
			ON CONFLICT (key) DO UPDATE SET tat = b.tat
			RETURNING b.key, b.tat)
		SELECT array_agg(l.tat ORDER BY l.key COLLATE "C") INTO v_tats FROM locked AS l;
	END IF;

	v_now := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
	v_dirty := array_fill(false, ARRAY[cardinality(v_keys)]);
	now_us := v_now;

	FOR i IN 1 .. cardinality(p_keys) LOOP
		j := array_position(v_keys, p_keys[i]);
		v_tat := greatest(v_tats[j], v_now);
		IF p_returns[i] THEN
			-- A credit moves the TAT back, never before now: the bucket
			-- cannot hold more than its burst.
			v_new := greatest(v_tat - p_amounts[i], v_now);
			v_tats[j] := v_new;
			v_dirty[j] := true;
			allowed := true;
			backlog := v_new - v_now;
		ELSE
			-- All or nothing; asking for none is a query and always OK.
			v_new := v_tat + p_amounts[i];
			IF p_amounts[i] > 0 AND v_new - v_now > p_taus[i] THEN
				allowed := false;
				backlog := v_tat - v_now;
			ELSE
				IF p_amounts[i] > 0 THEN
					v_tats[j] := v_new;
					v_dirty[j] := true;
				END IF;
				allowed := true;
				backlog := v_new - v_now;
			END IF;
		END IF;
		RETURN NEXT;
	END LOOP;

	IF cardinality(v_keys) = 1 THEN
		IF v_dirty[1] THEN
			UPDATE sluice_fleet_buckets SET tat = v_tats[1] WHERE key = v_keys[1];
		END IF;
	ELSE
		UPDATE sluice_fleet_buckets AS b SET tat = u.tat
		FROM unnest(v_keys, v_tats, v_dirty) AS u(key, tat, dirty)
		WHERE u.dirty AND b.key = u.key;
	END IF;
END
$fn$;
`,
	// 2: window counters (global fixed windows and quotas).
	`
CREATE TABLE IF NOT EXISTS sluice_fleet_windows (
	-- The identity's name (the Redis backend's bucket key for the same
	-- domain, rule and id) and the start of one of its windows, unix ms
	-- on the admin's clock. A sliding or rolling window would keep one row
	-- per window or sub-period under the same key, read together.
	key text COLLATE "C" NOT NULL,
	start_ms bigint NOT NULL,
	-- When the row is no longer read, unix ms: the window's end plus a
	-- grace for clocks. Clean deletes the rows past it.
	expires_ms bigint NOT NULL,
	-- Requests leased in the window, 0 to its limit.
	n bigint NOT NULL,
	PRIMARY KEY (key, start_ms)
-- Updates change n only, which no index holds: HOT updates in place.
) WITH (fillfactor = 50);
CREATE INDEX IF NOT EXISTS sluice_fleet_windows_expires ON sluice_fleet_windows (expires_ms);

-- One ShouldRateLimit call's window ops, in the order given (the admin
-- sends them sorted by key and start, so that concurrent calls lock rows
-- in one order and never deadlock). Each op is one statement on one row,
-- exactly the Redis backend's window.lua:
--   take: all or nothing, the row created on the first lease of a
--         window, and never past p_limits[i] (the condition is evaluated
--         on the row locked, at READ COMMITTED on its latest version: no
--         update is lost; at REPEATABLE READ or SERIALIZABLE a concurrent
--         update is a serialization failure, sent again by the admin);
--   return: decrements the window's row, never below 0 and never
--         creating it (a window cleaned away takes no returns);
--   a take of 0 is a query.
-- Returns each op's outcome: allowed, the window's count after it, and
-- the database's clock in microseconds.
CREATE OR REPLACE FUNCTION sluice_fleet_window(p_keys text[], p_starts bigint[], p_expires bigint[],
	p_amounts bigint[], p_limits bigint[], p_returns boolean[])
RETURNS TABLE (allowed boolean, counted bigint, now_us bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
	v_n bigint;
	i int;
BEGIN
	IF coalesce(cardinality(p_keys), 0) = 0 THEN
		RETURN; -- nothing to do (a connection's warm-up)
	END IF;
	now_us := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
	FOR i IN 1 .. cardinality(p_keys) LOOP
		v_n := NULL;
		allowed := true;
		IF p_returns[i] THEN
			UPDATE sluice_fleet_windows AS w SET n = greatest(w.n - p_amounts[i], 0)
			WHERE w.key = p_keys[i] AND w.start_ms = p_starts[i]
			RETURNING w.n INTO v_n;
		ELSIF p_amounts[i] > 0 THEN
			INSERT INTO sluice_fleet_windows AS w (key, start_ms, expires_ms, n)
			SELECT p_keys[i], p_starts[i], p_expires[i], p_amounts[i] WHERE p_amounts[i] <= p_limits[i]
			ON CONFLICT (key, start_ms) DO UPDATE SET n = w.n + excluded.n
			WHERE w.n + excluded.n <= p_limits[i]
			RETURNING w.n INTO v_n;
			IF v_n IS NULL THEN
				-- Refused: the count as it stands (its row, if any, is
				-- locked by the INSERT above until the call ends).
				allowed := false;
				SELECT w.n INTO v_n FROM sluice_fleet_windows AS w
				WHERE w.key = p_keys[i] AND w.start_ms = p_starts[i];
			END IF;
		ELSE
			SELECT w.n INTO v_n FROM sluice_fleet_windows AS w
			WHERE w.key = p_keys[i] AND w.start_ms = p_starts[i];
		END IF;
		counted := coalesce(v_n, 0);
		RETURN NEXT;
	END LOOP;
END
$fn$;
`,
	// 3: sliding and rolling windows, in the window function (new
	// arguments: the old signature is dropped).
	`
DROP FUNCTION IF EXISTS sluice_fleet_window(text[], bigint[], bigint[], bigint[], bigint[], boolean[]);

-- One ShouldRateLimit call's window ops, in the order given (the admin
-- sends them sorted by identity and start, so that concurrent calls lock
-- rows in one order and never deadlock). p_kinds[i] is the op's window:
--   0, a fixed window or quota (the Redis backend's window.lua): one row,
--      (p_keys[i], p_starts[i]);
--   1, a sliding window's take (sliding.lua): the current window's row
--      (p_keys[i], p_starts[i]) and the previous one's, starting
--      p_lengths[i] earlier, estimated as prev * (1 - f) + cur with
--      f = (p_nows[i] - p_starts[i]) / p_lengths[i] on the admin's clock;
--      its returns are kind 0, to the window leased in;
--   2, a rolling window (rolling.lua): one row per sub-period,
--      (p_keys[i], sub-period start p_starts[i]), summed over the rows
--      starting at p_oldests[i] or later, one sub-period capped at
--      p_caps[i] (0: no cap).
-- Each op is one upsert of one row, its condition evaluated on the row
-- locked (at READ COMMITTED on its latest version):
--   take: all or nothing, the row created on the first lease of a
--         (sub-)window with expires_ms p_expires[i], and never past
--         p_limits[i] (nor the cap);
--   return: decrements its own (sub-)window's row, never below 0 and
--         never creating it (a window cleaned away, or a sub-period that
--         left the window, takes no returns);
--   a take of 0 is a query.
-- Why a sliding or rolling take is exact with the other rows read
-- unlocked: the row of the current (sub-)window is locked by the upsert,
-- whose condition is evaluated on its latest version; the other rows read
-- (the previous window, the older sub-periods) are past windows, which
-- take no leases and only ever decrease (returns): a stale read can only
-- refuse, never grant too much. Admins whose clocks disagree across a
-- boundary break that (one leasing in a sub-period another already sums
-- as past), so at READ COMMITTED every take of an identity's sliding or
-- rolling window first takes a transaction-scoped advisory lock of the
-- identity: they run one after the other, each statement after the lock
-- reading what the previous holder committed. At REPEATABLE READ or
-- SERIALIZABLE the snapshot predates any wait, so the lock is not taken
-- (it would only queue the calls that then fail): a concurrent update of
-- the row, or (SERIALIZABLE) a read of a row another call wrote, fails
-- with a serialization error that the admin sends again.
-- Returns each op's outcome: allowed, its use after it (the window's
-- count; for sliding and rolling windows the limit minus the whole
-- requests that still fit, as the Redis scripts answer) and the
-- database's clock in microseconds.
CREATE OR REPLACE FUNCTION sluice_fleet_window(p_keys text[], p_starts bigint[], p_expires bigint[],
	p_amounts bigint[], p_limits bigint[], p_returns boolean[],
	p_kinds smallint[], p_nows bigint[], p_lengths bigint[], p_oldests bigint[], p_caps bigint[])
RETURNS TABLE (allowed boolean, counted bigint, now_us bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
	v_n bigint;
	v_base float8;  -- sliding: prev * (1 - f); rolling: the other sub-periods' sum
	v_cap bigint;   -- rolling: the sub-period's cap, or the limit
	v_f float8;
	v_fits float8;
	v_lock boolean := current_setting('transaction_isolation') = 'read committed';
	i int;
BEGIN
	IF coalesce(cardinality(p_keys), 0) = 0 THEN
		RETURN; -- nothing to do (a connection's warm-up)
	END IF;
	now_us := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
	FOR i IN 1 .. cardinality(p_keys) LOOP
		v_n := NULL;
		allowed := true;
		IF v_lock AND p_kinds[i] <> 0 AND p_amounts[i] > 0 AND NOT p_returns[i] THEN
			-- A take of a sliding or rolling window: one at a time per
			-- identity (see above). A 64-bit hash: two identities that
			-- share a lock wait for each other, and calls taking locks of
			-- other identities in between could deadlock (40P01, sent
			-- again), once in 2^64.
			PERFORM pg_advisory_xact_lock(hashtextextended(p_keys[i], 1936487523));
		END IF;

		IF p_kinds[i] = 1 THEN
			-- Sliding: the previous window's count, weighted.
			SELECT w.n INTO v_n FROM sluice_fleet_windows AS w
			WHERE w.key = p_keys[i] AND w.start_ms = p_starts[i] - p_lengths[i];
			v_f := (p_nows[i] - p_starts[i])::float8 / greatest(p_lengths[i], 1)::float8;
			v_f := least(greatest(v_f, 0), 1);
			v_base := coalesce(v_n, 0)::float8 * (1 - v_f);
			v_n := NULL;
			v_cap := p_limits[i];
			IF p_amounts[i] > 0 THEN
				-- The epsilon absorbs float rounding of prev * (1 - f) only.
				INSERT INTO sluice_fleet_windows AS w (key, start_ms, expires_ms, n)
				SELECT p_keys[i], p_starts[i], p_expires[i], p_amounts[i]
				WHERE v_base + p_amounts[i] <= p_limits[i] + 1e-9
				ON CONFLICT (key, start_ms) DO UPDATE SET n = w.n + excluded.n
				WHERE v_base + w.n + excluded.n <= p_limits[i] + 1e-9
				RETURNING w.n INTO v_n;
			END IF;
		ELSIF p_kinds[i] = 2 THEN
			-- Rolling: the other sub-periods still in the window.
			SELECT coalesce(sum(w.n) FILTER (WHERE w.start_ms <> p_starts[i]), 0)
			INTO v_base FROM sluice_fleet_windows AS w
			WHERE w.key = p_keys[i] AND w.start_ms >= p_oldests[i];
			v_cap := CASE WHEN p_caps[i] > 0 THEN least(p_caps[i], p_limits[i]) ELSE p_limits[i] END;
			IF p_returns[i] THEN
				UPDATE sluice_fleet_windows AS w SET n = greatest(w.n - p_amounts[i], 0)
				WHERE w.key = p_keys[i] AND w.start_ms = p_starts[i] AND w.start_ms >= p_oldests[i]
				RETURNING w.n INTO v_n;
			ELSIF p_amounts[i] > 0 THEN
				INSERT INTO sluice_fleet_windows AS w (key, start_ms, expires_ms, n)
				SELECT p_keys[i], p_starts[i], p_expires[i], p_amounts[i]
				WHERE v_base + p_amounts[i] <= p_limits[i] AND (p_caps[i] <= 0 OR p_amounts[i] <= p_caps[i])
				ON CONFLICT (key, start_ms) DO UPDATE SET n = w.n + excluded.n
				WHERE v_base + w.n + excluded.n <= p_limits[i] AND (p_caps[i] <= 0 OR w.n + excluded.n <= p_caps[i])
				RETURNING w.n INTO v_n;
			END IF;
		ELSIF p_returns[i] THEN
			UPDATE sluice_fleet_windows AS w SET n = greatest(w.n - p_amounts[i], 0)
			WHERE w.key = p_keys[i] AND w.start_ms = p_starts[i]
			RETURNING w.n INTO v_n;
		ELSIF p_amounts[i] > 0 THEN
			INSERT INTO sluice_fleet_windows AS w (key, start_ms, expires_ms, n)
			SELECT p_keys[i], p_starts[i], p_expires[i], p_amounts[i] WHERE p_amounts[i] <= p_limits[i]
			ON CONFLICT (key, start_ms) DO UPDATE SET n = w.n + excluded.n
			WHERE w.n + excluded.n <= p_limits[i]
			RETURNING w.n INTO v_n;
		END IF;

		IF v_n IS NULL THEN
			-- A refused take (its row, if any, is locked by the INSERT
			-- above until the call ends), a query, or a return that found
			-- no row: the count as it stands.
			allowed := p_returns[i] OR p_amounts[i] <= 0;
			SELECT w.n INTO v_n FROM sluice_fleet_windows AS w
			WHERE w.key = p_keys[i] AND w.start_ms = p_starts[i]
				AND (p_kinds[i] <> 2 OR w.start_ms >= p_oldests[i]);
			v_n := coalesce(v_n, 0);
		END IF;
		IF p_kinds[i] = 0 THEN
			counted := v_n;
		ELSE
			-- The limit minus the whole requests that still fit.
			v_fits := least(p_limits[i] - (v_base + v_n), v_cap - v_n);
			v_fits := greatest(floor(v_fits + 1e-9), 0);
			counted := p_limits[i] - v_fits::bigint;
		END IF;
		RETURN NEXT;
	END LOOP;
END
$fn$;
`,
	// 4: charges (a cost read from the response, on a global token
	// bucket): a bucket function with p_charges, and the function of
	// versions 1 to 3 kept, on top of it, for the admins of those versions
	// still running while the replicas are upgraded one by one.
	`
-- One ShouldRateLimit call's bucket ops, as sluice_fleet_gcra of schema
-- version 1 (the locks, the clock, the all-or-nothing takes and the
-- returns are the same), with a third kind of op: p_charges[i] takes
-- p_amounts[i] unconditionally, into debt, exactly as gcra.lua's
-- "charge": the TAT moves by the amount, to a backlog of at most
-- p_taus[i] (for a charge, tau plus the debt allowed), and never back (a
-- TAT already past the cap stays). A charge is always allowed; charged
-- is what it added to the TAT (0 for the other ops).
CREATE OR REPLACE FUNCTION sluice_fleet_gcra(p_keys text[], p_amounts bigint[], p_taus bigint[],
	p_returns boolean[], p_charges boolean[])
RETURNS TABLE (allowed boolean, backlog bigint, now_us bigint, charged bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
	v_keys text[];      -- the distinct keys, sorted
	v_tats bigint[];    -- their TATs as the ops change them
	v_dirty boolean[];  -- changed by an op: written back
	v_now bigint;
	v_tat bigint;
	v_new bigint;
	i int;
	j int;
BEGIN
	IF coalesce(cardinality(p_keys), 0) = 0 THEN
		RETURN; -- nothing to do (a connection's warm-up)
	END IF;
	-- Lock every bucket, in key order (see version 1).
	IF cardinality(p_keys) = 1 THEN
		v_keys := p_keys;
		INSERT INTO sluice_fleet_buckets AS b (key, tat) VALUES (p_keys[1], 0)
		ON CONFLICT (key) DO UPDATE SET tat = b.tat
		RETURNING ARRAY[b.tat] INTO v_tats;
	ELSE
		SELECT array_agg(k ORDER BY k COLLATE "C") INTO v_keys
		FROM (SELECT DISTINCT k FROM unnest(p_keys) AS u(k)) AS d;
		WITH locked AS (
			INSERT INTO sluice_fleet_buckets AS b (key, tat)
			SELECT k, 0 FROM unnest(v_keys) AS u(k) ORDER BY k COLLATE "C"
			ON CONFLICT (key) DO UPDATE SET tat = b.tat
			RETURNING b.key, b.tat)
		SELECT array_agg(l.tat ORDER BY l.key COLLATE "C") INTO v_tats FROM locked AS l;
	END IF;

	v_now := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
	v_dirty := array_fill(false, ARRAY[cardinality(v_keys)]);
	now_us := v_now;

	FOR i IN 1 .. cardinality(p_keys) LOOP
		j := array_position(v_keys, p_keys[i]);
		v_tat := greatest(v_tats[j], v_now);
		allowed := true;
		charged := 0;
		IF p_returns[i] THEN
			-- A credit moves the TAT back, never before now.
			v_new := greatest(v_tat - p_amounts[i], v_now);
		ELSIF coalesce(p_charges[i], false) THEN
			-- Unconditional, into debt, capped, never moving back.
			v_new := greatest(least(v_tat + p_amounts[i], v_now + p_taus[i]), v_tat);
			charged := v_new - v_tat;
		ELSE
			-- All or nothing; asking for none is a query and always OK.
			v_new := v_tat + p_amounts[i];
			IF p_amounts[i] > 0 AND v_new - v_now > p_taus[i] THEN
				allowed := false;
				v_new := v_tat;
			END IF;
		END IF;
		IF v_new <> v_tat OR p_returns[i] THEN
			v_tats[j] := v_new;
			v_dirty[j] := true;
		END IF;
		backlog := v_new - v_now;
		RETURN NEXT;
	END LOOP;

	IF cardinality(v_keys) = 1 THEN
		IF v_dirty[1] THEN
			UPDATE sluice_fleet_buckets SET tat = v_tats[1] WHERE key = v_keys[1];
		END IF;
	ELSE
		UPDATE sluice_fleet_buckets AS b SET tat = u.tat
		FROM unnest(v_keys, v_tats, v_dirty) AS u(key, tat, dirty)
		WHERE u.dirty AND b.key = u.key;
	END IF;
END
$fn$;

-- The bucket function of versions 1 to 3 (no charges), for admins of
-- those versions during an upgrade: the function above, without charges.
CREATE OR REPLACE FUNCTION sluice_fleet_gcra(p_keys text[], p_amounts bigint[], p_taus bigint[], p_returns boolean[])
RETURNS TABLE (allowed boolean, backlog bigint, now_us bigint)
LANGUAGE sql AS $fn$
	SELECT g.allowed, g.backlog, g.now_us
	FROM sluice_fleet_gcra(p_keys, p_amounts, p_taus, p_returns,
		array_fill(false, ARRAY[coalesce(cardinality(p_keys), 0)])) AS g
$fn$;
`,
	// 5: charges of fixed windows and quotas (a cost read from the
	// response, on a global quota): a window function with p_charges, and
	// the function of versions 3 and 4 kept, on top of it, for the admins
	// of those versions still running while the replicas are upgraded.
	`
-- One ShouldRateLimit call's window ops, as sluice_fleet_window of schema
-- version 3 (the kinds, the order, the locks, the takes, the returns and
-- the queries are the same), with a fourth kind of op: p_charges[i], a
-- fixed window's or quota's charge (kind 0 only), counts p_amounts[i] in
-- its window unconditionally, exactly as window.lua's "charge": the count
-- grows by the amount to at most p_limits[i] (for a charge, the limit plus
-- the debt allowed), and never goes back (a count already past the cap
-- stays). The row is created as by a take, and locked before it is read
-- (an upsert that changes nothing when the row exists), so that no
-- concurrent charge or take is lost. A charge is always allowed; charged
-- is what it added to the count (0 for the other ops).
CREATE OR REPLACE FUNCTION sluice_fleet_window(p_keys text[], p_starts bigint[], p_expires bigint[],
	p_amounts bigint[], p_limits bigint[], p_returns boolean[],
	p_kinds smallint[], p_nows bigint[], p_lengths bigint[], p_oldests bigint[], p_caps bigint[],
	p_charges boolean[])
RETURNS TABLE (allowed boolean, counted bigint, now_us bigint, charged bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
	v_n bigint;
	v_old bigint;   -- a charge: the count before it
	v_base float8;  -- sliding: prev * (1 - f); rolling: the other sub-periods' sum
	v_cap bigint;   -- rolling: the sub-period's cap, or the limit
	v_f float8;
	v_fits float8;
	v_charge boolean;
	v_lock boolean := current_setting('transaction_isolation') = 'read committed';
	i int;
BEGIN
	IF coalesce(cardinality(p_keys), 0) = 0 THEN
		RETURN; -- nothing to do (a connection's warm-up)
	END IF;
	now_us := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
	FOR i IN 1 .. cardinality(p_keys) LOOP
		v_n := NULL;
		allowed := true;
		charged := 0;
		v_charge := coalesce(p_charges[i], false);
		IF v_charge AND (p_kinds[i] <> 0 OR p_returns[i]) THEN
			RAISE EXCEPTION 'sluice_fleet_window: op %: a charge applies to a fixed window or a quota, and is not a return', i;
		END IF;
		IF v_lock AND p_kinds[i] <> 0 AND p_amounts[i] > 0 AND NOT p_returns[i] THEN
			-- A take of a sliding or rolling window: one at a time per
			-- identity (see version 3).
			PERFORM pg_advisory_xact_lock(hashtextextended(p_keys[i], 1936487523));
		END IF;

		IF p_kinds[i] = 1 THEN
			-- Sliding: the previous window's count, weighted.
			SELECT w.n INTO v_n FROM sluice_fleet_windows AS w
			WHERE w.key = p_keys[i] AND w.start_ms = p_starts[i] - p_lengths[i];
			v_f := (p_nows[i] - p_starts[i])::float8 / greatest(p_lengths[i], 1)::float8;
			v_f := least(greatest(v_f, 0), 1);
			v_base := coalesce(v_n, 0)::float8 * (1 - v_f);
			v_n := NULL;
			v_cap := p_limits[i];
			IF p_amounts[i] > 0 THEN
				-- The epsilon absorbs float rounding of prev * (1 - f) only.
				INSERT INTO sluice_fleet_windows AS w (key, start_ms, expires_ms, n)
				SELECT p_keys[i], p_starts[i], p_expires[i], p_amounts[i]
				WHERE v_base + p_amounts[i] <= p_limits[i] + 1e-9
				ON CONFLICT (key, start_ms) DO UPDATE SET n = w.n + excluded.n
				WHERE v_base + w.n + excluded.n <= p_limits[i] + 1e-9
				RETURNING w.n INTO v_n;
			END IF;
		ELSIF p_kinds[i] = 2 THEN
			-- Rolling: the other sub-periods still in the window.
			SELECT coalesce(sum(w.n) FILTER (WHERE w.start_ms <> p_starts[i]), 0)
			INTO v_base FROM sluice_fleet_windows AS w
			WHERE w.key = p_keys[i] AND w.start_ms >= p_oldests[i];
			v_cap := CASE WHEN p_caps[i] > 0 THEN least(p_caps[i], p_limits[i]) ELSE p_limits[i] END;
			IF p_returns[i] THEN
				UPDATE sluice_fleet_windows AS w SET n = greatest(w.n - p_amounts[i], 0)
				WHERE w.key = p_keys[i] AND w.start_ms = p_starts[i] AND w.start_ms >= p_oldests[i]
				RETURNING w.n INTO v_n;
			ELSIF p_amounts[i] > 0 THEN
				INSERT INTO sluice_fleet_windows AS w (key, start_ms, expires_ms, n)
				SELECT p_keys[i], p_starts[i], p_expires[i], p_amounts[i]
				WHERE v_base + p_amounts[i] <= p_limits[i] AND (p_caps[i] <= 0 OR p_amounts[i] <= p_caps[i])
				ON CONFLICT (key, start_ms) DO UPDATE SET n = w.n + excluded.n
				WHERE v_base + w.n + excluded.n <= p_limits[i] AND (p_caps[i] <= 0 OR w.n + excluded.n <= p_caps[i])
				RETURNING w.n INTO v_n;
			END IF;
		ELSIF p_returns[i] THEN
			UPDATE sluice_fleet_windows AS w SET n = greatest(w.n - p_amounts[i], 0)
			WHERE w.key = p_keys[i] AND w.start_ms = p_starts[i]
			RETURNING w.n INTO v_n;
		ELSIF v_charge AND p_amounts[i] > 0 THEN
			-- Unconditional, up to the cap, never back. The row is locked
			-- (created empty if missing) and read, then written once.
			INSERT INTO sluice_fleet_windows AS w (key, start_ms, expires_ms, n)
			VALUES (p_keys[i], p_starts[i], p_expires[i], 0)
			ON CONFLICT (key, start_ms) DO UPDATE SET n = w.n
			RETURNING w.n INTO v_old;
			v_n := greatest(v_old, least(v_old + p_amounts[i], p_limits[i]));
			IF v_n <> v_old THEN
				UPDATE sluice_fleet_windows AS w SET n = v_n
				WHERE w.key = p_keys[i] AND w.start_ms = p_starts[i];
			END IF;
			charged := v_n - v_old;
		ELSIF p_amounts[i] > 0 THEN
			INSERT INTO sluice_fleet_windows AS w (key, start_ms, expires_ms, n)
			SELECT p_keys[i], p_starts[i], p_expires[i], p_amounts[i] WHERE p_amounts[i] <= p_limits[i]
			ON CONFLICT (key, start_ms) DO UPDATE SET n = w.n + excluded.n
			WHERE w.n + excluded.n <= p_limits[i]
			RETURNING w.n INTO v_n;
		END IF;

		IF v_n IS NULL THEN
			-- A refused take (its row, if any, is locked by the INSERT
			-- above until the call ends), a query, or a return that found
			-- no row: the count as it stands.
			allowed := p_returns[i] OR p_amounts[i] <= 0;
			SELECT w.n INTO v_n FROM sluice_fleet_windows AS w
			WHERE w.key = p_keys[i] AND w.start_ms = p_starts[i]
				AND (p_kinds[i] <> 2 OR w.start_ms >= p_oldests[i]);
			v_n := coalesce(v_n, 0);
		END IF;
		IF p_kinds[i] = 0 THEN
			counted := v_n;
		ELSE
			-- The limit minus the whole requests that still fit.
			v_fits := least(p_limits[i] - (v_base + v_n), v_cap - v_n);
			v_fits := greatest(floor(v_fits + 1e-9), 0);
			counted := p_limits[i] - v_fits::bigint;
		END IF;
		RETURN NEXT;
	END LOOP;
END
$fn$;

-- The window function of versions 3 and 4 (no charges), for admins of
-- those versions during an upgrade: the function above, without charges.
CREATE OR REPLACE FUNCTION sluice_fleet_window(p_keys text[], p_starts bigint[], p_expires bigint[],
	p_amounts bigint[], p_limits bigint[], p_returns boolean[],
	p_kinds smallint[], p_nows bigint[], p_lengths bigint[], p_oldests bigint[], p_caps bigint[])
RETURNS TABLE (allowed boolean, counted bigint, now_us bigint)
LANGUAGE sql AS $fn$
	SELECT w.allowed, w.counted, w.now_us
	FROM sluice_fleet_window(p_keys, p_starts, p_expires, p_amounts, p_limits, p_returns,
		p_kinds, p_nows, p_lengths, p_oldests, p_caps,
		array_fill(false, ARRAY[coalesce(cardinality(p_keys), 0)])) AS w
$fn$;
`,
	// 6: blocks (a global token bucket's block_seconds): a bucket function
	// with p_blocks, and the function of versions 4 and 5 kept, on top of
	// it, for the admins of those versions still running while the
	// replicas are upgraded (the function of versions 1 to 3 runs that one).
	`
-- One ShouldRateLimit call's bucket ops, as sluice_fleet_gcra of schema
-- version 4 (the locks, the clock, the takes, the returns and the
-- charges are the same), with a fourth kind of op: p_blocks[i] > 0 (0 or
-- NULL for the other ops) blocks the bucket for p_blocks[i] microseconds
-- after a refused ask of p_amounts[i], exactly as gcra.lua's "block": a
-- bucket below empty (TAT - now > p_taus[i]: in debt, or blocked
-- already) or that can pay the ask now (TAT + p_amounts[i] - now <=
-- p_taus[i]) is left as it is; any other gets TAT = now + p_taus[i] +
-- p_blocks[i] (the backlog at most 2^52). allowed is false when, and only
-- when, the op put the block in place.
CREATE OR REPLACE FUNCTION sluice_fleet_gcra(p_keys text[], p_amounts bigint[], p_taus bigint[],
	p_returns boolean[], p_charges boolean[], p_blocks bigint[])
RETURNS TABLE (allowed boolean, backlog bigint, now_us bigint, charged bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
	v_keys text[];      -- the distinct keys, sorted
	v_tats bigint[];    -- their TATs as the ops change them
	v_dirty boolean[];  -- changed by an op: written back
	v_now bigint;
	v_tat bigint;
	v_new bigint;
	i int;
	j int;
BEGIN
	IF coalesce(cardinality(p_keys), 0) = 0 THEN
		RETURN; -- nothing to do (a connection's warm-up)
	END IF;
	-- Lock every bucket, in key order (see version 1).
	IF cardinality(p_keys) = 1 THEN
		v_keys := p_keys;
		INSERT INTO sluice_fleet_buckets AS b (key, tat) VALUES (p_keys[1], 0)
		ON CONFLICT (key) DO UPDATE SET tat = b.tat
		RETURNING ARRAY[b.tat] INTO v_tats;
	ELSE
		SELECT array_agg(k ORDER BY k COLLATE "C") INTO v_keys
		FROM (SELECT DISTINCT k FROM unnest(p_keys) AS u(k)) AS d;
		WITH locked AS (
			INSERT INTO sluice_fleet_buckets AS b (key, tat)
			SELECT k, 0 FROM unnest(v_keys) AS u(k) ORDER BY k COLLATE "C"
			ON CONFLICT (key) DO UPDATE SET tat = b.tat
			RETURNING b.key, b.tat)
		SELECT array_agg(l.tat ORDER BY l.key COLLATE "C") INTO v_tats FROM locked AS l;
	END IF;

	v_now := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
	v_dirty := array_fill(false, ARRAY[cardinality(v_keys)]);
	now_us := v_now;

	FOR i IN 1 .. cardinality(p_keys) LOOP
		j := array_position(v_keys, p_keys[i]);
		v_tat := greatest(v_tats[j], v_now);
		allowed := true;
		charged := 0;
		IF p_returns[i] THEN
			-- A credit moves the TAT back, never before now.
			v_new := greatest(v_tat - p_amounts[i], v_now);
		ELSIF coalesce(p_charges[i], false) THEN
			-- Unconditional, into debt, capped, never moving back.
			v_new := greatest(least(v_tat + p_amounts[i], v_now + p_taus[i]), v_tat);
			charged := v_new - v_tat;
		ELSIF coalesce(p_blocks[i], 0) > 0 THEN
			-- Below empty already (never lengthened), or able to pay:
			-- unchanged. Else blocked.
			v_new := v_tat;
			IF v_tat - v_now <= p_taus[i] AND v_tat + p_amounts[i] - v_now > p_taus[i] THEN
				v_new := v_now + least(p_taus[i] + p_blocks[i], 4503599627370496);
				allowed := false;
			END IF;
		ELSE
			-- All or nothing; asking for none is a query and always OK.
			v_new := v_tat + p_amounts[i];
			IF p_amounts[i] > 0 AND v_new - v_now > p_taus[i] THEN
				allowed := false;
				v_new := v_tat;
			END IF;
		END IF;
		IF v_new <> v_tat OR p_returns[i] THEN
			v_tats[j] := v_new;
			v_dirty[j] := true;
		END IF;
		backlog := v_new - v_now;
		RETURN NEXT;
	END LOOP;

	IF cardinality(v_keys) = 1 THEN
		IF v_dirty[1] THEN
			UPDATE sluice_fleet_buckets SET tat = v_tats[1] WHERE key = v_keys[1];
		END IF;
	ELSE
		UPDATE sluice_fleet_buckets AS b SET tat = u.tat
		FROM unnest(v_keys, v_tats, v_dirty) AS u(key, tat, dirty)
		WHERE u.dirty AND b.key = u.key;
	END IF;
END
$fn$;

-- The bucket function of versions 4 and 5 (no blocks), for admins of
-- those versions during an upgrade: the function above, without blocks.
-- The four-argument function of versions 1 to 3 calls this one.
CREATE OR REPLACE FUNCTION sluice_fleet_gcra(p_keys text[], p_amounts bigint[], p_taus bigint[],
	p_returns boolean[], p_charges boolean[])
RETURNS TABLE (allowed boolean, backlog bigint, now_us bigint, charged bigint)
LANGUAGE sql AS $fn$
	SELECT g.allowed, g.backlog, g.now_us, g.charged
	FROM sluice_fleet_gcra(p_keys, p_amounts, p_taus, p_returns, p_charges,
		array_fill(0::bigint, ARRAY[coalesce(cardinality(p_keys), 0)])) AS g
$fn$;
`,
}

// migrate creates or upgrades the schema. Replicas starting together take
// turns: a transaction-scoped advisory lock serializes them.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	// The schema must survive a crash, whatever the sessions' default.
	if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = on`); err != nil {
		return err
	}
	// The lock's key: an arbitrary constant of this schema ("sluice" in ASCII).
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(126970359818597)`); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+tableSchema+` (
		version int PRIMARY KEY,
		applied timestamptz NOT NULL DEFAULT now())`); err != nil {
		return err
	}
	var have int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+tableSchema).Scan(&have); err != nil {
		return err
	}
	if have > schemaVersion {
		return fmt.Errorf("the database's fleet schema is version %d, newer than this admin's %d: run the newer admin", have, schemaVersion)
	}
	for _, o := range schemaObjects {
		var complete bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL AND to_regprocedure($2) IS NOT NULL`,
			o.table, o.function).Scan(&complete); err != nil {
			return err
		}
		if !complete {
			have = 0
		}
	}
	for v := have; v < schemaVersion; v++ {
		if _, err := tx.Exec(ctx, migrations[v]); err != nil {
			return fmt.Errorf("schema version %d: %w", v+1, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+tableSchema+` (version) VALUES ($1) ON CONFLICT DO NOTHING`, v+1); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}
