package scenario

// Bounded memory must never make a client unlimited. A rule with max_keys
// 4,096 keeps the state of at most 4,096 identities (1,024 groups of four
// ways); identities that find their group's four ways held by other active
// identities share the group's overflow limit, the rule's own limit.
//
// N identities (a quarter, half and all of max_keys) each send 20 requests,
// round-robin, at one instant (the clock never moves: no refill), against a
// limit of 5 per identity (token bucket burst 5; fixed window limit 5): the
// exact answer is 5 admitted per identity, 5N in all. Asserted at every
// load: no identity is admitted more than its own limit (5 = burst +
// rate*0: what its own bucket alone would allow), the total never exceeds
// 5N, and nearly every identity is decided exactly while the table has room
// to spare (at a quarter of max_keys at least 99% of 5N, at half 97%: only
// identities of groups that drew more than four of them overflow). Before
// groups had an overflow limit, an identity of an overfull group evicted
// another and came back with a full bucket: 4,096 identities were admitted
// 38,180 requests against 20,480, one identity all 20 of its 20.

import (
	"fmt"
	"strconv"
	"testing"
)

func init() {
	register(
		Case{Name: "BoundedOverflowTokenBucket", Run: func(t *testing.T, start Starter) {
			boundedOverflow(t, start, "token_bucket", `{"rps": 0.000001, "burst": 5}`)
		}},
		Case{Name: "BoundedOverflowFixedWindow", Run: func(t *testing.T, start Starter) {
			boundedOverflow(t, start, "fixed_window", `{"limit": 5, "window_seconds": 86400}`)
		}},
	)
}

const (
	overflowMaxKeys  = 4096
	overflowRequests = 20 // per identity
	overflowLimit    = 5  // per identity
)

func boundedOverflow(t *testing.T, start Starter, algorithm, algConfig string) {
	cfg := `{"response_headers": false, "rules": [{"name": "per-ip", "max_keys": ` + strconv.Itoa(overflowMaxKeys) +
		`, "limit_keys": ["ip:address"], "algorithm": "` + algorithm + `", "algorithm_config": ` + algConfig + `}]}`
	for _, load := range []struct {
		identities int
		atLeast    float64 // of the exact total
	}{
		{overflowMaxKeys / 4, 0.99},
		{overflowMaxKeys / 2, 0.97},
		{overflowMaxKeys, 0},
	} {
		t.Run(fmt.Sprintf("%d-identities", load.identities), func(t *testing.T) {
			h := startConfig(t, start, cfg)
			n := load.identities
			rs := make([]Request, n)
			for i := range rs {
				addr := append(appendIPv4(nil, i), ":40000"...)
				rs[i] = Request{Headers: []Header{{":path", "/"}}, Properties: map[string][]byte{"source.address": addr}}
			}
			per := make([]int, n)
			total := 0
			for round := 0; round < overflowRequests; round++ {
				for i, res := range many(t, h, 0, rs) {
					switch {
					case res.Paused || (res.Rejected && res.Status != 429):
						t.Fatalf("identity %d: paused %v, rejected %v with status %d", i, res.Paused, res.Rejected, res.Status)
					case !res.Rejected:
						per[i]++
						total++
					}
				}
			}
			exact := n * overflowLimit
			worst, exactOnes := 0, 0
			for _, a := range per {
				worst = max(worst, a)
				if a == overflowLimit {
					exactOnes++
				}
			}
			overflowed := metric(h, "sluice.rule.per-ip.overflowed")
			sharers, _ := h.Metric("sluice.rule.per-ip.overflow_identities")
			t.Logf("%s, %d identities x %d requests: admitted %d (exact %d, %.4fx), worst identity %d of %d, %d identities exact; overflowed %d, overflow_identities %d",
				algorithm, n, overflowRequests, total, exact, float64(total)/float64(exact), worst, overflowRequests, exactOnes, overflowed, sharers)
			if worst > overflowLimit {
				t.Errorf("an identity was admitted %d requests, more than its own limit %d", worst, overflowLimit)
			}
			if total > exact {
				t.Errorf("admitted %d, more than the exact %d", total, exact)
			}
			if float64(total) < load.atLeast*float64(exact) {
				t.Errorf("admitted %d, less than %.0f%% of the exact %d", total, load.atLeast*100, exact)
			}
			if n == overflowMaxKeys {
				// A full table: many groups overflow, every overflow decision is
				// counted, and the operator is told to raise max_keys.
				if overflowed == 0 || sharers < 1 {
					t.Errorf("overflowed %d, overflow_identities %d at full load", overflowed, sharers)
				}
				if logsContaining(h, "share one overflow limit") == 0 {
					t.Error("no log line says identities share an overflow limit")
				}
			}
			wantMetrics(t, h, map[string]uint64{
				"sluice.rule.per-ip.allowed":   uint64(total),
				"sluice.rule.per-ip.fail_open": 0,
			})
			noRecoveredPanics(t, h)
		})
	}
}
