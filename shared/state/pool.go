package state

import (
	"encoding/binary"
	"errors"
)

// Pool records: the lease pools of fleet mode (a global rule's tokens
// leased from a rate limit service, per identity and Envoy process). A
// rule with max_keys = N > 0 keeps them in groups, like buckets (group.go:
// "fl:{rule}:#{group}", up to Ways pools to a key, no overflow record); one
// with max_keys 0 has one key per identity holding the record alone. A
// record, binary:
//
//	byte  0       PoolFormat (0x0a)
//	bytes 1-8     fingerprint, uint64
//	byte  9       mode: PoolLease ('L') or PoolShare ('F')
//	bytes 10-49   tokens, stamp, spent, deny_until, last_sync: int64 each
//	bytes 50-     identity, 1 to MaxIdentity bytes
//
// (little-endian). The fingerprint and identity are as in a slot record
// (slot.go), the identity being whatever the pool's owner is known by (the
// filter stores the sluice_id it sends to the service, never the limit
// key). Pool says what the other fields mean. Binary like the other
// records: the text form this replaced,
// "{id}:{mode}:{tokens}:{stamp}:{spent}:{deny_until}:{last_sync}" in
// separate keys (one of two candidate slots per identity), is not read: a
// pool written by an earlier version reads as a free way, which loses its
// leased tokens (under-admission until they would have lapsed) and, while
// the service is down, lets its fallback bucket start full once.

// PoolFormat is the first byte of a pool record (distinct from every other
// record and group format and from every hex digit).
const PoolFormat = 0x0a

// Pool modes.
const (
	PoolLease = 'L' // tokens leased from the global limit
	PoolShare = 'F' // the local fallback bucket while the service is down
)

// MaxPoolDebt bounds a fallback bucket's debt in micro-tokens: a billion
// tokens, the most a response may report.
const MaxPoolDebt int64 = 1e15

// poolHeader is the size of a pool record before its identity.
const poolHeader = 50

// Errors returned by DecodePool.
var (
	ErrPoolFormat = errors.New("state: pool record is truncated, not in PoolFormat, or has a mode other than 'L' or 'F'")
	ErrPoolTokens = errors.New("state: pool tokens or spent is negative (a fallback bucket's tokens: below -MaxPoolDebt)")
)

// Pool is one identity's lease pool in one process. Integers, so nothing
// is rounded on its way through shared data.
type Pool struct {
	// Mode is PoolLease or PoolShare.
	Mode byte
	// Tokens are micro-tokens: leased and not yet spent (PoolLease, never
	// negative), or the fallback bucket's level (PoolShare), which a cost
	// charged from the response may take into debt, down to -MaxPoolDebt.
	Tokens int64
	// Stamp (unix ms) is when the lease lapses (PoolLease), or the
	// fallback bucket's last refill (PoolShare).
	Stamp int64
	// Spent is the micro-tokens spent since the last sync: the demand the
	// next lease is sized from. Never negative.
	Spent int64
	// DenyUntil (unix ms): the service refused a lease; until then an
	// empty pool refuses without asking again.
	DenyUntil int64
	// LastSync (unix ms) is when a sync last touched the pool.
	LastSync int64
}

// PoolSlot is a decoded pool record.
type PoolSlot struct {
	Fingerprint uint64
	Pool        Pool
	Identity    []byte // aliases the decoded value
}

// EncodePool appends a pool record. identity should be 1 to MaxIdentity
// bytes, as DecodePool requires (a longer one is cut there). It does not
// allocate when dst has room; records of one identity length have one
// length, so an update rewrites its group in place (Group.WithWay).
func EncodePool(dst []byte, fp uint64, p Pool, identity []byte) []byte {
	dst = append(dst, PoolFormat)
	dst = binary.LittleEndian.AppendUint64(dst, fp)
	dst = append(dst, p.Mode)
	for _, n := range [...]int64{p.Tokens, p.Stamp, p.Spent, p.DenyUntil, p.LastSync} {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(n))
	}
	return append(dst, identity[:min(len(identity), MaxIdentity)]...)
}

// DecodePool parses a pool record: PoolFormat, a known mode, spent >= 0,
// tokens >= 0 (a fallback bucket's >= -MaxPoolDebt), an identity of 1 to MaxIdentity bytes. It never panics and
// does not allocate; the returned Identity aliases v.
func DecodePool(v []byte) (PoolSlot, error) {
	if len(v) < poolHeader || v[0] != PoolFormat || (v[9] != PoolLease && v[9] != PoolShare) {
		return PoolSlot{}, ErrPoolFormat
	}
	n := func(i int) int64 { return int64(binary.LittleEndian.Uint64(v[10+8*i:])) }
	p := Pool{Mode: v[9], Tokens: n(0), Stamp: n(1), Spent: n(2), DenyUntil: n(3), LastSync: n(4)}
	switch id := v[poolHeader:]; {
	case p.Tokens < 0 && (p.Mode != PoolShare || p.Tokens < -MaxPoolDebt) || p.Spent < 0:
		return PoolSlot{}, ErrPoolTokens
	case len(id) == 0 || len(id) > MaxIdentity:
		return PoolSlot{}, ErrIdentity
	default:
		return PoolSlot{Fingerprint: binary.LittleEndian.Uint64(v[1:]), Pool: p, Identity: id}, nil
	}
}
