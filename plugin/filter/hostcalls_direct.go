package filter

import "unsafe"

// The request path's host calls, made without the SDK. The SDK's wrappers
// pass pointers to local variables for the returned pointer, size and cas;
// without //go:noescape those locals escape and every call allocates two or
// three small objects, which in wasm costs about 300 ns a call (measured:
// 380 ns vs 90 ns per header get). Here the host writes into one
// package-level holder instead: globals never move and need no allocation.
//
// The returned data itself lands in memory the host asks the guest for
// (allocReturned, through the module's malloc export): for these wrappers,
// the spare capacity of the buffer the caller owns when the value fits,
// else one reused scratch buffer, copied out at once into the caller's.
// So the request path allocates nothing for what it reads, and the
// guest's garbage collector, whose mark phases slowed every seventh request
// by about 25 µs, rarely has to run.
//
// The raw* calls have the proxy-wasm ABI 0.2.1 signatures: direct imports
// in the module (hostcalls_wasip1.go), served by the SDK in native builds
// (hostcalls_other.go). Everything above them is this file (and readWhole
// in pairs.go, which reads the header map without a wrapper), the same in
// both, so that a native run's profile, which the module is compiled with
// (plugin/default.pgo), names the code the module runs.

// hostRet receives returned values. A VM runs one callback at a time and
// these calls never nest, so one holder is enough.
var hostRet struct {
	data *byte
	size uint32
	cas  uint32
}

// scratch is where allocReturned puts the value of the next host call made
// through a wrapper below (armed), which copies it out before returning;
// or, when the wrapper's destination (into) has room for the value, that
// room itself, so that nothing is copied (a whole header map is a
// kilobyte, and its copy was a tenth of what a trial rule costs).
var scratch struct {
	armed bool
	buf   []byte
	into  []byte
}

// maxScratch bounds the reused buffer; a larger value (a huge header) gets
// an allocation of its own, which the collector reclaims.
const maxScratch = 64 << 10

// allocReturned is the memory for a value the host returns (the module's
// malloc export). When a wrapper below armed it, the value goes into the
// wrapper's buffer if it has room, else into the scratch buffer; otherwise
// (the SDK's own calls: configuration, callout bodies, ..., whose results
// the SDK hands out without copying) it gets fresh memory, exactly as the
// SDK's proxy_on_memory_allocate does. Fresh memory is allocated black
// during a GC cycle and the buffers are reachable from globals, so the
// host's write of the pointer without a write barrier is safe.
func allocReturned(size uint32) *byte {
	if scratch.armed {
		scratch.armed = false
		if spare := scratch.into[len(scratch.into):cap(scratch.into)]; size > 0 && uint32(len(spare)) >= size {
			return &spare[0]
		}
		if size <= maxScratch {
			if uint32(cap(scratch.buf)) < size {
				scratch.buf = make([]byte, max(size, 2*uint32(cap(scratch.buf)), 256))
			}
			return &scratch.buf[:1][0]
		}
	}
	buf := make([]byte, max(size, 1)) // never a zero-length slice: &buf[0] must exist
	return &buf[0]
}

// The proxy-wasm header map types the filter uses.
const (
	mapTypeRequestHeaders   = 0
	mapTypeResponseHeaders  = 2
	mapTypeResponseTrailers = 3
)

// arm makes allocReturned place the next host call's value: in dst's
// spare capacity when it fits, else in the scratch buffer.
func arm(dst []byte) {
	scratch.armed, scratch.into = true, dst
}

// takeInto appends the data the host just returned to dst (dst must be
// what arm was given) and clears the holder and the arming (the host
// allocates nothing for an absent or empty value). Data the host wrote
// into dst's spare capacity is only taken in, not copied.
func takeInto(dst []byte) []byte {
	scratch.armed, scratch.into = false, nil
	d, n := hostRet.data, hostRet.size
	hostRet.data, hostRet.size = nil, 0
	if d == nil || n == 0 {
		return dst
	}
	if spare := dst[len(dst):cap(dst)]; uint32(len(spare)) >= n && d == &spare[0] {
		return dst[:len(dst)+int(n)]
	}
	return append(dst, unsafe.Slice(d, n)...)
}

// bytesPtr is strPtr for a byte slice.
func bytesPtr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

func strPtr(s string) unsafe.Pointer {
	if s == "" {
		return nil
	}
	return unsafe.Pointer(unsafe.StringData(s))
}

// getRequestHeader appends the first value of a request header to buf and
// returns it as a view of buf's new tail, with the grown buf; ok is false
// when the header is absent or the host fails. The view stays valid until
// the caller overwrites that part of buf (appending more never moves it: a
// reallocation leaves the old array to the views into it).
func getRequestHeader(name string, buf []byte) (v string, grown []byte, ok bool) {
	return getHeaderValue(mapTypeRequestHeaders, name, buf)
}

// getResponseValue is getRequestHeader for the response headers (trailer
// false) or trailers (trailer true).
func getResponseValue(trailer bool, name string, buf []byte) (string, []byte, bool) {
	if trailer {
		return getHeaderValue(mapTypeResponseTrailers, name, buf)
	}
	return getHeaderValue(mapTypeResponseHeaders, name, buf)
}

func getHeaderValue(mapType uint32, name string, buf []byte) (v string, grown []byte, ok bool) {
	arm(buf)
	st := rawGetHeaderMapValue(mapType, strPtr(name), uint32(len(name)),
		unsafe.Pointer(&hostRet.data), unsafe.Pointer(&hostRet.size))
	start := len(buf)
	buf = takeInto(buf)
	if st != statusOK {
		return "", buf[:start], false
	}
	return bytesView(buf[start:]), buf, true
}

// bufferTypeResponseBody is the proxy-wasm buffer of the response body
// chunk being processed.
const bufferTypeResponseBody = 1

// getResponseBody reads size bytes of the current response body chunk
// from start into dst (overwritten) and returns them: dst's array when
// they fit its capacity. A failed read returns no bytes.
func getResponseBody(start, size int, dst []byte) []byte {
	dst = dst[:0]
	arm(dst)
	st := rawGetBufferBytes(bufferTypeResponseBody, uint32(start), uint32(size),
		unsafe.Pointer(&hostRet.data), unsafe.Pointer(&hostRet.size))
	dst = takeInto(dst)
	if st != statusOK {
		return dst[:0]
	}
	return dst
}

// getSharedData reads a shared-data entry into dst (overwritten; nil: a new
// slice) and returns the value, a view of dst's array.
func getSharedData(key string, dst []byte) ([]byte, uint32, uint32) {
	dst = dst[:0]
	arm(dst)
	st := rawGetSharedData(strPtr(key), uint32(len(key)),
		unsafe.Pointer(&hostRet.data), unsafe.Pointer(&hostRet.size), unsafe.Pointer(&hostRet.cas))
	d, cas := takeInto(dst), hostRet.cas
	hostRet.cas = 0
	if st != statusOK {
		return d[:0], 0, st
	}
	return d, cas, statusOK
}

// getProperty reads a property into dst like getSharedData; path is the
// serialized path (segments joined with NUL bytes).
func getProperty(path string, dst []byte) ([]byte, bool) {
	dst = dst[:0]
	arm(dst)
	st := rawGetProperty(strPtr(path), uint32(len(path)), unsafe.Pointer(&hostRet.data), unsafe.Pointer(&hostRet.size))
	d := takeInto(dst)
	return d, st == statusOK
}

// setSharedData is proxywasm.SetSharedData without the SDK's two wrapper
// layers (every Go call costs in wasm; this one is made on every request).
func setSharedData(key string, value []byte, cas uint32) error {
	if st := rawSetSharedData(strPtr(key), uint32(len(key)), bytesPtr(value), uint32(len(value)), cas); st != statusOK {
		return statusError(st)
	}
	return nil
}

// replaceResponseHeader sets a response header (the first of that name, or
// a new one). Like every caller of the SDK's version, it ignores host
// errors: a field the host refuses is not worth failing a response for.
func replaceResponseHeader(name, value string) {
	_ = rawReplaceHeaderMapValue(mapTypeResponseHeaders, strPtr(name), uint32(len(name)), strPtr(value), uint32(len(value)))
}

// incrementMetric adds offset to a counter, ignoring host errors (the SDK's
// Increment panics on them; a metric must never break a request).
func incrementMetric(id uint32, offset int64) { _ = rawIncrementMetric(id, offset) }

// recordMetric sets a gauge, ignoring host errors.
func recordMetric(id uint32, value uint64) { _ = rawRecordMetric(id, value) }
