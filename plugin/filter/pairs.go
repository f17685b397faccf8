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

// headerPair is one request header of the map read whole: views of
// requestSources.vals.
type headerPair struct {
	name, value string
}

// appendPairs decodes a header map in the proxy-wasm encoding (the one
// appendHeaderMap writes: the number of pairs, each name and value length as
// uint32 little-endian, then each name and value followed by a NUL byte)
// and appends its pairs, views of b, to dst. Nothing in b is trusted: a
// count or a length that does not fit b, a missing NUL or trailing bytes
// make it return ok false (with dst unchanged), never panic. An empty b is
// the empty map (what the host returns for one).
func appendPairs(dst []headerPair, b []byte) (_ []headerPair, ok bool) {
	if len(b) == 0 {
		return dst, true
	}
	if len(b) < 4 {
		return dst, false
	}
	n := uint64(binary.LittleEndian.Uint32(b))
	size := uint64(len(b))
	// Every pair takes at least 10 bytes (two lengths, two NULs).
	if n > (size-4)/10 {
		return dst, false
	}
	start := len(dst)
	data := 4 + 8*n
	for i := uint64(0); i < n; i++ {
		lens := b[4+8*i:]
		ns := uint64(binary.LittleEndian.Uint32(lens))
		vs := uint64(binary.LittleEndian.Uint32(lens[4:]))
		end := data + ns + 1 + vs + 1 // no overflow: each term < 2^32
		if end > size || b[data+ns] != 0 || b[end-1] != 0 {
			return dst[:start], false
		}
		dst = append(dst, headerPair{
			name:  bytesView(b[data : data+ns]),
			value: bytesView(b[data+ns+1 : end-1]),
		})
		data = end
	}
	if data != size {
		return dst[:start], false
	}
	return dst, true
}

// pairValue returns the value of the first pair named name (names compared
// exactly: Envoy stores them lower-case and lower-cases the name a get
// asks for; the filter's names are lower-case already).
func pairValue(pairs []headerPair, name string) (string, bool) {
	for i := range pairs {
		if pairs[i].name == name {
			return pairs[i].value, true
		}
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
	if rs.vals == nil || cap(rs.pairs) > maxKeptPairs { // views of a dropped buffer, or a huge map
		clear(rs.pairs[:cap(rs.pairs)])
		if cap(rs.pairs) > maxKeptPairs {
			rs.pairs = nil
		}
	}
	rs.pairs = rs.pairs[:0]
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
		rs.vals = b
		pairs, valid := appendPairs(rs.pairs[:0], b[start:])
		if !valid {
			rs.vals = b[:start]
			return "", false, false
		}
		rs.pairs = pairs
		rs.whole = wholeRead
	}
	if rs.whole != wholeRead {
		return "", false, false
	}
	v, ok = pairValue(rs.pairs, name)
	return v, ok, true
}

// maxKeptPairs bounds the pair list kept between requests.
const maxKeptPairs = 256
