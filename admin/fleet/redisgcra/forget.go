package redisgcra

import "context"

// Forget names what a backend keeps of one identity under one rule, for a
// reset: the bucket's Key, and the keys of its windows that may still be
// read (RollingKey, the current and previous WindowKey). A backend that
// keys windows by the bucket's Key (PostgreSQL) forgets every window of
// that Key.
type Forget struct {
	Key        string
	WindowKeys []string
}

// Identities are the identity keys a backend that keys windows by
// identity (Op.Identity) keeps: the bucket's Key, which its fixed and
// sliding windows share, and its rolling window's.
func (f Forget) Identities() []string { return []string{f.Key, f.Key + rollingSuffix} }

// Forget deletes the identity's bucket and window keys in one command: they
// share the bucket's hash tag, so a Cluster keeps them on one shard.
func (b *Buckets) Forget(ctx context.Context, f Forget) error {
	return b.c.Del(ctx, append([]string{f.Key}, f.WindowKeys...)...).Err()
}
