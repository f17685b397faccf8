//go:build !wasip1

package filter

import (
	"errors"
	"strings"
	"unsafe"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
	"github.com/sluice-rl/sluice/plugin/headermap"
)

// Native builds (unit tests, and the workload plugin/default.pgo is taken
// from) serve the raw calls of hostcalls_direct.go through the SDK, with
// the ABI's signatures and conventions: a returned value is placed with
// allocReturned (as the host places it with the module's malloc) and its
// pointer and size written where the caller asked. The filter only ever
// runs as wasm, see hostcalls_wasip1.go.

func rawGetHeaderMapValue(mapType uint32, keyData unsafe.Pointer, keySize uint32, retData, retSize unsafe.Pointer) uint32 {
	name := guestString(keyData, keySize)
	var v string
	var err error
	switch mapType {
	case mapTypeRequestHeaders:
		v, err = proxywasm.GetHttpRequestHeader(name)
	case mapTypeResponseHeaders:
		v, err = proxywasm.GetHttpResponseHeader(name)
	case mapTypeResponseTrailers:
		v, err = proxywasm.GetHttpResponseTrailer(name)
	default:
		return statusInternalFailure
	}
	if err != nil {
		return statusOf(err)
	}
	placeReturned(v, retData, retSize)
	return statusOK
}

func rawGetHeaderMapPairs(mapType uint32, retData, retSize unsafe.Pointer) uint32 {
	if mapType != mapTypeRequestHeaders {
		return statusInternalFailure
	}
	pairs, err := proxywasm.GetHttpRequestHeaders()
	if err != nil {
		return statusOf(err)
	}
	placeReturned(bytesView(headermap.Append(nil, pairs)), retData, retSize)
	return statusOK
}

func rawGetBufferBytes(bufferType, start, maxSize uint32, retData, retSize unsafe.Pointer) uint32 {
	if bufferType != bufferTypeResponseBody {
		return statusInternalFailure
	}
	b, err := proxywasm.GetHttpResponseBody(int(start), int(maxSize))
	if err != nil {
		return statusOf(err)
	}
	placeReturned(bytesView(b), retData, retSize)
	return statusOK
}

func rawGetSharedData(keyData unsafe.Pointer, keySize uint32, retData, retSize, retCas unsafe.Pointer) uint32 {
	v, cas, err := proxywasm.GetSharedData(guestString(keyData, keySize))
	if err != nil {
		return statusOf(err)
	}
	placeReturned(bytesView(v), retData, retSize)
	*(*uint32)(retCas) = cas
	return statusOK
}

func rawGetProperty(pathData unsafe.Pointer, pathSize uint32, retData, retSize unsafe.Pointer) uint32 {
	v, err := proxywasm.GetProperty(strings.Split(guestString(pathData, pathSize), "\x00"))
	if err != nil {
		return statusOf(err)
	}
	placeReturned(bytesView(v), retData, retSize)
	return statusOK
}

// guestString is the string at p of n bytes (an argument passed as a
// pointer and a size, as in the ABI).
func guestString(p unsafe.Pointer, n uint32) string { return unsafe.String((*byte)(p), n) }

// placeReturned puts v where a host puts a returned value: in memory from
// allocReturned (none for an empty value), its pointer and size written to
// *retData and *retSize.
func placeReturned(v string, retData, retSize unsafe.Pointer) {
	var p *byte
	if v != "" {
		p = allocReturned(uint32(len(v)))
		copy(unsafe.Slice(p, len(v)), v)
	}
	*(**byte)(retData) = p
	*(*uint32)(retSize) = uint32(len(v))
}

func rawSetSharedData(keyData unsafe.Pointer, keySize uint32, valueData unsafe.Pointer, valueSize uint32, cas uint32) uint32 {
	key := guestString(keyData, keySize)
	if cas == 0 {
		// Envoy: cas 0 sets unconditionally. The SDK's emulator instead
		// compares it with the key's cas, so pass the current one.
		if _, cur, err := proxywasm.GetSharedData(key); err == nil {
			cas = cur
		}
	}
	return statusOf(proxywasm.SetSharedData(key, unsafe.Slice((*byte)(valueData), valueSize), cas))
}

func rawReplaceHeaderMapValue(mapType uint32, keyData unsafe.Pointer, keySize uint32, valueData unsafe.Pointer, valueSize uint32) uint32 {
	if mapType != mapTypeResponseHeaders {
		return statusInternalFailure
	}
	return statusOf(proxywasm.ReplaceHttpResponseHeader(guestString(keyData, keySize),
		guestString(valueData, valueSize)))
}

// rawIncrementMetric and rawRecordMetric turn the SDK's panics on host
// errors into a status, as the host's return value.
func rawIncrementMetric(id uint32, offset int64) (st uint32) {
	defer func() {
		if recover() != nil {
			st = statusInternalFailure
		}
	}()
	proxywasm.MetricCounter(id).Increment(uint64(offset))
	return statusOK
}

func rawRecordMetric(id uint32, value uint64) (st uint32) {
	defer func() {
		if recover() != nil {
			st = statusInternalFailure
		}
	}()
	g := proxywasm.MetricGauge(id) // the SDK has no Record: add the difference
	g.Add(int64(value) - g.Value())
	return statusOK
}

func statusOf(err error) uint32 {
	switch {
	case err == nil:
		return statusOK
	case errors.Is(err, types.ErrorStatusNotFound):
		return statusNotFound
	case errors.Is(err, types.ErrorStatusCasMismatch):
		return statusCasMismatch
	}
	return statusInternalFailure
}

// sendLocalResponse replies through the SDK, which has no details
// argument: natively they are dropped (the tests that check them run the
// module, under both hosts).
func sendLocalResponse(status uint32, _ string, headers [][2]string, body []byte, grpcStatus int32) error {
	return proxywasm.SendHttpResponse(status, headers, body, grpcStatus)
}
