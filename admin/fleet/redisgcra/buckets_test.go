package redisgcra_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
)

func newBuckets(t *testing.T, o redisgcra.ClientOptions) (*redisgcra.Buckets, redis.UniversalClient) {
	t.Helper()
	o.Timeout = 2 * time.Second // correctness tests: a loaded CI machine is slow, not down
	c, err := redisgcra.NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return redisgcra.New(c), c
}

func TestScriptIsExactUnderConcurrency(t *testing.T) {
	r := fleettest.StartRedis(t)
	b, _ := newBuckets(t, redisgcra.ClientOptions{Addrs: []string{r.Addr}})
	fleettest.Hammer(t, b.Run, []string{redisgcra.Key("sluice", "global", "k1")}, 12)
}

func TestScriptIsExactOnACluster(t *testing.T) {
	addrs := fleettest.StartCluster(t)
	b, c := newBuckets(t, redisgcra.ClientOptions{Addrs: addrs})
	if _, ok := c.(*redis.ClusterClient); !ok {
		t.Fatalf("UniversalClient for %d addresses is %T, want a cluster client", len(addrs), c)
	}
	// Keys on different shards, hammered together: every pipeline spans
	// the cluster.
	var keys []string
	for i := range 6 {
		keys = append(keys, redisgcra.Key("sluice", "global", fmt.Sprint("id-", i)))
	}
	slots := map[int64]bool{}
	for _, k := range keys {
		slot, err := c.ClusterKeySlot(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots[slot/5462] = true // three masters of 16384/3 slots each
	}
	if len(slots) < 2 {
		t.Fatalf("the test keys all fall on one shard: %v", slots)
	}
	fleettest.Hammer(t, b.Run, keys, 12)
	if err := b.Ping(context.Background()); err != nil {
		t.Errorf("Ping every shard: %v", err)
	}
}

func TestReturnsAreCreditedAndExpiryIsTimeUntilFull(t *testing.T) {
	r := fleettest.StartRedis(t)
	b, c := newBuckets(t, redisgcra.ClientOptions{Addrs: []string{r.Addr}})
	ctx := context.Background()
	// One token per 100 s: nothing refills while the test runs.
	limit := redisgcra.Limit{Rate: 0.01, Burst: 20}
	key := redisgcra.Key("sluice", "slow", "a")
	run := func(n uint64, ret bool) redisgcra.Outcome {
		t.Helper()
		amount := limit.Cost(n)
		if ret {
			amount = limit.Credit(n)
		}
		out, err := b.Run(ctx, []redisgcra.Op{{Key: key, Amount: amount, Tau: limit.Tau(), Return: ret}})
		if err != nil {
			t.Fatal(err)
		}
		return out[0]
	}
	pttlMatches := func(backlog int64) {
		t.Helper()
		pttl, err := c.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		want := time.Duration((backlog+999)/1000) * time.Millisecond
		// The key's TTL is set from the same TIME as backlog; only the
		// test's own progress since then separates them.
		if pttl > want || pttl < want-5*time.Second {
			t.Errorf("PTTL = %v, want the time until full, %v", pttl, want)
		}
	}

	// TAT = Now + Backlog is exact: nothing refills during the test, so
	// the checks compare TATs, which the test's own pace cannot move.
	tat := func(o redisgcra.Outcome) int64 { return o.Now + o.Backlog }
	o := run(15, false)
	if !o.Allowed || o.Backlog > 1500e6 || o.Backlog < 1499e6 {
		t.Fatalf("take 15 of 20: %+v, want allowed with backlog 1500 s", o)
	}
	t0 := tat(o) - 1500e6
	pttlMatches(o.Backlog)
	if o := run(6, false); o.Allowed || tat(o) != t0+1500e6 {
		t.Fatalf("take 6 with 5 left: %+v, want refused and nothing taken", o)
	}
	if o := run(5, false); !o.Allowed || tat(o) != t0+2000e6 || limit.Remaining(o.Backlog) != 0 {
		t.Fatalf("take the last 5: %+v", o)
	}
	// The burst lowered to 10 while 20 are taken: nothing more is granted
	// until the TAT is back within the new tau, but a query still answers.
	lowered := redisgcra.Limit{Rate: limit.Rate, Burst: 10}
	outs, err := b.Run(ctx, []redisgcra.Op{{Key: key, Amount: 0, Tau: lowered.Tau()}, {Key: key, Amount: lowered.Cost(1), Tau: lowered.Tau()}})
	if err != nil {
		t.Fatal(err)
	}
	if !outs[0].Allowed || tat(outs[0]) != t0+2000e6 || outs[1].Allowed || tat(outs[1]) != t0+2000e6 || lowered.Remaining(outs[0].Backlog) != 0 {
		t.Fatalf("after lowering the burst: query %+v, take %+v; want the query OK and the take refused, TAT unchanged", outs[0], outs[1])
	}
	o = run(4, true)
	if !o.Allowed || tat(o) != t0+1600e6 || limit.Remaining(o.Backlog) != 4 {
		t.Fatalf("return 4: %+v, want TAT moved back 400 s", o)
	}
	pttlMatches(o.Backlog)
	if o := run(4, false); !o.Allowed {
		t.Fatalf("take the 4 returned tokens: %+v", o)
	}
	// Returning more than was taken fills the bucket, no more: the key goes.
	if o := run(1000, true); o.Backlog != 0 {
		t.Fatalf("return 1000: %+v, want a full bucket", o)
	}
	if n, _ := c.Exists(ctx, key).Result(); n != 0 {
		t.Fatalf("a full bucket still has its key")
	}
	if o := run(21, false); o.Allowed {
		t.Fatalf("take 21 > burst 20 was allowed: %+v", o)
	}
	if o := run(20, false); !o.Allowed {
		t.Fatalf("take the whole burst from a full bucket: %+v", o)
	}
}

func TestNoScriptFallsBackToEval(t *testing.T) {
	r := fleettest.StartRedis(t)
	b, c := newBuckets(t, redisgcra.ClientOptions{Addrs: []string{r.Addr}})
	ctx := context.Background()
	limit := redisgcra.Limit{Rate: 0.01, Burst: 10}
	ops := []redisgcra.Op{
		{Key: redisgcra.Key("d", "r", "1"), Amount: limit.Cost(1), Tau: limit.Tau()},
		{Key: redisgcra.Key("d", "r", "2"), Amount: limit.Cost(2), Tau: limit.Tau()},
	}
	for round := 1; round <= 3; round++ {
		if err := c.ScriptFlush(ctx).Err(); err != nil { // as after a restart or failover
			t.Fatal(err)
		}
		outs, err := b.Run(ctx, ops)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for i, o := range outs {
			want := int64(round) * limit.Cost(uint64(i+1))
			if !o.Allowed || o.Backlog > want || o.Backlog < want-int64(time.Second/time.Microsecond) {
				t.Fatalf("round %d op %d: %+v, want backlog %d: an op ran twice or not at all", round, i, o, want)
			}
		}
	}
}

func TestGarbageInTheKeyCountsAsAFullBucket(t *testing.T) {
	r := fleettest.StartRedis(t)
	b, c := newBuckets(t, redisgcra.ClientOptions{Addrs: []string{r.Addr}})
	ctx := context.Background()
	key := redisgcra.Key("d", "r", "x")
	c.Set(ctx, key, "not a number", 0)
	limit := redisgcra.Limit{Rate: 1, Burst: 5}
	outs, err := b.Run(ctx, []redisgcra.Op{{Key: key, Amount: limit.Cost(5), Tau: limit.Tau()}})
	if err != nil || !outs[0].Allowed {
		t.Fatalf("take the burst over a garbage value: %+v %v", outs, err)
	}
}

func TestScriptThroughSentinel(t *testing.T) {
	r := fleettest.StartRedis(t)
	sentinel := fleettest.StartSentinel(t, r.Addr, "mymaster")
	b, c := newBuckets(t, redisgcra.ClientOptions{Addrs: []string{sentinel}, MasterName: "mymaster"})
	if _, ok := c.(*redis.Client); !ok {
		t.Fatalf("UniversalClient with a master name is %T, want a failover *redis.Client", c)
	}
	ctx := context.Background()
	limit := redisgcra.Limit{Rate: 0.01, Burst: 3}
	key := redisgcra.Key("sluice", "api", "s")
	for i, want := range []bool{true, true, true, false} {
		outs, err := b.Run(ctx, []redisgcra.Op{{Key: key, Amount: limit.Cost(1), Tau: limit.Tau()}})
		if err != nil {
			t.Fatal(err)
		}
		if outs[0].Allowed != want {
			t.Fatalf("take %d: %+v, want allowed=%v", i+1, outs[0], want)
		}
	}
	// The bucket is on the master the sentinel named.
	direct := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer direct.Close()
	if n, err := direct.Exists(ctx, key).Result(); err != nil || n != 1 {
		t.Errorf("the master has no bucket key: %d %v", n, err)
	}
	if err := b.Ping(ctx); err != nil {
		t.Error(err)
	}
}

// A charge takes its tokens unconditionally, into debt, capped at the
// burst plus the debt, and the key expires when the bucket is full again,
// as after a take.
func TestChargesGoIntoDebtCappedAndNeverBack(t *testing.T) {
	r := fleettest.StartRedis(t)
	b, c := newBuckets(t, redisgcra.ClientOptions{Addrs: []string{r.Addr}})
	key := redisgcra.Key("sluice", "charged", "a")
	fleettest.Charges(t, b.Run, key)
	outs, err := b.Run(context.Background(), []redisgcra.Op{{Key: key, Tau: fleettest.ChargeLimit.Tau()}})
	if err != nil {
		t.Fatal(err)
	}
	pttl, err := c.PTTL(context.Background(), key).Result()
	want := time.Duration((outs[0].Backlog+999)/1000) * time.Millisecond
	if err != nil || pttl > want || pttl < want-5*time.Second {
		t.Errorf("PTTL = %v (%v), want the time until full, %v", pttl, err, want)
	}
	fleettest.ChargesLoseNothing(t, b.Run, redisgcra.Key("sluice", "charged", "hot"), 12, 25)
}

// A block puts a bucket that cannot pay the request below empty, by
// the burst plus the block, and leaves one that can pay or is below empty
// already; the key expires when the bucket is full again, as after a
// take: the block's end plus the burst's refill.
func TestBlocksPutABucketThatCannotPayBelowEmpty(t *testing.T) {
	r := fleettest.StartRedis(t)
	b, c := newBuckets(t, redisgcra.ClientOptions{Addrs: []string{r.Addr}})
	key := redisgcra.Key("sluice", "blocked", "a")
	fleettest.Blocks(t, b.Run, key)
	outs, err := b.Run(context.Background(), []redisgcra.Op{{Key: key, Tau: fleettest.BlockLimit.Tau()}})
	if err != nil {
		t.Fatal(err)
	}
	pttl, err := c.PTTL(context.Background(), key).Result()
	want := time.Duration((outs[0].Backlog+999)/1000) * time.Millisecond
	if err != nil || pttl > want || pttl < want-5*time.Second || want < 2500*time.Second {
		t.Errorf("PTTL = %v (%v), want the time until full, %v (a block's 2600 s)", pttl, err, want)
	}
}

// A block applies to a bucket only, for a positive time, and is neither
// a return nor a charge: anything else is refused before any op runs.
func TestCheckRefusesBlocksOfAnythingButABucket(t *testing.T) {
	for _, op := range []redisgcra.Op{
		{Key: "k", Block: 1, Counter: true},
		{Key: "k", Block: 1, Return: true},
		{Key: "k", Block: 1, Charge: true},
		{Key: "k", Block: -1},
	} {
		if err := redisgcra.Check([]redisgcra.Op{{Key: "ok", Block: 1}, op}); err == nil {
			t.Errorf("Check(%+v): no error", op)
		}
	}
	if err := redisgcra.Check([]redisgcra.Op{{Key: "ok", Block: 1, Amount: 5, Tau: 10}}); err != nil {
		t.Errorf("Check of a bucket's block: %v", err)
	}
}
