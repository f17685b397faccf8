// Command hostcost prices single host calls: the empty plugin plus, on
// every request, the operations its plugin configuration lists (separated
// by spaces; an operation may repeat). Benchmarked against the empty plugin
// (BenchmarkEnvoyHostCallCost), each configuration's extra time is what
// those operations cost under the host, with the filter's own ways of
// making them: direct imports, returned values placed by an exported malloc
// in a reused buffer.
//
//	absent    read a request header that is not there (a call, no value returned)
//	header    read the request header x-api-key (a call and a value: a malloc re-entry)
//	pairs     read the whole request header map (proxy_get_header_map_pairs; copied, not decoded)
//	clock     the WASI realtime clock
//	get       a shared-data get of a present key (a call and a value)
//	set       a shared-data set (cas 0)
//	metric    increment a counter
//	response  replace a response header (in on_response_headers)
package main

import (
	"strings"
	"unsafe"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

func init() { proxywasm.SetVMContext(&vmContext{}) }

func main() {}

type op uint8

const (
	opAbsent op = iota
	opHeader
	opClock
	opGet
	opSet
	opMetric
	opResponse
	opPairs
)

var opNames = map[string]op{"absent": opAbsent, "header": opHeader, "clock": opClock,
	"get": opGet, "set": opSet, "metric": opMetric, "response": opResponse, "pairs": opPairs}

type vmContext struct{ types.DefaultVMContext }

func (*vmContext) NewPluginContext(uint32) types.PluginContext { return &pluginContext{} }

type pluginContext struct {
	types.DefaultPluginContext
	request, response []op
	metric            uint32
	http              httpContext
}

func (p *pluginContext) OnPluginStart(int) types.OnPluginStartStatus {
	cfg, err := proxywasm.GetPluginConfiguration()
	if err != nil && err != types.ErrorStatusNotFound {
		proxywasm.LogErrorf("hostcost: configuration: %v", err)
		return types.OnPluginStartStatusFailed
	}
	for _, name := range strings.Fields(string(cfg)) {
		o, ok := opNames[name]
		if !ok {
			proxywasm.LogErrorf("hostcost: unknown operation %q", name)
			return types.OnPluginStartStatusFailed
		}
		if o == opResponse {
			p.response = append(p.response, o)
		} else {
			p.request = append(p.request, o)
		}
	}
	p.metric = uint32(proxywasm.DefineCounterMetric("hostcost"))
	p.http.p = p
	if st := rawSetSharedData(strPtr(sharedKey), uint32(len(sharedKey)), strPtr(sharedValue), uint32(len(sharedValue)), 0); st != 0 {
		proxywasm.LogErrorf("hostcost: shared data: status %d", st)
		return types.OnPluginStartStatusFailed
	}
	return types.OnPluginStartStatusOK
}

// NewHttpContext returns the plugin's one HTTP context (it holds no stream
// state): a context allocated per stream would add the garbage collector's
// work to every price.
func (p *pluginContext) NewHttpContext(uint32) types.HttpContext { return &p.http }

type httpContext struct {
	types.DefaultHttpContext
	p *pluginContext
}

// sharedValue is the size of a token bucket group's value.
const (
	sharedKey   = "hostcost"
	sharedValue = "0123456789012345678901234567890123456789012345678901234567890123"
)

var (
	out   []byte // where returned values are copied
	value = "1000;t=1"
)

func (h *httpContext) OnHttpRequestHeaders(int, bool) types.Action {
	for _, o := range h.p.request {
		switch o {
		case opAbsent:
			take(rawGetHeaderMapValue(0, strPtr("x-absent"), 8, unsafe.Pointer(&ret.data), unsafe.Pointer(&ret.size)))
		case opHeader:
			take(rawGetHeaderMapValue(0, strPtr("x-api-key"), 9, unsafe.Pointer(&ret.data), unsafe.Pointer(&ret.size)))
		case opPairs:
			take(rawGetHeaderMapPairs(0, unsafe.Pointer(&ret.data), unsafe.Pointer(&ret.size)))
		case opClock:
			var ns uint64
			clockTimeGet(0, 1, &ns)
		case opGet:
			take(rawGetSharedData(strPtr(sharedKey), uint32(len(sharedKey)), unsafe.Pointer(&ret.data), unsafe.Pointer(&ret.size), unsafe.Pointer(&ret.cas)))
		case opSet:
			rawSetSharedData(strPtr(sharedKey), uint32(len(sharedKey)), strPtr(sharedValue), uint32(len(sharedValue)), 0)
		case opMetric:
			rawIncrementMetric(h.p.metric, 1)
		}
	}
	return types.ActionContinue
}

func (h *httpContext) OnHttpResponseHeaders(int, bool) types.Action {
	for range h.p.response {
		rawReplaceHeaderMapValue(2, strPtr("ratelimit"), 9, strPtr(value), uint32(len(value)))
	}
	return types.ActionContinue
}

// ret receives returned pointers, sizes and cas values.
var ret struct {
	data *byte
	size uint32
	cas  uint32
}

var scratch [4096]byte

// guestMalloc places every returned value in one reused buffer, as the
// filter does (values here are small).
//
//go:wasmexport malloc
func guestMalloc(size uint32) *byte {
	if size <= uint32(len(scratch)) {
		return &scratch[0]
	}
	b := make([]byte, size)
	return &b[0]
}

// take copies the returned value out, as the filter does.
func take(uint32) {
	if ret.data != nil && ret.size > 0 {
		out = append(out[:0], unsafe.Slice(ret.data, ret.size)...)
	}
	ret.data, ret.size = nil, 0
}

func strPtr(s string) unsafe.Pointer { return unsafe.Pointer(unsafe.StringData(s)) }

//go:wasmimport env proxy_get_header_map_value
func rawGetHeaderMapValue(mapType uint32, keyData unsafe.Pointer, keySize uint32, retData unsafe.Pointer, retSize unsafe.Pointer) uint32

//go:wasmimport env proxy_get_header_map_pairs
func rawGetHeaderMapPairs(mapType uint32, retData unsafe.Pointer, retSize unsafe.Pointer) uint32

//go:wasmimport env proxy_get_shared_data
func rawGetSharedData(keyData unsafe.Pointer, keySize uint32, retData unsafe.Pointer, retSize unsafe.Pointer, retCas unsafe.Pointer) uint32

//go:wasmimport env proxy_set_shared_data
func rawSetSharedData(keyData unsafe.Pointer, keySize uint32, valueData unsafe.Pointer, valueSize uint32, cas uint32) uint32

//go:wasmimport env proxy_replace_header_map_value
func rawReplaceHeaderMapValue(mapType uint32, keyData unsafe.Pointer, keySize uint32, valueData unsafe.Pointer, valueSize uint32) uint32

//go:wasmimport env proxy_increment_metric
func rawIncrementMetric(metricID uint32, offset int64) uint32

//go:wasmimport wasi_snapshot_preview1 clock_time_get
//go:noescape
func clockTimeGet(clockID uint32, precision uint64, t *uint64) uint32
