package filter

import (
	"errors"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-rl/sluice/shared/limiter"
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
//   - Bounded (max_keys N > 0, the default 65536): the rule keeps the
//     buckets of at most N identities (N rounded up to a multiple of 4), in
//     state.Groups(N) = N/4 keys "tb:{rule}:#{group}" of up to four buckets
//     each, with their owners' fingerprints and identities (binary,
//     shared/state group.go and slot.go). See "groups" below.
//   - Exact (max_keys 0): one key per identity, "tb:{rule}:{composite}",
//     value "{tokens}:{last_refill}" (the Fairvisor token bucket design). Memory grows with every
//     distinct identity.
//
// Concurrency. Workers update a bucket with compare-and-swap: get returns
// (value, cas); we compute the new state and set(value, cas). If another VM
// wrote in between, the host answers CAS_MISMATCH and we re-read (in bounded
// mode: the whole group), re-decide and retry, at most
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
// Bounded mode: groups. The rule's buckets live in a set-associative
// table (shared/state group.go): state.Groups(N) keys
// "tb:{rule}:#{group}", each holding up to state.Ways (4) buckets with
// their owners' fingerprints and identities, and one overflow bucket. An
// identity lives only in its group, state.GroupOf(fp, groups), in any way
// of it; fp is the identity's keyed fingerprint (hashseed.go). A request
// reads the group (one get) and writes it back whole (one set,
// conditioned on the read), so the bucket found, claimed or reused, or the
// overflow bucket drawn on, and the other ways copied through unchanged,
// are all decided on one snapshot of the group and committed atomically. A
// claim can therefore never give one identity two buckets: two workers that
// race to claim it read and write the same key, one CAS wins, and the
// other re-reads and finds the winner's bucket. The cost per request is the
// same in every case: one get and one set, whether the identity is known,
// new, or overflows.
//
// Finding a bucket (probe). The ways are looked at in order.
//   - A way holding our fingerprint and identity is our bucket (other
//     identities' records are skipped by their fingerprint, undecoded).
//   - Otherwise we claim a way: a way the group does not have yet, while
//     it has fewer than its ways (the group fills before anything is taken
//     over, so its memory reaches its bound early and stays there); else
//     the first that is free (an empty way, a value that does not decode)
//     or holds a bucket that has refilled to full (a full bucket carries no
//     information, so taking its way loses nothing).
//   - Otherwise every way holds an active (not full) bucket of another
//     identity. Active buckets are never taken: the request is decided by
//     the group's overflow bucket, a token bucket with the rule's own rate
//     and burst shared by every identity of the group that finds no way
//     (counted in sluice.rule.<rule>.overflowed).
//   - A claimed way's new bucket starts as a copy of the overflow bucket
//     (full when the group has none, or when it has refilled), never simply
//     full: an identity that drained the overflow bucket and then takes a
//     way that just became free continues from what it left.
//   - An update of our own bucket patches it where it lies in the group as
//     read; a claim splices its record into it, an overflow decision its
//     overflow record (state.PatchSlotBucket, state.Group's WithWay and
//     WithOverflow). The lookup, the claim and the writes are state.Group's,
//     shared with windowed rules (store_window.go); each algorithm passes
//     how its records decode and when its state is idle.
//
// The bound (docs/filter.md "Bounded memory" has it in full). Write L(X)
// for the level of identity X's own bucket while it holds a way, and of its
// group's overflow bucket while it does not. L(X) refills at the rule's
// rate up to burst and falls by every cost X is admitted; nothing raises it
// otherwise: a claim starts X's bucket at the overflow level, which is L(X)
// just before; X loses its way only when its bucket is full, so L(X) drops
// from burst to the overflow level; other identities only ever draw the
// overflow bucket down. So over any interval of length T, X is admitted at
// most burst + rate*T, what its own bucket alone would allow, and all the
// identities that overflow in one group together at most burst + rate*T.
// Identities that hold a way are decided exactly. What overflow costs is
// under-admission: the overflowing identities of a group share one limit.
//
// Racing with the previous owner. A way reused under an owner whose request
// is between its read and its write: the owner's CAS fails, its re-read no
// longer finds its bucket, and it claims a way or overflows.
//
// Fingerprint collisions. A way matches only when both the 64-bit
// fingerprint and the stored identity equal ours. Identities are at most
// state.MaxIdentity (256) bytes and stored whole, so distinct identities
// never share a bucket, except composites longer than 256 bytes, which are
// already replaced by "#{FNV-1a 64}#{first 64 bytes}" (keys.go): two of
// those share a bucket only on a 64-bit FNV collision (about 2^-64 per pair
// for accidental keys), in both storage modes.
//
// A bucket whose value does not decode (corrupt, or written by something
// else) is treated as a new, full bucket (exact mode) or as a free way
// (bounded mode; a group that does not parse as a whole reads as empty),
// but always overwritten with the cas of the read, so even that write is
// conditional.

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
// (hostcalls_direct.go).
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

// claimKind says how a bounded-mode write takes its way of the group.
type claimKind uint8

const (
	claimNone     claimKind = iota // our bucket was found in the way: plain CAS update
	claimNew                       // a way the group does not have yet (or a missing group)
	claimReuse                     // a free way, or a full (or undecodable) bucket of another identity
	claimOverflow                  // every way is active: decide on the group's overflow bucket
)

// bucketRead is the result of reading a rule's bucket for one request.
type bucketRead struct {
	b      state.Bucket
	exists bool   // a valid state was read: ours, or (claims, overflow decisions) the overflow state (else Take starts a full bucket)
	stored bool   // the key exists: write with cas (else create-if-absent)
	cas    uint32 // the cas to write with when stored

	// Bounded mode only: the way holding our bucket, or the one to claim
	// (a.grp holds the group as read; -1 for an overflow decision).
	way   int
	claim claimKind
	// sharers is the overflow record's sketch of the identities sharing it,
	// with ours added (claimOverflow).
	sharers uint64
	// dropOverflow: a claim finds the group's overflow record idle (full,
	// or undecodable), which is what no record means: the write leaves it
	// out, so groups carry one only while it holds information.
	dropOverflow bool
}

// groupKey returns the key of a's group, "tb:{rule}:#{group}", as a view of
// a reused buffer, valid until the next call (host calls copy their
// arguments).
func (a *application) groupKey() string {
	if a.slotKeyOf != a.group+1 {
		a.slotBuf = appendDecimal(append(a.slotBuf[:0], a.rule.groupPrefix...), int64(a.group))
		a.slotKeyOf = a.group + 1
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
		return a.readBucket(&a.read)
	}
	return p.probe(a, now)
}

// readValue reads key into a's value buffer (reused across requests, so
// reads allocate nothing) and returns the value, valid until the next
// read.
func (a *application) readValue(key string) (v []byte, cas, st uint32) {
	v, cas, st = getSharedData(key, a.val)
	a.val = v
	return
}

// Reads are returned through a *bucketRead (usually &a.read) rather than
// as values: in wasm a struct result is written to the stack and copied,
// and every copy of more than 16 bytes is a memory.copy (under Envoy's
// fast JIT a call into the runtime).

// readBucket reads an exact-mode bucket into r. NOT_FOUND is not an error.
// A corrupt value is reported (corrupt true) and read as a new bucket that
// must be written with the cas read.
func (a *application) readBucket(r *bucketRead) (corrupt bool, err error) {
	v, err := a.readKey(a.key, r)
	if err != nil || !r.stored || len(v) == 0 { // empty: forgotten by a reset (resets.go)
		return false, err
	}
	b, derr := state.DecodeBucket(v)
	if derr != nil {
		return true, nil
	}
	r.b, r.exists = b, true
	return false, nil
}

// readKey reads key into a's value buffer and returns the value; r becomes,
// when the key exists, a read to be written back with its cas (stored).
// NOT_FOUND is not an error: it gives a read that creates the key.
func (a *application) readKey(key string, r *bucketRead) (v []byte, err error) {
	v, cas, st := a.readValue(key)
	switch st {
	case statusOK:
		r.reset(true, cas)
		return v, nil
	case statusNotFound:
		r.reset(false, 0)
		return nil, nil
	}
	r.reset(false, 0)
	return nil, statusError(st)
}

// reset makes r the read of a key: stored with cas, or to be created. Field
// by field: clearing the struct whole would be a memory.fill, a runtime
// call under the fast JIT (TestBucketReadResetClearsEveryField).
func (r *bucketRead) reset(stored bool, cas uint32) {
	r.b = state.Bucket{}
	r.exists, r.stored, r.cas = false, stored, cas
	r.way, r.claim, r.sharers, r.dropOverflow = 0, 0, 0, false
}

// readGroup reads a's group into a.grp (aliasing a.val, valid until the
// next read) and into r how the group must be written back: stored (with
// cas) or created. A missing group reads as one with no ways, and so does
// a group value that does not parse (corrupt true: the write replaces it
// whole); a value of an earlier version reads as one way (SplitGroup).
func (a *application) readGroup(r *bucketRead) (corrupt bool, err error) {
	v, err := a.readKey(a.groupKey(), r)
	if err != nil || !r.stored {
		a.grp.Reset()
		return false, err
	}
	return !a.grp.Read(v), nil // corrupt: replaced whole by the write
}

// probe finds a's bucket in its group, or plans a claim (see the file
// comment). Only reads: store writes the group.
func (p *pluginContext) probe(a *application, now float64) (corrupt bool, err error) {
	r := &a.read
	corrupt, err = a.readGroup(r)
	if err != nil {
		return corrupt, err
	}
	var s state.Slot
	if i := a.grp.Find(a.fp, a.identity, func(rec []byte) (uint64, []byte, bool) {
		derr := state.DecodeSlotInto(rec, &s)
		return s.Fingerprint, s.Identity, derr == nil
	}); i >= 0 {
		r.b, r.exists, r.way = s.Bucket, true, i
		return corrupt, nil
	}
	// Not found: a claimed way's bucket and an overflow decision both start
	// from the overflow bucket (none: a full bucket).
	ovf := a.grp.Overflow()
	sharers, ob, oerr := state.DecodeOverflow(ovf)
	r.b, r.exists = ob, oerr == nil
	corrupt = corrupt || (oerr != nil && len(ovf) > 0)
	idle := !r.exists || a.rule.tb.Level(ob, now) >= a.rule.tb.Burst
	// A way whose bucket has refilled to full may be reused without loss.
	tb := &a.rule.tb
	if !a.claim(r, &corrupt, func(rec []byte) (decoded, idle bool) {
		s, derr := state.DecodeSlot(rec)
		return derr == nil, derr == nil && tb.Level(s.Bucket, now) >= tb.Burst
	}) {
		if idle {
			sharers = 0 // the overflow bucket was idle: a new set of sharers
		}
		r.way, r.claim, r.sharers = -1, claimOverflow, sharers|state.SharerBit(a.fp)
	} else {
		r.dropOverflow = idle && len(ovf) > 0
	}
	return corrupt, nil
}

// claim plans, for a new identity, the way of a's group it takes
// (state.Group.Claim: a way the group does not have yet while it has room,
// else the first free one, idle deciding by the rule's level). It reports
// false when every way holds an active state of another identity.
func (a *application) claim(r *bucketRead, corrupt *bool, idle func(rec []byte) (decoded, idle bool)) bool {
	way, isNew, bad := a.grp.Claim(a.rule.ways, idle)
	*corrupt = *corrupt || bad
	if way < 0 {
		return false
	}
	r.way, r.claim = way, claimReuse
	if isNew {
		r.claim = claimNew
	}
	return true
}

// store writes a.next for the read in a.read: a CAS update of the exact
// key, or in bounded mode of the group with our way replaced. It returns
// types.ErrorStatusCasMismatch when the caller must load again and retry.
func (p *pluginContext) store(a *application) error {
	r := &a.read
	if r.stored && r.cas == 0 {
		return errZeroCAS
	}
	if a.rule.maxKeys == 0 {
		if a.rule.win != nil {
			p.valBuf = state.EncodeWindow(p.valBuf[:0], &a.ws.next)
		} else {
			p.valBuf = state.EncodeBucket(p.valBuf[:0], a.next)
		}
		return writeKey(a.key, p.valBuf, r.stored, r.cas)
	}
	if r.claim == claimOverflow {
		if a.rule.win != nil {
			p.recBuf = state.EncodeWindowOverflow(p.recBuf[:0], r.sharers, &a.ws.next)
		} else {
			p.recBuf = state.EncodeOverflow(p.recBuf[:0], r.sharers, a.next)
		}
		return p.writeOverflow(a, r.stored, r.cas)
	}
	if a.rule.win != nil {
		p.recBuf = state.EncodeWindowSlot(p.recBuf[:0], a.fp, &a.ws.next, a.identity)
	} else {
		if r.claim == claimNone && r.exists && state.PatchSlotBucket(a.grp.Way(r.way), a.next) {
			// Our record, updated where it lies in the group as read
			// (its ways alias the value): the common case, no re-encoding.
			return writeKey(a.groupKey(), a.grp.Value(), true, r.cas)
		}
		p.recBuf = state.EncodeSlot(p.recBuf[:0], a.fp, a.next, a.identity)
	}
	if r.dropOverflow {
		return writeKey(a.groupKey(), a.grp.WithoutOverflow(&p.valBuf, r.way, p.recBuf), r.stored, r.cas)
	}
	return p.writeWay(a, r.way, r.stored, r.cas)
}

// writeWay writes a's group as read with way replaced by the record in
// p.recBuf: in place when the record keeps its length (a window's update,
// mostly), else spliced into p.valBuf (state.Group.WithWay).
func (p *pluginContext) writeWay(a *application, way int, stored bool, cas uint32) error {
	return writeKey(a.groupKey(), a.grp.WithWay(&p.valBuf, way, p.recBuf), stored, cas)
}

// writeOverflow writes a's group as read with its overflow record replaced
// by the one in p.recBuf: in place when the group has one of that length
// (a token bucket's, always once written), else spliced into p.valBuf.
func (p *pluginContext) writeOverflow(a *application, stored bool, cas uint32) error {
	return writeKey(a.groupKey(), a.grp.WithOverflow(&p.valBuf, p.recBuf), stored, cas)
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
// and, in bounded mode, when the bucket is gone from its group (reused: it
// was full, which already forgave this request's cost). A request decided
// by its group's overflow bucket is refunded there (refundOverflow).
func (p *pluginContext) refund(a *application) bool {
	if a.rule.fleet != nil {
		return p.fleetRefund(a) // fleet.go
	}
	if a.overflowed {
		return p.refundOverflow(a)
	}
	if a.rule.win != nil {
		return p.refundWindow(a)
	}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		var err error
		if a.rule.maxKeys == 0 {
			var r bucketRead
			if _, rerr := a.readBucket(&r); rerr != nil || !r.exists {
				return false // gone or corrupt: nothing sensible to give back to
			}
			p.valBuf = state.EncodeBucket(p.valBuf[:0], a.refunded(r.b))
			err = setSharedData(a.key, p.valBuf, r.cas)
		} else {
			r, way, s, ok := p.findOwnWay(a)
			if !ok {
				return false
			}
			if way < 0 {
				return true // our bucket is gone: nothing left to refund
			}
			p.recBuf = state.EncodeSlot(p.recBuf[:0], a.fp, a.refunded(s.Bucket), a.identity)
			err = p.writeWay(a, way, true, r.cas)
		}
		if err == nil {
			return true
		}
		if !errors.Is(err, types.ErrorStatusCasMismatch) {
			return false
		}
	}
	return false
}

// refunded is b with a's cost given back, capped at burst.
func (a *application) refunded(b state.Bucket) state.Bucket {
	b.Tokens = min(b.Tokens+a.cost, a.rule.tb.Burst)
	return b
}

// findOwnWay reads a's group and finds a's bucket in it: its way (-1 when
// the bucket is gone) and slot. ok is false when the group cannot be read
// (a shared-data error, a missing or undecodable group, cas 0).
func (p *pluginContext) findOwnWay(a *application) (r bucketRead, way int, s state.Slot, ok bool) {
	corrupt, err := a.readGroup(&r)
	if err != nil || corrupt || !r.stored || r.cas == 0 {
		return r, -1, s, false
	}
	way = a.grp.Find(a.fp, a.identity, func(rec []byte) (uint64, []byte, bool) {
		derr := state.DecodeSlotInto(rec, &s)
		return s.Fingerprint, s.Identity, derr == nil
	})
	return r, way, s, true
}

// refundOverflow gives a's cost back to its group's overflow bucket or
// window (capped like any refund), retrying on CAS mismatch. A group
// without a readable overflow record has nothing to give back to.
func (p *pluginContext) refundOverflow(a *application) bool {
	for attempt := 0; attempt < maxAttempts; attempt++ {
		var r bucketRead
		corrupt, err := a.readGroup(&r)
		if err != nil || corrupt || !r.stored || r.cas == 0 {
			return false
		}
		if a.rule.win != nil {
			w := &a.ws.read // scratch: the request's decision is done
			sharers, derr := state.DecodeWindowOverflow(a.grp.Overflow(), w)
			if derr != nil || !limiter.RefundWindow(w, a.ws.next.Start, a.rule.win.PeriodSeconds(), a.cost) {
				return true // gone, or the period has left it
			}
			p.recBuf = state.EncodeWindowOverflow(p.recBuf[:0], sharers, w)
		} else {
			sharers, b, derr := state.DecodeOverflow(a.grp.Overflow())
			if derr != nil {
				return true
			}
			p.recBuf = state.EncodeOverflow(p.recBuf[:0], sharers, a.refunded(b))
		}
		err = p.writeOverflow(a, true, r.cas)
		if err == nil {
			return true
		}
		if !errors.Is(err, types.ErrorStatusCasMismatch) {
			return false
		}
	}
	return false
}
