package wasmhost

import (
	"math/rand/v2"
	"sort"
	"sync"
)

// SharedData is the proxy-wasm shared key/value store of one vm_id, with
// exactly the semantics of proxy-wasm-cpp-host (which Envoy uses as is):
//
//   - one mutex guards everything (every get/set is a global lock);
//   - one uint32 CAS counter for the whole store, starting at 1; every
//     successful set gives the key the counter's current value and advances
//     it, skipping 0 when it wraps;
//   - get on a missing key returns NotFound;
//   - set with cas 0 overwrites unconditionally;
//   - set on a missing key succeeds whatever cas is passed (there is no
//     create-if-absent);
//   - set on an existing key with a nonzero cas different from the key's
//     returns CasMismatch and changes nothing;
//   - there is no delete and no TTL: keys live as long as the store.
//
// Faults (InjectFaults) apply to the guest's proxy_get_shared_data and
// proxy_set_shared_data calls only; the Go methods below always tell the
// truth, so tests can inspect the store while faults are on.
type SharedData struct {
	mu      sync.Mutex
	m       map[string]*sharedEntry
	nextCAS uint32 // the value the next successful set takes; never 0
	bytes   int

	faults   Faults
	faultsOn bool
	rng      *rand.Rand
	injected FaultCounts
}

// sharedEntry is one key's value and cas. A set overwrites the value in
// place (reusing its capacity) and every read copies it under the lock: the
// store allocates nothing per write, like Envoy's, whose std::string
// assignment needs no garbage collector. (A fresh slice per set made the
// host's own collector scan a million-key map in the benchmarks: a cost of
// this host, not of Envoy, charged to the plugin.)
type sharedEntry struct {
	value []byte
	cas   uint32
}

// Faults configures fault injection on the guest's shared-data calls.
type Faults struct {
	// GetFailRate is the probability in [0, 1] that a get fails with
	// GetFailStatus (default StatusInternalFailure) before looking at the key.
	GetFailRate   float64
	GetFailStatus Status
	// SetFailRate is the probability that a set fails with SetFailStatus
	// (default StatusInternalFailure) without writing.
	SetFailRate   float64
	SetFailStatus Status
	// CASMismatchRate is the probability that a set with a nonzero cas on an
	// existing key returns CasMismatch even though the cas matches (as if
	// another worker had written in between). Sets with cas 0 and sets on
	// missing keys are not affected: they cannot mismatch in Envoy either.
	CASMismatchRate float64
	// Seed seeds the fault RNG; the same seed and the same sequence of calls
	// give the same faults.
	Seed int64
}

// FaultCounts counts the faults injected since the last InjectFaults.
type FaultCounts struct {
	GetFailures   int
	SetFailures   int
	CASMismatches int
}

// NewSharedData returns an empty store. A Host creates its own unless
// Config.SharedData supplies one (to share a vm_id's data between Hosts).
func NewSharedData() *SharedData {
	return &SharedData{m: make(map[string]*sharedEntry), nextCAS: 1}
}

// setNextCAS is a test hook: the next successful set takes cas (0 is
// treated as the value after a wrap, i.e. 1).
func (s *SharedData) setNextCAS(cas uint32) {
	s.mu.Lock()
	if cas == 0 {
		cas = 1
	}
	s.nextCAS = cas
	s.mu.Unlock()
}

// takeCAS returns the counter value for a successful set and advances the
// counter, skipping 0 (proxy-wasm-cpp-host's nextCas). s.mu must be held.
func (s *SharedData) takeCAS() uint32 {
	cas := s.nextCAS
	s.nextCAS++
	if s.nextCAS == 0 {
		s.nextCAS++
	}
	return cas
}

// Get returns the key's value (a copy) and cas, or StatusNotFound.
func (s *SharedData) Get(key string) (value []byte, cas uint32, status Status) {
	s.mu.Lock()
	e := s.m[key]
	if e == nil {
		s.mu.Unlock()
		return nil, 0, StatusNotFound
	}
	value, cas = append([]byte(nil), e.value...), e.cas
	s.mu.Unlock()
	return value, cas, StatusOK
}

// Set stores value under key following the CAS rules above.
func (s *SharedData) Set(key string, value []byte, cas uint32) Status {
	return s.set(key, nil, value, cas, false)
}

// get is the guest's proxy_get_shared_data: the value is appended to dst
// (under the lock: sets overwrite values in place).
func (s *SharedData) get(key []byte, dst []byte) ([]byte, uint32, Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.faultsOn && s.faults.GetFailRate > 0 && s.rng.Float64() < s.faults.GetFailRate {
		s.injected.GetFailures++
		return dst, 0, failStatus(s.faults.GetFailStatus)
	}
	e := s.m[string(key)]
	if e == nil {
		return dst, 0, StatusNotFound
	}
	return append(dst, e.value...), e.cas, StatusOK
}

// set stores a copy of value. The key is given as key (string) or keyBytes
// (guest memory, copied only if the key is new).
func (s *SharedData) set(key string, keyBytes []byte, value []byte, cas uint32, guest bool) Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	if guest && s.faultsOn && s.faults.SetFailRate > 0 && s.rng.Float64() < s.faults.SetFailRate {
		s.injected.SetFailures++
		return failStatus(s.faults.SetFailStatus)
	}
	var e *sharedEntry
	if keyBytes != nil {
		e = s.m[string(keyBytes)]
	} else {
		e = s.m[key]
	}
	if e != nil {
		if cas != 0 && cas != e.cas {
			return StatusCasMismatch
		}
		if guest && cas != 0 && s.faultsOn && s.faults.CASMismatchRate > 0 && s.rng.Float64() < s.faults.CASMismatchRate {
			s.injected.CASMismatches++
			return StatusCasMismatch
		}
		s.bytes += len(value) - len(e.value)
		e.value = append(e.value[:0], value...)
		e.cas = s.takeCAS()
		return StatusOK
	}
	if keyBytes != nil {
		key = string(keyBytes)
	}
	s.m[key] = &sharedEntry{value: append([]byte(nil), value...), cas: s.takeCAS()}
	s.bytes += len(key) + len(value)
	return StatusOK
}

func failStatus(st Status) Status {
	if st == StatusOK {
		return StatusInternalFailure
	}
	return st
}

// Keys returns the keys, sorted.
func (s *SharedData) Keys() []string {
	s.mu.Lock()
	keys := make([]string, 0, len(s.m))
	for k := range s.m {
		keys = append(keys, k)
	}
	s.mu.Unlock()
	sort.Strings(keys)
	return keys
}

// Len returns the number of keys.
func (s *SharedData) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// Bytes returns the sum of len(key)+len(value) over all keys.
func (s *SharedData) Bytes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// InjectFaults replaces the fault configuration and reseeds the fault RNG
// (the zero Faults turns injection off) and resets the FaultCounts.
func (s *SharedData) InjectFaults(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
	s.faultsOn = f.GetFailRate > 0 || f.SetFailRate > 0 || f.CASMismatchRate > 0
	seed := uint64(f.Seed)
	s.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	s.injected = FaultCounts{}
}

// Injected returns how many faults were injected since the last InjectFaults.
func (s *SharedData) Injected() FaultCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.injected
}
