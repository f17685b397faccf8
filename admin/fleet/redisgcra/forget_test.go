package redisgcra_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
)

// forgetRuleDomain has every glob special: unescaped, the pattern would
// also match lookalikeDomain's keys ("*" any run, "?" one character,
// "[x]" the x, "\:" the colon).
const (
	forgetRuleDomain = `d*?[x]\`
	lookalikeDomain  = `dabcdex`
)

// checkForgetRule writes the bucket, window and rolling keys of many
// identities under one rule, and keys ForgetRule must leave: a rule whose
// name starts with the rule's, the rule in another domain (one the
// pattern would match if the domain's glob characters were not escaped),
// a shorter domain, and a key that is not Sluice's. ForgetRule deletes
// exactly the rule's keys. written, if not nil, is called once the keys
// are written.
func checkForgetRule(t *testing.T, b *redisgcra.Buckets, c redis.UniversalClient, written func()) {
	t.Helper()
	ctx := context.Background()
	before := dbSize(t, c)
	var doomed, kept []string
	for i := range 1500 { // several SCAN batches
		id := fmt.Sprint("id-", i)
		doomed = append(doomed, redisgcra.Key(forgetRuleDomain, "g", id),
			redisgcra.WindowKey(forgetRuleDomain, "g", id, 1700000000000), redisgcra.RollingKey(forgetRuleDomain, "g", id))
	}
	for i := range 20 {
		id := fmt.Sprint("id-", i)
		kept = append(kept, redisgcra.Key(forgetRuleDomain, "g2", id), redisgcra.Key(lookalikeDomain, "g", id),
			redisgcra.Key("d", "g", id), redisgcra.RollingKey(forgetRuleDomain, "G", id))
	}
	kept = append(kept, "not-sluice:{1.g:}")
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range append(append([]string{}, doomed...), kept...) {
			p.Set(ctx, k, "1", 0)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if written != nil {
		written()
	}
	n, err := b.ForgetRule(ctx, redisgcra.RulePrefix(forgetRuleDomain, "g"))
	if err != nil || n != int64(len(doomed)) {
		t.Fatalf("ForgetRule = %d, %v; want the rule's %d keys deleted", n, err, len(doomed))
	}
	for _, k := range kept {
		if got, err := c.Exists(ctx, k).Result(); err != nil || got != 1 {
			t.Errorf("%q: exists %d, %v; want it kept", k, got, err)
		}
	}
	if left := dbSize(t, c); left != before+int64(len(kept)) {
		t.Errorf("%d keys left, want the %d there before and the %d kept", left, before, len(kept))
	}
	if n, err := b.ForgetRule(ctx, redisgcra.RulePrefix(forgetRuleDomain, "g")); err != nil || n != 0 {
		t.Errorf("a second ForgetRule = %d, %v; want nothing left to delete", n, err)
	}
}

// dbSize is the number of keys, summed over a Cluster's masters.
func dbSize(t *testing.T, c redis.UniversalClient) int64 {
	t.Helper()
	ctx := context.Background()
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		n, err := c.DBSize(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	var total int64
	for _, n := range masterSizes(t, cc) {
		total += n
	}
	return total
}

// masterSizes are the numbers of keys of a Cluster's masters.
func masterSizes(t *testing.T, cc *redis.ClusterClient) []int64 {
	t.Helper()
	var mu sync.Mutex // ForEachMaster calls concurrently
	var sizes []int64
	err := cc.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
		n, err := m.DBSize(ctx).Result()
		mu.Lock()
		defer mu.Unlock()
		sizes = append(sizes, n)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return sizes
}

func TestForgetRuleDeletesEveryKeyOfTheRuleAndNoOther(t *testing.T) {
	r := fleettest.StartRedis(t)
	b, c := newBuckets(t, redisgcra.ClientOptions{Addrs: []string{r.Addr}})
	checkForgetRule(t, b, c, nil)
}

// In a Cluster the rule's identities are on every master (each its own
// hash tag): ForgetRule scans and deletes on each.
func TestForgetRuleDeletesTheRulesKeysOnEveryMasterOfACluster(t *testing.T) {
	addrs := fleettest.StartCluster(t)
	b, c := newBuckets(t, redisgcra.ClientOptions{Addrs: addrs})
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("UniversalClient for %d addresses is %T, want a cluster client", len(addrs), c)
	}
	checkForgetRule(t, b, c, func() {
		// The rule's keys are on every master: each one's must go.
		if sizes := masterSizes(t, cc); len(sizes) != 3 || slices.Min(sizes) < 1000 {
			t.Fatalf("keys per master %v; want the rule's spread over the 3", sizes)
		}
	})
}

// The rule's keys on a Sentinel's master are found there.
func TestForgetRuleDeletesOnASentinelsMaster(t *testing.T) {
	r := fleettest.StartRedis(t)
	sentinel := fleettest.StartSentinel(t, r.Addr, "mymaster")
	b, c := newBuckets(t, redisgcra.ClientOptions{Addrs: []string{sentinel}, MasterName: "mymaster"})
	checkForgetRule(t, b, c, nil)
}
