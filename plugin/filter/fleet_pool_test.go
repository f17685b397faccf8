package filter

import (
	"math"
	"testing"

	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/state"
)

func TestDecidePool(t *testing.T) {
	env := poolEnv{nowMS: 10_000, healthy: true, down: "local_share", syncMS: 100, leaseTTL: 1000,
		share: limiter.TokenBucket{Rate: 10, Burst: 5}}
	live := state.Pool{Mode: state.PoolLease, Tokens: 3 * micro, Stamp: 11_000}
	cases := []struct {
		name    string
		p       state.Pool
		exists  bool
		healthy bool
		noFetch bool
		down    string
		want    verdict
	}{
		{"lease pays", live, true, true, false, "", vSpend},
		{"lease pays while down", live, true, false, false, "deny", vSpend},
		{"no state.Pool, healthy: fetch", state.Pool{}, false, true, false, "", vFetch},
		{"expired lease, healthy: fetch", state.Pool{Mode: state.PoolLease, Tokens: 9 * micro, Stamp: 9_000}, true, true, false, "", vFetch},
		{"after a fetch: deny", state.Pool{}, false, true, true, "", vDeny},
		{"refused lately", state.Pool{Mode: state.PoolLease, Stamp: 11_000, DenyUntil: 10_050}, true, true, false, "", vDeny},
		{"down, allow", state.Pool{}, false, false, false, "allow", vAllowDown},
		{"down, deny", state.Pool{}, false, false, false, "deny", vDeny},
		{"down, share", state.Pool{}, false, false, false, "local_share", vShare},
		{"down, share empty", state.Pool{Mode: state.PoolShare, Tokens: 0, Stamp: 10_000}, true, false, false, "local_share", vShareDeny},
	}
	for _, c := range cases {
		e := env
		e.healthy, e.noFetch = c.healthy, c.noFetch
		if c.down != "" {
			e.down = c.down
		}
		next, v, _, wait := decidePool(c.p, c.exists, 1, &e)
		if v != c.want {
			t.Errorf("%s: verdict %d, want %d", c.name, v, c.want)
		}
		if (v == vDeny || v == vShareDeny) && !(wait > 0) {
			t.Errorf("%s: refusal without a wait", c.name)
		}
		if v == vSpend && (next.Tokens != c.p.Tokens-micro || next.Spent != c.p.Spent+micro) {
			t.Errorf("%s: spend gave %+v", c.name, next)
		}
	}
}

// TestSharePoolIsTheShareBucket: the local-share fallback admits burst/N at
// once and rate/N per second after, like a token bucket of that size.
func TestSharePoolIsTheShareBucket(t *testing.T) {
	env := poolEnv{nowMS: 0, down: "local_share", share: limiter.TokenBucket{Rate: 10, Burst: 5}}
	p, exists, admitted := state.Pool{}, false, 0
	for ms := int64(0); ms < 2000; ms += 10 {
		env.nowMS = ms
		for range 3 {
			next, v, _, _ := decidePool(p, exists, 1, &env)
			if v == vShare {
				p, exists = next, true
				admitted++
			}
		}
	}
	// burst 5 + 10/s over 1.99 s
	if want := 5 + int(math.Floor(10*1.99)); admitted != want {
		t.Fatalf("admitted %d, want %d", admitted, want)
	}
}

// TestSharePoolContinuesTheReplacedShare: a new pool that replaces a
// fallback bucket starts from its level and time (refilled since, up to
// the burst); without one, or from its own lease, the share starts full.
func TestSharePoolContinuesTheReplacedShare(t *testing.T) {
	env := poolEnv{nowMS: 10_000, down: "local_share", share: limiter.TokenBucket{Rate: 10, Burst: 5}}
	cases := []struct {
		name   string
		p      state.Pool
		exists bool
		prev   *state.Pool
		want   int64 // micro-tokens after a request of cost 1 (within one: float rounding)
	}{
		{"free slot: full", state.Pool{}, false, nil, 4 * micro},
		{"replaced drained share: 0.05 s of refill is too little", state.Pool{}, false, &state.Pool{Mode: state.PoolShare, Stamp: 9_950}, -1},
		{"replaced drained share: 0.5 s of refill", state.Pool{}, false, &state.Pool{Mode: state.PoolShare, Stamp: 9_500}, 4 * micro},
		{"replaced share, 2 tokens 0.1 s ago", state.Pool{}, false, &state.Pool{Mode: state.PoolShare, Tokens: 2 * micro, Stamp: 9_900}, 2 * micro},
		{"replaced share refilled past the burst", state.Pool{}, false, &state.Pool{Mode: state.PoolShare, Stamp: 1_000}, 4 * micro},
		{"own expired lease: full", state.Pool{Mode: state.PoolLease, Stamp: 9_000}, true, &state.Pool{Mode: state.PoolShare, Stamp: 9_900}, 4 * micro},
	}
	for _, c := range cases {
		e := env
		if c.prev != nil {
			e.prev, e.hasPrev = *c.prev, true
		}
		next, v, _, _ := decidePool(c.p, c.exists, 1, &e)
		switch {
		case c.want < 0 && v != vShareDeny:
			t.Errorf("%s: verdict %d, want a refusal", c.name, v)
		case c.want >= 0 && (v != vShare || abs(next.Tokens-c.want) > 1 || next.Stamp != env.nowMS):
			t.Errorf("%s: verdict %d, pool %+v; want %d micro-tokens at %d", c.name, v, next, c.want, env.nowMS)
		}
	}
}

func abs(n int64) int64 { return max(n, -n) }
