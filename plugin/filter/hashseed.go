package filter

import (
	"crypto/rand"
	"errors"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-rl/sluice/shared/state"
)

// The deployment's hash key. Bounded rules place an identity in its group
// by its fingerprint (store.go); an unkeyed fingerprint would let anyone
// with this source compute identities that share a victim's group. So
// fingerprints are SipHash-2-4 under a 128-bit key (shared/state
// siphash.go) that differs per deployment: created at random (crypto/rand,
// which WASI random_get serves) by the first VM that finds none, under
// hashSeedKey in shared data, and adopted by every other VM of the vm_id.
// Every VM reads it once, in on_vm_start (or, if that failed, at the next
// on_configure or request, at most once a second) and keeps it for its
// life: a configuration update never changes it, and neither does a new
// VM, since shared data outlives the VMs of a vm_id while any of them runs.
//
// Creation uses the store's create-if-absent (writeKey: a sentinel cas),
// so two VMs that both found no key cannot both write one: the second
// write is a CAS mismatch, and that VM re-reads and adopts the stored key.
// A value of the wrong length (not written by this code) is replaced the
// same way, conditioned on its cas.
//
// Without the key a bounded rule cannot place anyone: it fails open
// (counted in sluice.rule.<rule>.fail_open and sluice.hash_seed_failed).
// Exact rules (max_keys 0) and fleet ids do not use it.

const hashSeedKey = "sluice:hash-seed"

// errNoHashSeed is the fail-open cause of a bounded rule without the key.
var errNoHashSeed = errors.New("hash seed unavailable")

// seedRetrySeconds spaces the attempts to read the key after a failure.
const seedRetrySeconds = 1

// OnVMStart is proxy_on_vm_start: read (or create) the hash key. It never
// fails the VM: without the key only bounded rules are affected, and they
// try again later.
func (vm *vmContext) OnVMStart(int) (ok types.OnVMStartStatus) {
	defer func() {
		if r := recover(); r != nil {
			vm.recovered("on_vm_start", r)
		}
		ok = types.OnVMStartStatusOK
	}()
	vm.loadHashSeed()
	return types.OnVMStartStatusOK
}

// loadHashSeed reads the deployment's hash key into vm.hashKey, creating
// it if there is none, and reports whether the VM has it. After a failure
// it tries again at most once per seedRetrySeconds.
func (vm *vmContext) loadHashSeed() bool {
	if vm.seedOK {
		return true
	}
	now := nowSeconds()
	if vm.seedTry != 0 && now-vm.seedTry < seedRetrySeconds && now >= vm.seedTry {
		return false
	}
	k, err := vm.readOrCreateSeed()
	if err != nil {
		vm.seedTry = now
		vm.globals().hashSeedFailed.inc()
		vm.logLimited(logFailOpen, "sluice: cannot read or create the hash seed "+hashSeedKey+" ("+err.Error()+"); bounded rules fail open until it can")
		return false
	}
	vm.hashKey, vm.seedOK = k, true
	return true
}

// readOrCreateSeed returns the stored hash key, or stores a new random one
// (see the file comment).
func (vm *vmContext) readOrCreateSeed() (state.HashKey, error) {
	for attempt := 0; attempt < maxAttempts; attempt++ {
		v, cas, st := getSharedData(hashSeedKey, vm.seedBuf)
		vm.seedBuf = v
		if st != statusOK && st != statusNotFound {
			return state.HashKey{}, statusError(st)
		}
		if st == statusOK {
			if k, ok := state.HashKeyFrom(v); ok {
				return k, nil
			}
			if cas == 0 {
				return state.HashKey{}, errZeroCAS
			}
		}
		var seed [state.HashKeyLen]byte
		if _, err := rand.Read(seed[:]); err != nil {
			return state.HashKey{}, err
		}
		err := writeKey(hashSeedKey, seed[:], st == statusOK, cas)
		if err == nil {
			k, _ := state.HashKeyFrom(seed[:])
			logInfo("sluice: created this deployment's hash seed")
			return k, nil
		}
		if !errors.Is(err, types.ErrorStatusCasMismatch) {
			return state.HashKey{}, err
		}
		// Another VM stored one first: read and adopt it.
	}
	return state.HashKey{}, errRetriesExhausted
}
