package filter

import "encoding/binary"

// Reading a request's headers in one host call.
//
// Under Envoy's host every call that returns a value costs far more than
// the value (about 1 µs for WasmBase::allocMemory, see
// docs/design/performance.md), so a configuration that can read two or more
// request headers fetches the whole header map once, with
// proxy_get_header_map_pairs, at the request's first header read, and
// answers that and every later header lookup of the request from it. A
// configuration that reads one header keeps the single get, and a request
// with more than maxPairsHeaders headers (a huge map costs more to copy
// than the gets it saves) is read header by header.

// maxPairsHeaders is the largest header count (the count Envoy passes to
// on_request_headers) read whole: measured by BenchmarkEnvoyHostTrial's
// headers=N cases (plugin/envoyhost/bench_test.go).
const maxPairsHeaders = 64

// validPairs reports whether b is a header map in the proxy-wasm encoding
// (the one appendHeaderMap writes: the number of pairs, each name and value
// length as uint32 little-endian, then each name and value followed by a
// NUL byte), exactly: nothing in b is trusted, and a count or a length that
// does not fit b, a missing NUL or trailing bytes make it false. An empty b
// is the empty map (what the host returns for one).
func validPairs(b []byte) bool {
	if len(b) == 0 {
		return true
	}
	if len(b) < 4 {
		return false
	}
	n := uint64(binary.LittleEndian.Uint32(b))
	size := uint64(len(b))
	// Every pair takes at least 10 bytes (two lengths, two NULs).
	if n > (size-4)/10 {
		return false
	}
	data := 4 + 8*n
	for i := uint64(0); i < n; i++ {
		lens := b[4+8*i:]
		ns := uint64(binary.LittleEndian.Uint32(lens))
		vs := uint64(binary.LittleEndian.Uint32(lens[4:]))
		end := data + ns + 1 + vs + 1 // no overflow: each term < 2^32
		if end > size || b[data+ns] != 0 || b[end-1] != 0 {
			return false
		}
		data = end
	}
	return data == size
}

// pairValue returns the value of the first pair named name in the map b,
// a view of b; b must be valid (validPairs), else the result is
// meaningless (but it never panics). Names are compared exactly: Envoy
// stores them lower-case and lower-cases the name a get asks for; the
// filter's names are lower-case already.
//
// One loop without calls (but the comparison of names of equal length):
// a lookup walks the lengths, it builds nothing.
func pairValue(b []byte, name string) (string, bool) {
	if len(b) < 4 {
		return "", false
	}
	n := uint64(binary.LittleEndian.Uint32(b))
	size := uint64(len(b))
	if n > (size-4)/10 {
		return "", false
	}
	data := 4 + 8*n
	want := uint64(len(name))
	for i := uint64(0); i < n; i++ {
		lens := b[4+8*i:]
		ns := uint64(binary.LittleEndian.Uint32(lens))
		vs := uint64(binary.LittleEndian.Uint32(lens[4:]))
		end := data + ns + 1 + vs + 1
		if end > size {
			return "", false
		}
		if ns == want && bytesView(b[data:data+ns]) == name {
			return bytesView(b[data+ns+1 : end-1]), true
		}
		data = end
	}
	return "", false
}

// Whole-map states of a request (requestSources.whole).
const (
	wholeOff    uint8 = iota // read header by header
	wholeUnread              // read the map at the first header read
	wholeRead                // rs.pairs holds the map
)

// startWhole sets how this request's headers are read: whole when the
// configuration can read several and the host reported at most
// maxPairsHeaders headers.
func (rs *requestSources) startWhole(numHeaders int) {
	rs.pairs = nil
	rs.whole = wholeOff
	if rs.cfg.readsSeveral && numHeaders > 0 && numHeaders <= maxPairsHeaders {
		rs.whole = wholeUnread
	}
}

// wholeHeader answers a header lookup from the map read whole, reading it
// first if needed; done is false when the request is read header by header
// (including after the host failed the read or sent a malformed map).
func (rs *requestSources) wholeHeader(name string) (v string, ok, done bool) {
	if rs.whole == wholeUnread {
		rs.whole = wholeOff
		start := len(rs.vals)
		b, got := getRequestHeaderPairs(rs.vals)
		if !got {
			rs.vals = b[:start]
			return "", false, false
		}
		if !validPairs(b[start:]) {
			rs.vals = b[:start]
			return "", false, false
		}
		rs.vals = b
		rs.pairs = b[start:len(b):len(b)]
		rs.whole = wholeRead
	}
	if rs.whole != wholeRead {
		return "", false, false
	}
	v, ok = pairValue(rs.pairs, name)
	return v, ok, true
}
