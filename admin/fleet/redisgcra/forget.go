package redisgcra

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

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

// forgetRuleBatch is the SCAN COUNT hint of ForgetRule, and so about the
// most keys one round trip deletes.
const forgetRuleBatch = 1000

// ForgetRule deletes every key that starts with prefix (RulePrefix: every
// identity's bucket and windows under one rule) and returns how many it
// deleted. It SCANs the keyspace, on each master of a Cluster, matching
// the prefix, and UNLINKs what it finds: the whole keyspace is read, so
// give ctx minutes rather than milliseconds on a large Redis. Keys
// written while it runs may survive it; a key deleted is never written
// back by it. Each UNLINK names one key: in a Cluster the identities of
// one rule are on every slot, and keys of different slots cannot share a
// command, even on one node; the UNLINKs of one SCAN batch go in one
// pipeline to the node that holds them.
func (b *Buckets) ForgetRule(ctx context.Context, prefix string) (int64, error) {
	match := escapeGlob(prefix) + "*"
	if cc, ok := b.c.(*redis.ClusterClient); ok {
		var n atomic.Int64
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			deleted, err := scanUnlink(ctx, c, match)
			n.Add(deleted)
			return err
		})
		return n.Load(), err
	}
	return scanUnlink(ctx, b.c, match)
}

// scanUnlink deletes the keys of one server that match the pattern.
func scanUnlink(ctx context.Context, c redis.Cmdable, match string) (int64, error) {
	var n int64
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, match, forgetRuleBatch).Result()
		if err != nil {
			return n, fmt.Errorf("scanning for the rule's keys: %w", err)
		}
		if len(keys) > 0 {
			cmds := make([]*redis.IntCmd, len(keys))
			_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i, k := range keys {
					cmds[i] = p.Unlink(ctx, k)
				}
				return nil
			})
			if err != nil {
				return n, fmt.Errorf("deleting the rule's keys: %w", err)
			}
			for _, cmd := range cmds {
				n += cmd.Val()
			}
		}
		if next == 0 {
			return n, nil
		}
		cursor = next
	}
}

// escapeGlob makes s match itself alone in a Redis glob pattern (SCAN
// MATCH): a backslash before each of * ? [ ] \ (a domain may hold them;
// ^ and - mean something only inside brackets).
func escapeGlob(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
