package redisgcra_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
)

// A sliding window's take reads two keys in one script, which a Redis
// Cluster allows only within one slot: the window keys of an identity share
// its hash tag. Batches over identities on several shards: sliding takes
// against a previous window of 4 halfway through the window, and rolling
// takes against a cap per sub-period, answer as on one server.
func TestSlidingAndRollingWindowsRunOnACluster(t *testing.T) {
	addrs := fleettest.StartCluster(t)
	b, c := newBuckets(t, redisgcra.ClientOptions{Addrs: addrs})
	ctx := context.Background()
	start := time.Now().Truncate(time.Hour).Add(time.Hour) // a future window: nothing expires
	prevStart, end := start.Add(-time.Hour), start.Add(2*time.Hour)
	var prevs, takes, rolls []redisgcra.Op
	for i := range 6 {
		id := fmt.Sprint("id-", i)
		cur, prev := redisgcra.WindowKey("sluice", "s", id, start.UnixMilli()), redisgcra.WindowKey("sluice", "s", id, prevStart.UnixMilli())
		prevs = append(prevs, redisgcra.Op{Key: prev, Counter: true, Amount: 4, Limit: 10, ExpireAtMS: end.UnixMilli()})
		takes = append(takes, redisgcra.Op{Key: cur, PrevKey: prev, Counter: true, Amount: 4, Limit: 10, ExpireAtMS: end.UnixMilli(),
			NowMS: start.Add(30 * time.Minute).UnixMilli(), StartMS: start.UnixMilli(), LengthMS: time.Hour.Milliseconds()})
		rolls = append(rolls, redisgcra.Op{Key: redisgcra.RollingKey("sluice", "r", id), Counter: true, Rolling: true, Amount: 4,
			Limit: 10, MaxPerPeriod: 6, FieldMS: start.UnixMilli(), OldestMS: prevStart.UnixMilli(), ExpireAtMS: end.UnixMilli()})
	}
	run := func(ops []redisgcra.Op) []redisgcra.Outcome {
		t.Helper()
		out, err := b.Run(ctx, ops)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	shards := map[int64]bool{}
	for _, op := range takes {
		slot, err := c.ClusterKeySlot(ctx, op.Key).Result()
		if err != nil {
			t.Fatal(err)
		}
		shards[slot/5462] = true // three masters of 16384/3 slots each
	}
	if len(shards) < 2 {
		t.Fatalf("the identities all fall on one shard: %v", shards)
	}
	run(prevs)
	// Estimate 4 × 0.5 = 2: a take of 4 fits (6), a second one does too
	// (10), a third does not.
	for round, want := range []struct {
		allowed bool
		used    int64
	}{{true, 6}, {true, 10}, {false, 10}} {
		for i, o := range run(takes) {
			if o.Allowed != want.allowed || o.Count != want.used {
				t.Fatalf("sliding take %d of identity %d: allowed %v used %d, want %v %d", round+1, i, o.Allowed, o.Count, want.allowed, want.used)
			}
		}
	}
	// 4 of the sub-period's cap of 6: 2 left; a second take of 4 is refused.
	for round, want := range []struct {
		allowed bool
		used    int64
	}{{true, 8}, {false, 8}} {
		for i, o := range run(rolls) {
			if o.Allowed != want.allowed || o.Count != want.used {
				t.Fatalf("rolling take %d of identity %d: allowed %v used %d, want %v %d", round+1, i, o.Allowed, o.Count, want.allowed, want.used)
			}
		}
	}
}

// Two admins whose clocks straddle a sub-period's start share a rolling
// window of 10 in four sub-periods. The one ahead leases in the new
// sub-period, and its window no longer holds the oldest one's 8; the one
// behind, still in the sub-period before, has those 8 in its window and
// can lease only 2 more. The take of the admin ahead must not delete that
// field from under it.
func TestRollingWindowStillCountsForAnAdminWhoseClockIsBehind(t *testing.T) {
	b, _ := newBuckets(t, redisgcra.ClientOptions{Addrs: []string{fleettest.StartRedis(t).Addr}})
	ctx := context.Background()
	const second = 1000
	base := time.Now().Truncate(time.Minute).UnixMilli()
	key := redisgcra.RollingKey("sluice", "r", "skew")
	take := func(amount, field int64) redisgcra.Outcome {
		t.Helper()
		out, err := b.Run(ctx, []redisgcra.Op{{Key: key, Counter: true, Rolling: true, Amount: amount, Limit: 10,
			FieldMS: field, OldestMS: field - 3*second, ExpireAtMS: base + 3_600_000}})
		if err != nil {
			t.Fatal(err)
		}
		return out[0]
	}
	if o := take(8, base); !o.Allowed {
		t.Fatalf("the first sub-period's 8: %+v", o)
	}
	if o := take(1, base+4*second); !o.Allowed || o.Count != 1 {
		t.Fatalf("the admin ahead, its window past the first sub-period: %+v, want 1 leased of 10", o)
	}
	if o := take(2, base+3*second); o.Allowed || o.Count != 9 {
		t.Errorf("the admin behind, its window holding the first sub-period's 8 and the 1: %+v, want refused with 9 of 10 used", o)
	}
	if o := take(1, base+3*second); !o.Allowed || o.Count != 10 {
		t.Errorf("the admin behind takes the last one: %+v", o)
	}
}

// A fixed window's or quota's charge counts unconditionally, past the
// limit up to its cap, and creates the counter as a take does, expiring at
// the window's end; concurrent charges and takes lose no update. A charge
// of a sliding or rolling window runs nothing.
func TestWindowChargesCountPastTheLimitUpToTheCap(t *testing.T) {
	b, c := newBuckets(t, redisgcra.ClientOptions{Addrs: []string{fleettest.StartRedis(t).Addr}})
	ctx := context.Background()
	start := time.Now().Truncate(time.Hour).UnixMilli()
	expire := start + 2*3_600_000
	fleettest.WindowCharges(t, b.Run, "a", start, expire)
	key := redisgcra.WindowKey("sluice", "charged-window", "a", start)
	for _, k := range []string{key, redisgcra.WindowKey("sluice", "charged-window", "a", start+1)} {
		at, err := c.PExpireTime(ctx, k).Result()
		if err != nil || at.Milliseconds() != expire {
			t.Errorf("%s expires at %v (%v), want the window's end %d ms", k, at, err, expire)
		}
	}
	fleettest.WindowChargesLoseNothing(t, b.Run, "hot", start, expire, 12, 25)

	sliding := fleettest.WindowOp("s", start, expire, 1, 10)
	sliding.Charge, sliding.PrevKey, sliding.LengthMS, sliding.NowMS = true, redisgcra.WindowKey("sluice", "charged-window", "s", start-1000), 1000, start
	rolling := redisgcra.Op{Key: redisgcra.RollingKey("sluice", "r", "a"), Counter: true, Rolling: true, Charge: true, Amount: 1, Limit: 10,
		FieldMS: start, OldestMS: start, ExpireAtMS: expire}
	for _, op := range []redisgcra.Op{sliding, rolling} {
		if _, err := b.Run(ctx, []redisgcra.Op{fleettest.WindowOp("x", start, expire, 1, 10), op}); err == nil {
			t.Errorf("a charge of %s: no error", op.Key)
		}
	}
	if n, err := c.Exists(ctx, redisgcra.WindowKey("sluice", "charged-window", "x", start), sliding.Key, rolling.Key).Result(); err != nil || n != 0 {
		t.Errorf("%d keys (%v) after calls refused, want none", n, err)
	}
}
