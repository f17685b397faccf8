//go:build !wasip1

package filter

import (
	"errors"
	"strings"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

// Native builds (unit tests of the pure helpers) go through the SDK; the
// filter only ever runs as wasm, see hostcalls_wasip1.go.

func getRequestHeader(name string, buf []byte) (string, []byte, bool) {
	v, err := proxywasm.GetHttpRequestHeader(name)
	if err != nil {
		return "", buf, false
	}
	start := len(buf)
	buf = append(buf, v...)
	return bytesView(buf[start:]), buf, true
}

func getRequestHeaderPairs(buf []byte) ([]byte, bool) {
	pairs, err := proxywasm.GetHttpRequestHeaders()
	if err != nil {
		return buf, false
	}
	return appendHeaderMap(buf, pairs), true
}

func getResponseValue(trailer bool, name string, buf []byte) (string, []byte, bool) {
	get := proxywasm.GetHttpResponseHeader
	if trailer {
		get = proxywasm.GetHttpResponseTrailer
	}
	v, err := get(name)
	if err != nil {
		return "", buf, false
	}
	start := len(buf)
	buf = append(buf, v...)
	return bytesView(buf[start:]), buf, true
}

func getSharedData(key string, dst []byte) ([]byte, uint32, uint32) {
	v, cas, err := proxywasm.GetSharedData(key)
	return append(dst[:0], v...), cas, statusOf(err)
}

func getProperty(path string, dst []byte) ([]byte, bool) {
	v, err := proxywasm.GetProperty(strings.Split(path, "\x00"))
	return append(dst[:0], v...), err == nil
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

func incrementMetric(id uint32, offset int64) {
	defer func() { _ = recover() }()
	proxywasm.MetricCounter(id).Increment(uint64(offset))
}

func recordMetric(id uint32, value uint64) {
	defer func() { _ = recover() }()
	g := proxywasm.MetricGauge(id) // the SDK has no Record: add the difference
	g.Add(int64(value) - g.Value())
}

func setSharedData(key string, value []byte, cas uint32) error {
	if cas == 0 {
		// Envoy: cas 0 sets unconditionally. The SDK's emulator instead
		// compares it with the key's cas, so pass the current one.
		if _, cur, err := proxywasm.GetSharedData(key); err == nil {
			cas = cur
		}
	}
	return proxywasm.SetSharedData(key, value, cas)
}

func replaceResponseHeader(name, value string) {
	_ = proxywasm.ReplaceHttpResponseHeader(name, value)
}

func sendLocalResponse(status uint32, headers [][2]string, body []byte) error {
	return proxywasm.SendHttpResponse(status, headers, body, -1)
}
