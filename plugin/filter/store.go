package filter

import (
	"errors"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-rl/sluice/shared/state"
)

// The bucket store: token buckets in proxy-wasm shared data.
//
// One entry per bucket, key "tb:{rule}:{composite_key}" (state.BucketKey),
// value "{tokens}:{last_refill}" (state.EncodeBucket). Shared data is one map
// per vm_id shared by every worker thread's VM (and Envoy's canary VM), and
// survives configuration updates, so buckets do too. There is no timer: a
// bucket is refilled lazily by limiter.TokenBucket.Take when a request reads
// it, with the time from time.Now() (WASI clock_time_get, i.e. Envoy's clock).
//
// Concurrency. Workers update a bucket with compare-and-swap: get returns
// (value, cas); we compute the new state and set(value, cas). If another VM
// wrote in between, the host answers CAS_MISMATCH and we re-read, re-decide
// and retry, at most maxAttempts times. Running out of attempts, or any other
// shared-data error, fails open for that rule (see plugin.go).
//
// Creating a bucket. Envoy's shared data has no create-if-absent: a set on a
// MISSING key succeeds whatever cas is passed, and cas 0 means
// "unconditional". The obvious "get: NOT_FOUND -> set(key, v, 0)" lets two
// VMs that both saw NOT_FOUND both succeed, the second overwriting the first
// VM's write: a prototype over-admitted in 19 of 200 four-VM trials.
//
// So we create with a cas that cannot belong to any concurrent creation. On
// NOT_FOUND we (1) blind-write a sentinel key (sentinelKey; its content is
// irrelevant) and (2) read it back: its cas S was issued by the host's global
// counter at a write that happened AFTER our NOT_FOUND read (our own sentinel
// write, or a later one by another VM). (3) We create the bucket with
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
// around (2^32 writes) between the sentinel write and our bucket set, a
// window of a few host calls, so that the other VM's write was given exactly
// S again. That is why the sentinel is rewritten on every creation rather
// than written once and cached: a cached S could be days old and the counter
// can wrap in hours on a busy proxy. Creations are off the hot path (once per
// new client key), and two extra host calls there are cheap.
//
// A bucket whose value does not decode (corrupt, or written by something
// else) is treated as a new, full bucket but updated with the cas from the
// get, so the overwrite is still conditional.

const (
	// maxAttempts bounds the set attempts per rule per request (the first
	// one plus retries after CAS mismatches). A VM loses a round only when
	// another VM won one, and once the bucket is empty requests are decided
	// without writing, so contention is self-limiting; the bound only stops
	// pathological livelock. Exhaustion fails open, so it is generous.
	maxAttempts = 32

	// sentinelKey is the shared-data key whose cas seeds bucket creation.
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

// errRetriesExhausted is the fail-open cause when every attempt hit a CAS
// mismatch.
var errRetriesExhausted = errors.New("cas retries exhausted")

// bucketRead is the result of reading a bucket.
type bucketRead struct {
	b      state.Bucket
	exists bool   // a valid bucket was read (else Take starts a full bucket)
	stored bool   // the key exists (valid or corrupt): write with cas
	cas    uint32 // the cas to write with when stored
}

// readBucket reads a bucket. NOT_FOUND is not an error. A corrupt value is
// reported (corrupt true) and read as a new bucket that must be written with
// the returned cas.
func readBucket(key string) (r bucketRead, corrupt bool, err error) {
	v, cas, st := getSharedData(key)
	switch st {
	case statusOK:
	case statusNotFound:
		return bucketRead{}, false, nil
	default:
		return bucketRead{}, false, statusError(st)
	}
	b, derr := decodeBucket(v)
	if derr != nil {
		return bucketRead{stored: true, cas: cas}, true, nil
	}
	return bucketRead{b: b, exists: true, stored: true, cas: cas}, false, nil
}

// writeBucket stores value for a bucket read as r: a conditional update with
// r.cas when the key existed, else a creation that cannot overwrite a
// concurrent creation (see the package comment above). It returns
// types.ErrorStatusCasMismatch when the caller must re-read and retry.
func writeBucket(key string, value []byte, r bucketRead) error {
	if r.stored {
		return proxywasm.SetSharedData(key, value, r.cas)
	}
	s, err := sentinelCAS()
	if err != nil {
		return err
	}
	return proxywasm.SetSharedData(key, value, s)
}

// sentinelCAS writes the sentinel key and reads back its cas: a value the
// host issued after every read this request has made so far.
func sentinelCAS() (uint32, error) {
	if err := proxywasm.SetSharedData(sentinelKey, sentinelValue, 0); err != nil {
		return 0, err
	}
	_, cas, st := getSharedData(sentinelKey)
	if st != statusOK {
		return 0, statusError(st)
	}
	if cas == 0 { // never issued by Envoy; would make the create unconditional
		return 0, errors.New("sentinel has cas 0")
	}
	return cas, nil
}

// refund gives cost tokens back to a bucket this request already committed
// (the request was rejected later by another rule), capped at burst. It
// retries on CAS mismatch like an update. It reports whether the refund was
// written.
func refund(key string, cost, burst float64, buf *[]byte) bool {
	for attempt := 0; attempt < maxAttempts; attempt++ {
		r, _, err := readBucket(key)
		if err != nil || !r.exists {
			return false // gone or corrupt: nothing sensible to give back to
		}
		b := r.b
		b.Tokens += cost
		if b.Tokens > burst {
			b.Tokens = burst
		}
		*buf = encodeBucket((*buf)[:0], b)
		err = proxywasm.SetSharedData(key, *buf, r.cas)
		if err == nil {
			return true
		}
		if !errors.Is(err, types.ErrorStatusCasMismatch) {
			return false
		}
	}
	return false
}
