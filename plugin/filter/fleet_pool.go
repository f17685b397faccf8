package filter

import (
	"math"
	"strconv"

	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/state"
)

// Fleet mode: the lease pool of one (global rule, identity) in one Envoy
// process, and the request-path decision on it. Pure functions; fleet.go
// does the shared-data I/O, fleet_sync.go the RLS calls.
//
// A pool lives in shared data (so every worker VM of the process spends from
// it, exactly, with CAS) at "fl:{rule}:#{slot}" (one of the identity's two
// candidate slots, state.CandidateSlots over max_keys) or, with
// max_keys 0, at "fl:{rule}:={id}". Its value:
//
//	{id}:{mode}:{tokens}:{stamp}:{spent}:{deny_until}:{last_sync}
//
//   - id: the sluice_id sent to the RLS, 32 hex digits (two independent
//     64-bit hashes of the composite key): the identity itself, which may
//     hold an API key, is never stored in a pool nor sent to the backend.
//   - mode: L, tokens leased from the global bucket; F, the local-share
//     fallback bucket (backend down, on_backend_down "local_share").
//   - tokens: micro-tokens (integers, so no float formatting on the hot path).
//   - stamp: L, when the lease expires (unix ms); F, the last refill (ms).
//   - spent: micro-tokens spent since the last sync (the demand estimate).
//   - deny_until: the RLS refused a lease; until then an empty pool rejects
//     without asking again (ms).
//   - last_sync: when a sync last touched the pool (ms).

type poolMode byte

const (
	modeLease poolMode = 'L'
	modeShare poolMode = 'F'
)

type pool struct {
	mode      poolMode
	tokens    int64 // micro-tokens
	stamp     int64 // ms
	spent     int64 // micro-tokens
	denyUntil int64 // ms
	lastSync  int64 // ms
}

const micro = 1e6

// idLen is the length of a sluice_id.
const idLen = 32

// appendSluiceID appends the 32-hex-digit sluice_id of an identity:
// state.Fingerprint and a second FNV-1a 64 pass from another offset basis,
// both through the murmur3 finalizer.
func appendSluiceID(b []byte, identity string) []byte {
	return appendSluiceIDFP(b, identity, state.Fingerprint(identity))
}

// appendSluiceIDFP is appendSluiceID with the identity's state.Fingerprint
// already computed (the request path has it).
func appendSluiceIDFP(b []byte, identity string, fp uint64) []byte {
	h := uint64(0x84222325cbf29ce4) // a different basis from FNV's
	for i := 0; i < len(identity); i++ {
		h ^= uint64(identity[i])
		h *= 0x100000001b3
	}
	h ^= uint64(len(identity))
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	b = appendHex64(b, fp)
	return appendHex64(b, h)
}

func appendHex64(b []byte, v uint64) []byte {
	const digits = "0123456789abcdef"
	for i := 60; i >= 0; i -= 4 {
		b = append(b, digits[(v>>uint(i))&0xf])
	}
	return b
}

// encodePool appends a pool's value.
func encodePool(b, id []byte, p pool) []byte {
	b = append(b, id...)
	b = append(b, ':', byte(p.mode), ':')
	b = strconv.AppendInt(b, p.tokens, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, p.stamp, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, p.spent, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, p.denyUntil, 10)
	b = append(b, ':')
	return strconv.AppendInt(b, p.lastSync, 10)
}

// decodePool parses a pool value; ok is false for anything malformed
// (a free slot, a placeholder, garbage), which the caller treats as free.
func decodePool(v []byte) (id []byte, p pool, ok bool) {
	if len(v) < idLen+3 || v[idLen] != ':' || v[idLen+2] != ':' {
		return nil, pool{}, false
	}
	id, p.mode = v[:idLen], poolMode(v[idLen+1])
	if p.mode != modeLease && p.mode != modeShare {
		return nil, pool{}, false
	}
	rest := v[idLen+3:]
	var fields [5]int64
	for i := range fields {
		n, used, ok := parseInt(rest)
		if !ok || (i < 4 && (used >= len(rest) || rest[used] != ':')) || (i == 4 && used != len(rest)) {
			return nil, pool{}, false
		}
		fields[i] = n
		if i < 4 {
			rest = rest[used+1:]
		}
	}
	p.tokens, p.stamp, p.spent, p.denyUntil, p.lastSync = fields[0], fields[1], fields[2], fields[3], fields[4]
	if p.tokens < 0 || p.spent < 0 {
		return nil, pool{}, false
	}
	return id, p, true
}

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
	vDeny                     // refused (the RLS said over limit, or fallback deny)
	vFetch                    // the pool cannot pay and the backend is healthy: ask it (pause)
	vAllowDown                // backend down, on_backend_down "allow": admit, write nothing
	vShare                    // backend down, local share admitted: write the F pool
	vShareDeny                // backend down, local share refused
)

// poolEnv is what a decision needs besides the pool.
type poolEnv struct {
	nowMS    int64
	healthy  bool // the backend answered the last call of this process
	noFetch  bool // this request already waited for a fetch: do not ask again
	down     string
	share    limiter.TokenBucket // rate/N, burst/N
	syncMS   int64
	leaseTTL int64
	// prev is the local-share bucket of the pool a claim replaces (hasPrev:
	// that pool was in mode F): a new pool's share continues it.
	prev    pool
	hasPrev bool
}

// decidePool decides one global rule for a request of the given cost.
// remaining and wait are in tokens and seconds, for the response headers.
func decidePool(p pool, exists bool, cost float64, env *poolEnv) (next pool, v verdict, remaining, wait float64) {
	costU := int64(math.Ceil(cost * micro))
	now := env.nowMS
	lease := exists && p.mode == modeLease && p.stamp > now
	if lease && p.tokens >= costU {
		p.tokens -= costU
		p.spent += costU
		return p, vSpend, float64(p.tokens) / micro, 0
	}
	if lease && p.denyUntil > now {
		return p, vDeny, 0, float64(p.denyUntil-now) / 1000
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
func sharePool(p pool, exists bool, cost float64, env *poolEnv) (pool, verdict, float64, float64) {
	if !exists || p.mode != modeShare {
		tokens, stamp := int64(env.share.Burst*micro), env.nowMS
		if !exists && env.hasPrev {
			tokens, stamp = env.prev.tokens, env.prev.stamp // Take refills it, up to the burst
		}
		p = pool{mode: modeShare, tokens: tokens, stamp: stamp, lastSync: p.lastSync}
	}
	b := state.Bucket{Tokens: float64(p.tokens) / micro, LastRefill: float64(p.stamp) / 1000}
	nb, dec := env.share.Take(b, true, float64(env.nowMS)/1000, cost)
	if !dec.Allowed {
		return p, vShareDeny, dec.Remaining, dec.Wait
	}
	p.tokens = int64(nb.Tokens * micro)
	p.stamp = int64(math.Round(nb.LastRefill * 1000))
	p.spent += int64(math.Ceil(cost * micro))
	return p, vShare, dec.Remaining, 0
}
