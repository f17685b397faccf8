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
