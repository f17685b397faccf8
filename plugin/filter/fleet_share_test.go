package filter_test

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
)

// The local share of pools that replace each other (docs/filter.md,
// "Backend down"): a claim that evicts a live fallback bucket, or takes
// the way of a stale one, continues that bucket's level and time, so the
// identities cycling through a way together get at most
// share_burst + share_rate x T from it over any interval T.

// shareConfig is a global rule with the backend's fleet size pinned to 1
// (the local share is the whole rate and burst).
func shareConfig(maxKeys int, rate, burst int) string {
	return `{"fleet":{"cluster":"rls","timeout_ms":50,"sync_interval_ms":100,"lease_ttl_ms":1000,"lease_max":40,
	  "on_backend_down":"local_share","fleet_size":1},
	 "rules":[{"name":"g","scope":"global","max_keys":` + strconv.Itoa(maxKeys) + `,"limit_keys":["header:x-tenant"],
	   "algorithm":"token_bucket","algorithm_config":{"tokens_per_second":` + strconv.Itoa(rate) + `,"burst":` + strconv.Itoa(burst) + `}}]}`
}

// downFleet is one process of two VMs whose RLS fails every call.
func downFleet(t *testing.T, config string) (*wasmhost.ManualClock, func(vm int, tenant string) bool, func(time.Duration), func(string) uint64) {
	clock := wasmhost.NewManualClock(t0)
	fake := &fakeRLS{clock: clock, rate: 100, burst: 100, buckets: map[string]*fakeBucket{}, nodes: map[string]bool{}}
	fake.down.Store(true)
	fh := startFleet(t, clock, config, serveRLS(t, fake), 1)
	t.Cleanup(fh.CheckNoTraps)
	return clock, func(vm int, tenant string) bool { return fh.Request(0, vm, tenant) }, fh.Step, fh.Metric
}

// TestFleetEvictionsShareOneLevel: six identities cycle through the two
// ways of max_keys 2 (one group, every identity's), the backend down from
// the start, each offering 50 requests/s against a share of 10/s, burst
// 10. Every claim evicts a live fallback bucket, so each way's share
// passes from identity to identity: over the run's T (first to last
// request), the two ways admit at most 2 x floor(10 + 10 x T). A new pool
// starting with a full share would admit about one burst per eviction.
func TestFleetEvictionsShareOneLevel(t *testing.T) {
	const rate, burst, steps, ids = 10, 10, 100, 6
	_, request, step, metric := downFleet(t, shareConfig(2, rate, burst))
	admitted := 0
	for s := range steps {
		for i := range ids {
			if request((s+i)%2, "tenant-"+strconv.Itoa(i)) {
				admitted++
			}
		}
		step(20 * time.Millisecond)
	}
	T := float64(steps-1) * 0.020
	perWay := math.Floor(burst + rate*T)
	evicted := metric("sluice.rule.g.global_evicted")
	t.Logf("admitted %d of %d in %.2fs; bound 2 x %.0f; evictions %d", admitted, steps*ids, T, perWay, evicted)
	if evicted < 10 {
		t.Fatalf("only %d evictions: the identities do not cycle through the ways", evicted)
	}
	if float64(admitted) > 2*perWay {
		t.Fatalf("admitted %d > 2 ways x floor(share_burst + share_rate x T) = %.0f", admitted, 2*perWay)
	}
	if float64(admitted) < 2*perWay-4 {
		t.Fatalf("admitted %d: the ways' shares were not used (bound %.0f)", admitted, 2*perWay)
	}
}

// TestFleetStaleShareKeepsLevel: a fallback bucket idle for more than a
// lease TTL is stale and its way may be taken, but with burst/rate (3 s)
// above the TTL (1 s) it has not refilled: the claim continues its level.
// With max_keys 1 there is one way: a empties the share (30) at t0, b
// claims the stale way 1.5 s later and gets the 15 tokens refilled since.
func TestFleetStaleShareKeepsLevel(t *testing.T) {
	_, request, step, metric := downFleet(t, shareConfig(1, 10, 30))
	got := func(tenant string, n int) (admitted int) {
		for i := range n {
			if request(i%2, tenant) {
				admitted++
			}
		}
		return admitted
	}
	if a := got("a", 40); a != 30 {
		t.Fatalf("a admitted %d of 40 on a fresh share of burst 30", a)
	}
	step(1500 * time.Millisecond)
	if b := got("b", 40); b != 15 {
		t.Fatalf("b admitted %d of 40 from the stale way; want the 15 tokens refilled since a emptied it", b)
	}
	if n := metric("sluice.rule.g.global_evicted"); n != 0 {
		t.Fatalf("%d evictions: the stale way should be taken without one", n)
	}
}
