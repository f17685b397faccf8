package filter

import (
	"errors"
	"math"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-rl/sluice/shared/state"
)

// The bucket store: token buckets in proxy-wasm shared data.
//
// Shared data is one map per vm_id shared by every worker thread's VM (and
// Envoy's canary VM), and survives configuration updates, so buckets do too.
// There is no timer: a bucket is refilled lazily by limiter.TokenBucket.Take
// when a request reads it, with the time from the WASI clock (Envoy's).
// Envoy's shared data has no delete and no TTL: a key, once written, stays
// until the last VM of the vm_id goes away. That is why a rule normally
// stores its buckets in a bounded number of keys (below).
//
// Two storage modes, per rule (policy.Rule.MaxKeys, "max_keys"):
//
//   - Bounded (max_keys N > 0, the default 65536): the rule's buckets live in
//     at most N slots, keys "tb:{rule}:#{slot}", values holding the
//     identity's fingerprint, the bucket, the identity and the slot's spill
//     mark (binary, shared/state slot.go). An identity may occupy one of
//     state.Candidates (2) candidate slots,
//     state.CandidateSlots(state.Fingerprint(identity), N).
//   - Exact (max_keys 0): one key per identity, "tb:{rule}:{composite}",
//     value "{tokens}:{last_refill}" (seed 001). Memory grows with every
//     distinct identity.
//
// Concurrency. Workers update a bucket with compare-and-swap: get returns
// (value, cas); we compute the new state and set(value, cas). If another VM
// wrote in between, the host answers CAS_MISMATCH and we re-read (in bounded
// mode: probe the candidates again), re-decide and retry, at most
// maxAttempts times. Running out of attempts, or any other shared-data error,
// fails open for that rule (see plugin.go). Every write below is conditional.
//
// Creating a key. Envoy's shared data has no create-if-absent: a set on a
// MISSING key succeeds whatever cas is passed, and cas 0 means
// "unconditional". The obvious "get: NOT_FOUND -> set(key, v, 0)" lets two
// VMs that both saw NOT_FOUND both succeed, the second overwriting the first
// VM's write: a prototype over-admitted in 19 of 200 four-VM trials.
//
// So we create with a cas that cannot belong to any concurrent creation. On
// NOT_FOUND we (1) blind-write a sentinel key (sentinelKey; its content is
// irrelevant) and (2) read it back: its cas S was issued by the host's global
// counter at a write that happened AFTER our NOT_FOUND read (our own sentinel
// write, or a later one by another VM). (3) We create the key with
// set(key, v, S).
//   - If the key is still missing, the set succeeds: missing keys accept any
//     cas. Nobody else created it, so nothing is overwritten.
//   - If another VM created the key after our NOT_FOUND read, the key now
//     holds the cas of that VM's (or a later) write. Every write takes a fresh
//     value from the one global counter, and that write is not the sentinel
//     write that produced S, so its cas differs from S; a nonzero cas that
//     differs is a CAS_MISMATCH, and we re-read and retry through the normal
//     update path, which sees the other VM's tokens.
//
// The argument fails only if the host's uint32 counter wrapped all the way
// around (2^32 writes) between the sentinel write and our set, a window of a
// few host calls, so that the other VM's write was given exactly S again.
// That is why the sentinel is rewritten on every creation rather than
// written once and cached: a cached S could be days old and the counter can
// wrap in hours on a busy proxy. Creations are off the hot path (once per new
// key), and two extra host calls there are cheap. So a creation behaves
// exactly like a CAS against the NOT_FOUND read.
//
// Bounded mode: finding a bucket (probe). The candidates are read in order.
//   - A slot holding our fingerprint and identity is our bucket: update it
//     with CAS on that slot's cas. An active identity is normally found at
//     its first candidate: one get, as in exact mode.
//   - A MISSING slot ends the probe: our bucket cannot be in a later
//     candidate (a claim of candidate j requires candidates 0..j-1 to
//     exist, see below, and keys are never deleted).
//   - Otherwise we claim a slot: the candidate closest to full, the first
//     on ties. Free slots (missing, an empty placeholder, or a value that
//     does not decode) and buckets that have refilled to full all rank as
//     full, so the first of them wins: reusing a full bucket's slot loses
//     nothing (a full bucket carries no information: a new bucket starts
//     full), and keeping identities at their first candidate keeps the hot
//     path at one get. If every candidate holds an active (not full) bucket
//     of another identity, the claim EVICTS the fullest, the one whose loss
//     forgives the fewest tokens (counted in sluice.rule.<rule>.evicted).
//     The evicted identity's next request finds no bucket and starts a full
//     one: it is admitted at most (burst - its tokens at eviction) extra
//     tokens, and only while more than max_keys identities are active at
//     once. Eviction never denies anyone a request. The ranking uses the
//     values read only, not this worker's clock (see probe), so workers
//     that read the same values choose the same slot.
//
// Bounded mode: claiming without duplicates. A claim must not give one
// identity two buckets: with two, it would be admitted twice its burst. Two
// VMs can disagree about which candidate to claim (another identity's
// bucket changed between their reads), so a CAS on the claimed slot alone
// is not enough (TestRaceClaimNoDuplicate/writer shows the over-admission).
// A claim therefore writes EVERY candidate it read, each conditioned on
// that read: first the passed-over candidates, each rewritten with the exact
// bytes read ("bump": the content is unchanged, only its cas moves on; the
// owner of that bucket at worst sees one CAS mismatch and retries), or, if
// it was the missing one, created empty with the create above (a
// placeholder: a free slot); then the claimed slot (CAS, or the create
// above if it was missing). Any failure means a slot changed since the
// probe: probe again.
//
// Why that suffices: all reads of a claim precede all its writes and every
// write succeeds only if its slot is unchanged since the read, so at one
// instant (after the last read, before the first write) every candidate
// read still held what was read, none holding our identity; candidates
// after a missing one cannot hold it either (above). So a successful claim
// starts the identity's only bucket, unless a concurrent claim for the same
// identity also succeeded. Suppose claims A and B both did, at different
// slots (at one slot, one CAS fails). Each writes every candidate it read,
// and each read the other's target: had A stopped its probe at a missing
// slot before B's target, B read that slot as existing, so it was created
// in between, by A's claim (then B saw A's bucket and would not have
// claimed) or by someone else (then A's create failed). On A's target, B's
// write (a bump) and A's write (the claim) both succeeded, each conditioned
// on its own read, so one of them read that slot after the other wrote it.
// If B read it after A's claim, B saw A's bucket and would not have
// claimed; so A read it after B's bump, i.e. after all of B's reads.
// Symmetrically B read B's target after A's bump, after all of A's reads.
// Then A's reads finish after B's first write, which is after B's last
// read, which is after A's first write: A wrote before finishing its reads,
// a contradiction. (The only gap is the uint32 cas counter wrapping around
// between a read and a write, as for creations.)
//
// Bounded mode: one-read claims and spill marks. Reading the second
// candidate on every new identity (to be sure our bucket is not there) and
// rewriting it costs two host calls per claim, and a stream of new
// identities (a scan) would pay them on every request. So a slot value
// also carries a spill mark (shared/state, spill_until): until
// spill_until, an identity whose FIRST candidate is this slot may hold an
// active bucket in its second one. The mark belongs to the slot, not to the
// bucket in it, so every write of a slot keeps the mark it read (our
// updates, claims, refunds, and every other writer of a slot in the same
// way), or raises it:
//   - A claim that targets our second candidate raises the mark of the
//     first (its bump) to cover our new bucket: at least the time it is
//     full again (last_refill + (burst - tokens)/rate), set to twice that
//     horizon so the next requests find it covered.
//   - A request that finds our bucket past our first candidate raises the
//     first candidate's mark the same way if it does not cover the bucket
//     as we are about to write it, before writing it.
//   - A probe whose first candidate is an empty placeholder, or holds a
//     full bucket of another identity with no live mark (spill_until <=
//     now), claims it after that one read and writes only it: nobody whose
//     first candidate it is has an active bucket elsewhere.
// A placeholder never needs a mark: it is only written as a passed-over
// later candidate, and a first candidate gets a mark only while it holds an
// active bucket (else we would have claimed it).
//
// Why no duplicates still: a one-read claim X of our first candidate A and
// a claim Y of our second candidate B both succeeded. Y bumped A (with a
// mark covering our new bucket in B) and X wrote A, each conditioned on its
// read, so one read A after the other wrote it. If Y read A after X's
// write, Y found our bucket there and did not claim. So X read A after Y's
// bump, saw a mark covering the bucket Y wrote, and that mark had expired
// at X's now: the bucket in B was full by then and carries nothing a new
// bucket would not (a mark only rises while that bucket is used; a refund
// only fills it). Between two-read claims the argument above is unchanged.
// A mark lost to something that does not keep it (a corrupt write, a
// plugin version without marks) costs what an eviction costs: that
// identity starts a full bucket at its first candidate.
//
// Racing with the previous owner. A slot reused or evicted under an owner
// whose request is between its read and its write: the owner's CAS fails,
// its re-read finds another fingerprint, and it probes again from the first
// candidate (and claims a new, full bucket if its own is gone).
//
// Fingerprint collisions. A slot matches only when both the 64-bit
// fingerprint and the stored identity equal ours. Identities are at most
// state.MaxIdentity (256) bytes and stored whole, so distinct identities
// never share a bucket, except composites longer than 256 bytes, which are
// already replaced by "#{FNV-1a 64}#{first 64 bytes}" (keys.go): two of
// those share a bucket only on a 64-bit FNV collision (about 2^-64 per pair
// for accidental keys), in both storage modes.
//
// A bucket whose value does not decode (corrupt, or written by something
// else) is treated as a new, full bucket (exact mode) or as a reusable slot
// (bounded mode), but always overwritten with the cas of the read, so even
// that write is conditional.

const (
	// maxAttempts bounds the write attempts per rule per request (the first
	// one plus retries after CAS mismatches). A VM loses a round only when
	// another VM won one, and once the bucket is empty requests are decided
	// without writing, so contention is self-limiting; the bound only stops
	// pathological livelock. Exhaustion fails open, so it is generous: with
	// 32, the 4-VM race tests (30% injected mismatches on top of the real
	// ones, 2 cores shared with other test binaries) failed open about once
	// in 200,000 requests; a VM must now lose 128 rounds in a row, i.e. to
	// 128 writes by other VMs during its own attempts.
	maxAttempts = 128

	// sentinelKey is the shared-data key whose cas seeds key creation.
	sentinelKey = "sluice:cas-epoch"
)

var sentinelValue = []byte("1")

// proxy-wasm status codes returned by the direct host calls
// (hostcalls_wasip1.go).
const (
	statusOK              uint32 = 0
	statusNotFound        uint32 = 1
	statusCasMismatch     uint32 = 8
	statusInternalFailure uint32 = 10
)

// statusError maps a status to the SDK's error values (for messages and
// errors.Is).
func statusError(st uint32) error {
	switch st {
	case statusNotFound:
		return types.ErrorStatusNotFound
	case statusCasMismatch:
		return types.ErrorStatusCasMismatch
	case 2:
		return types.ErrorStatusBadArgument
	case statusInternalFailure:
		return types.ErrorInternalFailure
	case 12:
		return types.ErrorUnimplemented
	}
	return errors.New("shared data status " + itoa(int64(st)))
}

var (
	// errRetriesExhausted is the fail-open cause when every attempt hit a
	// CAS mismatch.
	errRetriesExhausted = errors.New("cas retries exhausted")
	// errZeroCAS: the host returned cas 0 for an existing key, which Envoy
	// never issues; writing with it would be unconditional.
	errZeroCAS = errors.New("shared data returned cas 0")
)

// claimKind says how a bounded-mode write takes its slot.
type claimKind uint8

const (
	claimNone    claimKind = iota // our bucket was found in the slot: plain CAS update
	claimMissing                  // the slot does not exist: create it
	claimReuse                    // the slot holds a full (or undecodable) bucket of another identity
	claimEvict                    // every candidate is active: evict the fullest
)

// slotBump is a candidate slot a claim passed over: rewritten unchanged
// (value, with the cas read) before the claim, or, if it was missing,
// created empty (a placeholder), see the file comment. A bump of the first
// candidate by an identity that lives (or is about to live) in its second
// one also raises the first candidate's spill mark (mark): the value read
// is then written with the higher mark.
type slotBump struct {
	slot    int
	value   []byte
	cas     uint32
	missing bool

	spill    float64 // the slot's spill mark as read
	mark     bool    // raise the slot's spill mark to cover our state
	optional bool    // no claim needs this write: skip it unless the mark rises
}

// markFirst has r's first bump (the first candidate, as read) raise its
// spill mark: r's identity lives, or is about to live, past it. optional:
// the write is only needed if the mark rises (our state was found, no
// claim).
func (r *bucketRead) markFirst(first slotBump, optional bool) {
	r.bumps[0] = first
	r.bumps[0].mark, r.bumps[0].optional = true, optional
	r.nbumps = max(r.nbumps, 1)
}

// bucketRead is the result of reading a rule's bucket for one request.
type bucketRead struct {
	b      state.Bucket
	exists bool   // our valid bucket was read (else Take starts a full bucket)
	stored bool   // the key exists: write with cas (else create-if-absent)
	cas    uint32 // the cas to write with when stored

	// Bounded mode only.
	slot   int       // the slot holding our bucket, or the one to claim
	claim  claimKind // claimNone when our bucket was found
	spill  float64   // that slot's spill mark, kept by our write
	bumps  [state.Candidates - 1]slotBump
	nbumps int
}

// slotKey returns the key of one of a's rule's slots, "tb:{rule}:#{slot}",
// as a view of a reused buffer, valid until the next call (host calls copy
// their arguments).
func (a *application) slotKey(slot int) string {
	if a.slotKeyOf != slot+1 {
		a.slotBuf = appendInt(append(a.slotBuf[:0], a.rule.slotPrefix...), int64(slot))
		a.slotKeyOf = slot + 1
	}
	return bytesView(a.slotBuf)
}

// load reads a's bucket for a decision at now (phase 1, and again after
// every CAS mismatch) into a.read. It reports whether an undecodable value
// was met (to log) and shared-data errors (to fail open).
func (p *pluginContext) load(a *application, now float64) (corrupt bool, err error) {
	if a.rule.win != nil {
		return p.loadWindow(a, now)
	}
	if a.rule.maxKeys == 0 {
		a.read, corrupt, err = a.readBucket()
		return corrupt, err
	}
	return p.probe(a, now)
}

// readValue reads key into a's i-th value buffer (one per candidate slot,
// reused across requests, so reads allocate nothing) and returns the value,
// valid until the next read into that buffer.
func (a *application) readValue(i int, key string) (v []byte, cas, st uint32) {
	v, cas, st = getSharedData(key, a.vals[i])
	a.vals[i] = v
	return
}

// readBucket reads an exact-mode bucket. NOT_FOUND is not an error. A
// corrupt value is reported (corrupt true) and read as a new bucket that must
// be written with the returned cas.
func (a *application) readBucket() (r bucketRead, corrupt bool, err error) {
	v, cas, st := a.readValue(0, a.key)
	switch st {
	case statusOK:
	case statusNotFound:
		return bucketRead{}, false, nil
	default:
		return bucketRead{}, false, statusError(st)
	}
	b, derr := state.DecodeBucket(v)
	if derr != nil {
		return bucketRead{stored: true, cas: cas}, true, nil
	}
	return bucketRead{b: b, exists: true, stored: true, cas: cas}, false, nil
}

// probe finds a's bucket among its candidate slots, or plans a claim (see
// the file comment). Only reads: the claim is written by store.
func (p *pluginContext) probe(a *application, now float64) (corrupt bool, err error) {
	var (
		seen    [state.Candidates]slotBump
		decoded [state.Candidates]bool
		buckets [state.Candidates]state.Bucket
		free    [state.Candidates]bool // missing, empty or undecodable: nothing to lose
		n       int
		tref    float64
	)
	for i := 0; i < a.ncand; i++ {
		slot := a.cand[i]
		v, cas, st := a.readValue(i, a.slotKey(slot)) // seen[i] may keep v until store
		if st == statusNotFound {
			// Never written, so no later candidate holds our bucket either
			// (a claim of a later candidate needs this one to exist, and
			// keys are never deleted): stop here.
			seen[n] = slotBump{slot: slot, missing: true}
			free[n] = true
			n++
			break
		}
		if st != statusOK {
			return corrupt, statusError(st)
		}
		if len(v) == 0 { // a placeholder (see store): free
			if i == 0 {
				// A one-read claim: a placeholder carries no spill mark (it
				// is only ever written as a passed-over later candidate,
				// and a first candidate is marked only while it holds an
				// active bucket), so nobody spilled from it.
				a.read = bucketRead{stored: true, cas: cas, slot: slot, claim: claimReuse}
				return corrupt, nil
			}
			seen[n] = slotBump{slot: slot, value: v, cas: cas}
			free[n] = true
			n++
			continue
		}
		s, derr := state.DecodeSlot(v)
		if derr == nil && s.Fingerprint == a.fp && string(s.Identity) == a.identity {
			a.read = bucketRead{b: s.Bucket, exists: true, stored: true, cas: cas, slot: slot, spill: s.SpillUntil}
			if n > 0 && decoded[0] {
				// We live past our first candidate: keep its spill mark
				// covering our bucket (store raises it when needed).
				a.read.markFirst(seen[0], true)
			}
			return corrupt, nil
		}
		seen[n] = slotBump{slot: slot, value: v, cas: cas}
		if derr != nil {
			corrupt, free[n] = true, true
		} else {
			buckets[n] = s.Bucket
			decoded[n], seen[n].spill = true, s.SpillUntil
			tref = max(tref, s.Bucket.LastRefill)
		}
		n++
		if i == 0 && derr == nil && s.SpillUntil <= now && a.rule.tb.Level(s.Bucket, now) >= a.rule.tb.Burst {
			// A one-read claim: our first candidate holds a full bucket and
			// no live spill mark, so no bucket of ours can be in a later
			// candidate (file comment).
			a.read = bucketRead{stored: true, cas: cas, slot: slot, claim: claimReuse, spill: s.SpillUntil}
			return corrupt, nil
		}
	}
	if n == 0 { // no candidates: cannot happen for a bounded rule
		return corrupt, errors.New("no candidate slots")
	}
	// The target is the candidate closest to full, the first on ties: a
	// free or full one (all rank as full, so the first of them), else the
	// one holding the most tokens. Preferring the first candidate among
	// free ones keeps identities at their first candidate, found with one
	// get. The ranking uses the values read alone, at the reference time
	// tref (the latest last_refill among them, a time some worker's clock
	// has reached), not this worker's own now: workers that read the same
	// values choose the same target and write the same slots, so racing
	// claims of one identity resolve like any CAS contention (one wins, the
	// others then find its bucket) instead of invalidating each other's
	// claims round after round. Buckets refill at one rate, so the order at
	// tref is the order at now, up to buckets that are full at both.
	burst := a.rule.tb.Burst
	t, best := 0, math.Inf(-1)
	for i := 0; i < n; i++ {
		lvl := burst
		if !free[i] {
			lvl = min(a.rule.tb.Level(buckets[i], tref), burst)
		}
		if lvl > best {
			t, best = i, lvl
		}
	}
	r := bucketRead{stored: !seen[t].missing, cas: seen[t].cas, slot: seen[t].slot, spill: seen[t].spill}
	switch {
	case seen[t].missing:
		r.claim = claimMissing
	case free[t] || a.rule.tb.Level(buckets[t], now) >= burst:
		r.claim = claimReuse // nothing is lost: counted as a reuse
	default:
		r.claim = claimEvict
	}
	a.read = r
	a.read.setBumps(seen[:n], t)
	if t > 0 && decoded[0] {
		// We are about to live past our first candidate: its bump also
		// raises its spill mark.
		a.read.markFirst(seen[0], false)
	}
	return corrupt, nil
}

// setBumps records every seen candidate except index skip as a bump.
func (r *bucketRead) setBumps(seen []slotBump, skip int) {
	r.nbumps = 0
	for i := range seen {
		if i != skip {
			r.bumps[r.nbumps] = seen[i]
			r.nbumps++
		}
	}
}

// store writes a.next for the read in a.read: a CAS update, or in bounded
// mode a claim (bumps, then the claimed slot). It returns
// types.ErrorStatusCasMismatch when the caller must load again and retry.
func (p *pluginContext) store(a *application) error {
	r := &a.read
	if a.rule.maxKeys == 0 {
		if a.rule.win != nil {
			p.valBuf = state.EncodeWindow(p.valBuf[:0], &a.ws.next)
		} else {
			p.valBuf = state.EncodeBucket(p.valBuf[:0], a.next)
		}
		return writeKey(a.key, p.valBuf, r.stored, r.cas)
	}
	for i := 0; i < r.nbumps; i++ {
		b := &r.bumps[i]
		var err error
		switch {
		case b.missing:
			err = writeKey(a.slotKey(b.slot), nil, false, 0)
		case b.cas == 0:
			err = errZeroCAS
		case b.mark && spillUntil(a) > b.spill:
			// Raised to twice the horizon needed, so that the next requests
			// of an identity living past its first candidate find it
			// covered and skip this write (a later mark is always safe: it
			// only costs new identities a second read).
			mark := spillUntil(a) + a.dec.Reset
			if a.rule.win != nil {
				p.valBuf = state.RaiseWindowSpill(p.valBuf[:0], b.value, mark)
			} else {
				p.valBuf = state.RaiseSlotSpill(p.valBuf[:0], b.value, mark)
			}
			err = setSharedData(a.slotKey(b.slot), p.valBuf, b.cas)
		case b.optional:
		default:
			err = setSharedData(a.slotKey(b.slot), b.value, b.cas)
		}
		if err != nil {
			return err
		}
	}
	if r.stored && r.cas == 0 {
		return errZeroCAS
	}
	if a.rule.win != nil {
		p.valBuf = state.EncodeWindowSlot(p.valBuf[:0], a.fp, &a.ws.next, a.identity, r.spill)
	} else {
		p.valBuf = state.EncodeMarkedSlot(p.valBuf[:0], a.fp, a.next, a.identity, r.spill)
	}
	return writeKey(a.slotKey(r.slot), p.valBuf, r.stored, r.cas)
}

// spillUntil is the spill mark that covers a's state as store is about to
// write it: the time a bucket is full again, or a window holds no use.
// Until then a's identity must not claim its first candidate after one
// read.
func spillUntil(a *application) float64 {
	if a.rule.win != nil {
		return a.now + a.dec.Reset // Reset counts from the decision's now
	}
	return a.next.LastRefill + a.dec.Reset
}

// writeKey stores value under key: a conditional update with cas when the
// key existed at the read, else a creation that cannot overwrite a
// concurrent creation (see the file comment).
func writeKey(key string, value []byte, stored bool, cas uint32) error {
	if stored {
		return setSharedData(key, value, cas)
	}
	s, err := sentinelCAS()
	if err != nil {
		return err
	}
	return setSharedData(key, value, s)
}

// sentinelBuf receives the sentinel's value, which nobody needs.
var sentinelBuf []byte

// sentinelCAS writes the sentinel key and reads back its cas: a value the
// host issued after every read this request has made so far.
func sentinelCAS() (uint32, error) {
	if err := setSharedData(sentinelKey, sentinelValue, 0); err != nil {
		return 0, err
	}
	var cas, st uint32
	sentinelBuf, cas, st = getSharedData(sentinelKey, sentinelBuf)
	if st != statusOK {
		return 0, statusError(st)
	}
	if cas == 0 { // never issued by Envoy; would make the create unconditional
		return 0, errZeroCAS
	}
	return cas, nil
}

// refund gives a's cost back to the bucket this request already committed
// (the request was rejected later by another rule), capped at burst. It
// retries on CAS mismatch like an update. It reports whether the bucket now
// reflects no consumption by this request: true when the refund was written,
// and, in bounded mode, when the bucket is gone from its slot (reused or
// evicted: the identity's next request starts a full bucket, which already
// forgives this request's cost).
func (p *pluginContext) refund(a *application) bool {
	if a.rule.fleet != nil {
		return p.fleetRefund(a) // fleet.go
	}
	if a.rule.win != nil {
		return p.refundWindow(a)
	}
	burst := a.rule.tb.Burst
	for attempt := 0; attempt < maxAttempts; attempt++ {
		var (
			b     state.Bucket
			cas   uint32
			key   string
			spill float64 // the slot's spill mark, kept
		)
		if a.rule.maxKeys == 0 {
			r, _, err := a.readBucket()
			if err != nil || !r.exists {
				return false // gone or corrupt: nothing sensible to give back to
			}
			b, cas, key = r.b, r.cas, a.key
		} else {
			key = a.slotKey(a.read.slot)
			v, c, st := a.readValue(0, key)
			if st != statusOK {
				return false
			}
			s, err := state.DecodeSlot(v)
			if err != nil || s.Fingerprint != a.fp || string(s.Identity) != a.identity {
				return true // our bucket is gone: nothing left to refund
			}
			b, cas, spill = s.Bucket, c, s.SpillUntil
		}
		b.Tokens += a.cost
		if b.Tokens > burst {
			b.Tokens = burst
		}
		if a.rule.maxKeys == 0 {
			p.valBuf = state.EncodeBucket(p.valBuf[:0], b)
		} else {
			p.valBuf = state.EncodeMarkedSlot(p.valBuf[:0], a.fp, b, a.identity, spill)
			key = a.slotKey(a.read.slot)
		}
		err := setSharedData(key, p.valBuf, cas)
		if err == nil {
			return true
		}
		if !errors.Is(err, types.ErrorStatusCasMismatch) {
			return false
		}
	}
	return false
}
