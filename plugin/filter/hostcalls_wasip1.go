//go:build wasip1

package filter

import (
	"unsafe"

	"github.com/sluice-rl/sluice/plugin/headermap"
)

// The proxy-wasm ABI 0.2.1 calls of the request path, imported directly
// (hostcalls_direct.go wraps them), and the allocator the host places
// returned values with.

//go:wasmimport env proxy_get_header_map_value
func rawGetHeaderMapValue(mapType uint32, keyData unsafe.Pointer, keySize uint32, retData unsafe.Pointer, retSize unsafe.Pointer) uint32

//go:wasmimport env proxy_get_header_map_pairs
func rawGetHeaderMapPairs(mapType uint32, retData unsafe.Pointer, retSize unsafe.Pointer) uint32

//go:wasmimport env proxy_get_buffer_bytes
func rawGetBufferBytes(bufferType uint32, start uint32, maxSize uint32, retData unsafe.Pointer, retSize unsafe.Pointer) uint32

//go:wasmimport env proxy_get_shared_data
func rawGetSharedData(keyData unsafe.Pointer, keySize uint32, retData unsafe.Pointer, retSize unsafe.Pointer, retCas unsafe.Pointer) uint32

//go:wasmimport env proxy_get_property
func rawGetProperty(pathData unsafe.Pointer, pathSize uint32, retData unsafe.Pointer, retSize unsafe.Pointer) uint32

//go:wasmimport env proxy_set_shared_data
func rawSetSharedData(keyData unsafe.Pointer, keySize uint32, valueData unsafe.Pointer, valueSize uint32, cas uint32) uint32

//go:wasmimport env proxy_replace_header_map_value
func rawReplaceHeaderMapValue(mapType uint32, keyData unsafe.Pointer, keySize uint32, valueData unsafe.Pointer, valueSize uint32) uint32

//go:wasmimport env proxy_increment_metric
func rawIncrementMetric(metricID uint32, offset int64) uint32

//go:wasmimport env proxy_record_metric
func rawRecordMetric(metricID uint32, value uint64) uint32

// guestMalloc is the guest's allocator for values the host returns
// (allocReturned). Envoy (proxy-wasm-cpp-host, WasmBase::getFunctions) uses
// a module's "malloc" export in preference to proxy_on_memory_allocate, and
// so does the project's test host.
//
//lint:ignore U1000 exported to the host (go:wasmexport), never called from Go.
//go:wasmexport malloc
func guestMalloc(size uint32) *byte { return allocReturned(size) }

//go:wasmimport env proxy_send_local_response
func rawSendLocalResponse(statusCode uint32, detailData unsafe.Pointer, detailSize uint32,
	bodyData unsafe.Pointer, bodySize uint32, headersData unsafe.Pointer, headersSize uint32, grpcStatus int32) uint32

// localReplyBuf holds the serialized headers of a local reply (reused: the
// host copies them during the call).
var localReplyBuf []byte

// sendLocalResponse sends a local reply (proxy_send_local_response) with
// details, Envoy's response code details for it. The SDK's SendHttpResponse
// passes no details, and serializes the headers byte by byte into a fresh
// slice, which took a third of a rejected request's time in wasm; here they
// are copied with memmove into a reused buffer (headermap.Append).
func sendLocalResponse(status uint32, details string, headers [][2]string, body []byte, grpcStatus int32) error {
	localReplyBuf = headermap.Append(localReplyBuf[:0], headers)
	st := rawSendLocalResponse(status, strPtr(details), uint32(len(details)), bytesPtr(body), uint32(len(body)),
		bytesPtr(localReplyBuf), uint32(len(localReplyBuf)), grpcStatus)
	if st != statusOK {
		return statusError(st)
	}
	return nil
}
