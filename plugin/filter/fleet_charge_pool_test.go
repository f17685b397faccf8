package filter

import (
	"math/rand/v2"
	"testing"

	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/state"
)

// chargedPool books every micro-token of a cost exactly once: paid from a
// live lease (which never goes below zero) or owed; a local share goes
// into debt no further than its share of max_debt; a pool that is not live
// owes the whole cost and is not changed.
func TestChargedPoolBooksEveryCostOnce(t *testing.T) {
	env := poolEnv{nowMS: 50_000, share: limiter.TokenBucket{Rate: 10, Burst: 50}}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		p := state.Pool{Mode: state.PoolLease, Tokens: rng.Int64N(100 * micro), Stamp: 49_000 + rng.Int64N(2_000), Spent: rng.Int64N(micro)}
		if rng.IntN(3) == 0 {
			p = state.Pool{Mode: state.PoolShare, Tokens: rng.Int64N(100*micro) - 50*micro, Stamp: 49_000 + rng.Int64N(1_000)}
		}
		exists := rng.IntN(8) != 0
		cost := rng.Int64N(200 * micro)
		debt := float64(rng.IntN(40))
		next, owed, clamped := chargedPool(p, exists, cost, &env, debt)
		switch live := exists && p.Mode == state.PoolLease && p.Stamp > env.nowMS; {
		case live:
			if paid := p.Tokens - next.Tokens; paid < 0 || paid+owed != cost || next.Tokens < 0 || clamped {
				t.Fatalf("case %d: lease %+v, cost %d: next %+v, owed %d, clamped %v", i, p, cost, next, owed, clamped)
			}
			if next.Spent != p.Spent+cost {
				t.Fatalf("case %d: spent %d after %d, want the whole cost %d added", i, next.Spent, p.Spent, cost)
			}
		case exists && p.Mode == state.PoolShare:
			if owed != 0 || next.Tokens < -int64(debt*micro)-1 {
				t.Fatalf("case %d: share %+v, cost %d, debt %v: next %+v, owed %d", i, p, cost, debt, next, owed)
			}
		default:
			if owed != cost || next != p {
				t.Fatalf("case %d: no live pool %+v (exists %v), cost %d: owed %d, pool changed to %+v", i, p, exists, cost, owed, next)
			}
		}
		if rec := state.EncodePool(nil, 1, next, []byte("id")); exists {
			if _, err := state.DecodePool(rec); err != nil {
				t.Fatalf("case %d: the charged pool %+v does not decode: %v", i, next, err)
			}
		}
	}
}
