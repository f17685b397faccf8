package filter

import (
	"math"

	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/state"
)

// Fleet mode: the lease pool of one (global rule, identity) in one Envoy
// process, and the request-path decision on it. Pure functions; fleet.go
// does the shared-data I/O, fleet_sync.go the RLS calls.
//
// A pool is a state.Pool in shared data (so every worker VM of the process
// spends from it, exactly, with CAS), in the rule's bounded table of groups
// like a bucket (fleet.go) or, with max_keys 0, alone at "fl:{rule}:={id}".
// Its owner is known by its sluice_id, 32 hex digits (two independent
// 64-bit hashes of the composite key): the identity itself, which may hold
// an API key, is never stored in a pool nor sent to the backend. Tokens
// are micro-tokens (integers, so nothing is rounded on the hot path).

const micro = 1e6

// idLen is the length of a sluice_id.
const idLen = state.SluiceIDLen

// parseInt reads an optionally negative decimal integer of at most 18
// digits at the start of b.
func parseInt(b []byte) (n int64, used int, ok bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		used = 1
	}
	start := used
	for used < len(b) && b[used] >= '0' && b[used] <= '9' {
		if used-start >= 18 {
			return 0, 0, false
		}
		n = n*10 + int64(b[used]-'0')
		used++
	}
	if used == start {
		return 0, 0, false
	}
	if neg {
		n = -n
	}
	return n, used, true
}

// verdict is what the request path does with a global rule.
type verdict uint8

const (
	vSpend     verdict = iota // the pool pays: write it
	vAdmit                    // the pool holds something: admit, write nothing (the response pays)
	vDeny                     // refused (the RLS said over limit, or fallback deny)
	vFetch                    // the pool cannot pay and the backend is healthy: ask it (pause)
	vAllowDown                // backend down, on_backend_down "allow": admit, write nothing
	vShare                    // backend down, local share admitted: write the F state.Pool
	vShareDeny                // backend down, local share refused
)

// poolEnv is what a decision needs besides the pool.
type poolEnv struct {
	nowMS   int64
	healthy bool // the backend answered the last call of this process
	noFetch bool // this request already waited for a fetch: do not ask again
	// admitOnly: a rule charged from the response (fleet_charge.go). The
	// request takes nothing; it is admitted while the pool holds cost (a
	// response_status rule's fixed_cost), or anything when cost is 0.
	admitOnly bool
	down      string
	share     limiter.TokenBucket // rate/N, burst/N
	syncMS    int64
	leaseTTL  int64
	// prev is the local-share bucket of the pool a claim replaces (hasPrev:
	// that pool was in mode F): a new pool's share continues it.
	prev    state.Pool
	hasPrev bool
}

// decidePool decides one global rule for a request of the given cost.
// remaining and wait are in tokens and seconds, for the response headers.
func decidePool(p state.Pool, exists bool, cost float64, env *poolEnv) (next state.Pool, v verdict, remaining, wait float64) {
	costU := int64(math.Ceil(cost * micro))
	now := env.nowMS
	lease := exists && p.Mode == state.PoolLease && p.Stamp > now
	if env.admitOnly {
		if lease && p.Tokens >= max(costU, 1) {
			return p, vAdmit, float64(p.Tokens) / micro, 0
		}
	} else if lease && p.Tokens >= costU {
		p.Tokens -= costU
		p.Spent += costU
		return p, vSpend, float64(p.Tokens) / micro, 0
	}
	if lease && p.DenyUntil > now {
		return p, vDeny, 0, float64(p.DenyUntil-now) / 1000
	}
	if env.healthy {
		if !env.noFetch {
			return p, vFetch, 0, 0
		}
		// A fetch just answered and the pool still cannot pay (the grant
		// went to other requests, or was refused): refuse for a sync period.
		return p, vDeny, 0, float64(env.syncMS) / 1000
	}
	switch env.down {
	case "allow":
		return p, vAllowDown, 0, 0
	case "deny":
		return p, vDeny, 0, float64(env.syncMS) / 1000
	}
	return sharePool(p, exists, cost, env)
}

// sharePool decides on the local-share fallback bucket (rate/N, burst/N),
// turning the pool into one if it is a lease (starting full) or new. A new
// pool that replaces another's local share (an eviction or a stale slot)
// starts from that share's level and time, not full: the level passes along
// the slot, so identities cycling through it share one bucket.
func sharePool(p state.Pool, exists bool, cost float64, env *poolEnv) (state.Pool, verdict, float64, float64) {
	if !exists || p.Mode != state.PoolShare {
		tokens, stamp := int64(env.share.Burst*micro), env.nowMS
		if !exists && env.hasPrev {
			tokens, stamp = env.prev.Tokens, env.prev.Stamp // Take refills it, up to the burst
		}
		p = state.Pool{Mode: state.PoolShare, Tokens: tokens, Stamp: stamp, LastSync: p.LastSync}
	}
	b := state.Bucket{Tokens: float64(p.Tokens) / micro, LastRefill: float64(p.Stamp) / 1000}
	nb, dec := env.share.Take(b, true, float64(env.nowMS)/1000, cost)
	if env.admitOnly { // nothing taken: the response is charged to the share (chargedPool)
		if cost > 0 {
			nb, dec = env.share.AdmitCost(b, true, float64(env.nowMS)/1000, cost)
		} else {
			nb, dec = env.share.Admit(b, true, float64(env.nowMS)/1000)
		}
		cost = 0
	}
	if !dec.Allowed {
		return p, vShareDeny, dec.Remaining, dec.Wait
	}
	// A pool's level is never negative: Take may leave a hair of debt
	// (limiter.DueSlack), which a pool does not keep.
	p.Tokens = max(0, int64(nb.Tokens*micro))
	p.Stamp = int64(math.Round(nb.LastRefill * 1000))
	p.Spent += int64(math.Ceil(cost * micro))
	return p, vShare, dec.Remaining, 0
}
