package scenario

// Fleet mode, backend down, local share: pools of more identities than
// ways replace each other (max_keys 2: one group of two ways, every
// identity's). A claim that replaces a fallback bucket continues its level
// and time, so the two ways admit together at most
// 2 x (share_burst + share_rate x T): evictions mint no bursts.

import (
	"strconv"
	"testing"
	"time"
)

func init() {
	register(Case{Name: "FleetEvictionsShareOneLevel", Run: fleetEvictionsShareOneLevel})
}

func fleetEvictionsShareOneLevel(t *testing.T, start Starter) {
	const node = "node-a"
	config := `{"fleet": {"cluster": "rls", "timeout_ms": 50, "sync_interval_ms": 100, "lease_ttl_ms": 5000, "lease_max": 40,
	  "on_backend_down": "local_share", "fleet_size": 1},
	 "rules": [{"name": "g", "scope": "global", "max_keys": 2, "limit_keys": ["header:x-tenant"], "algorithm": "token_bucket",
	   "algorithm_config": {"tokens_per_second": 10, "burst": 20}}]}`
	h := mustStart(t, start, Options{NodeID: node, VMs: 2, Config: []byte(config)})
	// send runs one request; a VM that has not seen the backend fail yet
	// asks it once: the call fails, and on_backend_down decides.
	send := func(vm int, tenant string) bool {
		res := doOn(t, h, vm, req("x-tenant", tenant))
		if res.Paused {
			for _, c := range pending(t, h) {
				rlsCall(t, c, node)
				failCall(t, h, c)
			}
			res = settled(t, "request after the failed ask", res)
		}
		return !res.Rejected
	}
	// Each identity offers more than the burst: whatever ways the
	// identities take first, both ways' shares are used up.
	const ids, each = 6, 25
	round := func(reverse bool) (n int) {
		for k := range ids {
			i := k
			if reverse {
				i = ids - 1 - k
			}
			for range each {
				if send(i%2, "tenant-"+strconv.Itoa(i)) {
					n++
				}
			}
		}
		return n
	}
	// At one instant: each way's share starts full once (20) and the
	// first identity there spends it; the others' claims find it empty.
	first := round(false)
	// 1.05 s later (less than the lease TTL: every pool is live), in the
	// other order, so the first claims evict pools refilled by 10.5: those
	// who had none take the level, not a new burst.
	h.Advance(1050 * time.Millisecond)
	second := round(true)
	evicted := metric(h, "sluice.rule.g.global_evicted")
	t.Logf("admitted %d then %d of %d each; %d evictions", first, second, ids*each, evicted)
	if first != 40 || second != 20 {
		t.Fatalf("admitted %d at t0 and %d at t0+1.05s; want 2 ways x burst 20 = 40, then 2 x 10 refilled = 20 "+
			"(total 60 = 2 x floor(share_burst + share_rate x T), T = 1.05 s)", first, second)
	}
	if evicted == 0 {
		t.Fatal("no evictions: the identities did not replace each other's pools")
	}
	if metric(h, "sluice.rule.g.backend_errors") == 0 {
		t.Fatal("the backend never failed")
	}
	noRecoveredPanics(t, h)
}
