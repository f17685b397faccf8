package pggcra

import (
	"context"

	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
)

// forgetSQL deletes one identity's bucket and every window of it: a
// bucket that has no row is full, a window without a row is empty.
const forgetSQL = `WITH b AS (DELETE FROM ` + tableBuckets + ` WHERE key = $1)
DELETE FROM ` + tableWindows + ` WHERE key = ANY($2)`

// Forget deletes the identity's bucket and every row of its windows,
// which are keyed by identity (f.Identities), not by window.
func (b *Buckets) Forget(ctx context.Context, f redisgcra.Forget) error {
	_, err := b.pool.Exec(ctx, forgetSQL, f.Key, f.Identities())
	return classify(ctx, err)
}

// forgetRuleSQL deletes every bucket and window row whose key starts with
// $1 (redisgcra.RulePrefix: every identity under one rule). starts_with,
// not LIKE: a rule name may hold "_", LIKE's one-character wildcard. On
// PostgreSQL 15 and later it reads the key's index (COLLATE "C").
const forgetRuleSQL = `WITH b AS (DELETE FROM ` + tableBuckets + ` WHERE starts_with(key, $1) RETURNING 1),
w AS (DELETE FROM ` + tableWindows + ` WHERE starts_with(key, $1) RETURNING 1)
SELECT (SELECT count(*) FROM b) + (SELECT count(*) FROM w)`

// ForgetRule deletes the bucket and every window row of each identity
// whose key starts with prefix, in one statement, and returns how many
// rows it deleted.
func (b *Buckets) ForgetRule(ctx context.Context, prefix string) (int64, error) {
	var n int64
	err := b.pool.QueryRow(ctx, forgetRuleSQL, prefix).Scan(&n)
	return n, classify(ctx, err)
}
