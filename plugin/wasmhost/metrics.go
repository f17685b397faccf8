package wasmhost

import (
	"math"
	"sync"
	"sync/atomic"
)

// Metric types as in the proxy-wasm ABI; a metric id carries its type in
// its two low bits, as in Envoy.
const (
	metricCounter   = 0
	metricGauge     = 1
	metricHistogram = 2
)

type metricKey struct {
	typ  uint32
	name string
}

// metric is one stat, shared by name across the VMs of a Host (Envoy stats
// live in one process-wide store: every worker's VM increments the same
// counter).
type metric struct {
	name string
	typ  uint32
	v    atomic.Int64 // counter or gauge value

	mu   sync.Mutex // histogram
	hist HistogramStats
}

// HistogramStats summarizes the values recorded in a histogram.
type HistogramStats struct {
	Count    uint64
	Sum      uint64
	Min, Max uint64
	Last     uint64
}

type metricRegistry struct {
	mu sync.Mutex
	m  map[metricKey]*metric
}

func (r *metricRegistry) init() { r.m = map[metricKey]*metric{} }

func (r *metricRegistry) get(typ uint32, name string) *metric {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := metricKey{typ, name}
	m := r.m[k]
	if m == nil {
		m = &metric{name: name, typ: typ}
		r.m[k] = m
	}
	return m
}

func (r *metricRegistry) value(name string) (uint64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m := r.m[metricKey{metricCounter, name}]; m != nil {
		return uint64(m.v.Load()), true
	}
	if m := r.m[metricKey{metricGauge, name}]; m != nil {
		return uint64(m.v.Load()), true
	}
	return 0, false
}

func (r *metricRegistry) all() map[string]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]uint64, len(r.m))
	for k, m := range r.m {
		if k.typ != metricHistogram {
			out[k.name] += uint64(m.v.Load())
		}
	}
	return out
}

func (r *metricRegistry) histogram(name string) (HistogramStats, bool) {
	r.mu.Lock()
	m := r.m[metricKey{metricHistogram, name}]
	r.mu.Unlock()
	if m == nil {
		return HistogramStats{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.hist, true
}

func (m *metric) record(v uint64) {
	m.mu.Lock()
	h := &m.hist
	if h.Count == 0 || v < h.Min {
		h.Min = v
	}
	if v > h.Max {
		h.Max = v
	}
	h.Count++
	if h.Sum+v < h.Sum {
		h.Sum = math.MaxUint64
	} else {
		h.Sum += v
	}
	h.Last = v
	m.mu.Unlock()
}

// defineMetric returns the VM-local id of the metric (typ, name), defining
// it on first use. Guarded by vm.sem.
func (vm *VM) defineMetric(typ uint32, name []byte) uint32 {
	if id, ok := vm.metricIDs[metricKey{typ, string(name)}]; ok {
		return id
	}
	n := string(name)
	m := vm.h.metrics.get(typ, n)
	id := uint32(len(vm.metricByID))<<2 | typ
	vm.metricByID = append(vm.metricByID, m)
	vm.metricIDs[metricKey{typ, n}] = id
	return id
}

func (vm *VM) metric(id uint32) *metric {
	i := int(id >> 2)
	if i >= len(vm.metricByID) {
		return nil
	}
	m := vm.metricByID[i]
	if m.typ != id&3 {
		return nil
	}
	return m
}
