package filter

import "encoding/binary"

// Reading a request's headers in one host call.
//
// Under Envoy's host every call that returns a value costs far more than
// the value (about 1 µs for WasmBase::allocMemory, see
// docs/design/performance.md), so a configuration that can read two or more
// request headers may fetch the whole header map once, with
// proxy_get_header_map_pairs, at the request's first header read, and
// answer that and every later header lookup of the request from it. The
// whole read costs about 1.5 gets that return a value, so it pays only
// where it replaces two such gets or more: it is used while the VM's
// recent requests found, on average, at least wholeMinPresent of the
// headers they looked up present (a moving average, presentAvg), and only
// for requests of at most maxPairsHeaders headers. A configuration that
// reads one header keeps the single get.

// maxPairsHeaders is the largest header count (the count Envoy passes to
// on_request_headers) read whole. Under Envoy's host with WAMR fast JIT
// (BenchmarkEnvoyHostTrial's headers=N cases against a build that reads
// header by header, plugin/envoyhost/bench_test.go) a whole read of 16
// headers costs what two present headers and an absent one cost read
// singly (0.996x); at 32 headers it is 4% slower, and with one present
// header of three it is slower at any size (1.08x at 16): the whole read
// costs about 1.5 gets that return a value (the host library marshals
// every pair), so it pays only where it replaces two such gets or more.
const maxPairsHeaders = 16

// pairSlot is one read name's value in the map read whole.
type pairSlot struct {
	v  string
	ok bool
}

// lengthBit is the bit of lengthMask for a name of n bytes (all names of
// 63 bytes or more share the last).
func lengthBit(n uint64) uint64 { return 1 << min(n, 63) }

// indexPairs reads a header map in the proxy-wasm encoding (the one
// appendHeaderMap writes: the number of pairs, each name and value length
// as uint32 little-endian, then each name and value followed by a NUL
// byte) in one pass: found[i] becomes the value of the first pair named
// names[i] (a view of b), or not ok. mask has lengthBit set for the length
// of every name, so most pairs are passed over on their length alone.
//
// Nothing in b is trusted: a count or lengths that do not add up to b's
// size, or a missing NUL after a pair it compares, make it return false
// (found is then meaningless), never panic. An empty b is the empty map
// (what the host returns for one). Names are
// compared exactly: Envoy stores them lower-case and lower-cases the name a
// get asks for; the filter's names are lower-case already.
func indexPairs(b []byte, names []string, mask uint64, found []pairSlot) bool {
	found = found[:len(names)]
	clear(found)
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
	lens := b[4 : 4+8*n]
	data := 4 + 8*n
	for i := 0; i+8 <= len(lens); i += 8 {
		ns := uint64(binary.LittleEndian.Uint32(lens[i:]))
		vs := uint64(binary.LittleEndian.Uint32(lens[i+4:]))
		end := data + ns + 1 + vs + 1 // no overflow: each term < 2^32
		// Only a pair whose name has a wanted length is looked at (its
		// bounds and NULs checked); every pair's lengths are checked by
		// the total below. A pass costs a few instructions a pair.
		if mask&lengthBit(ns) != 0 {
			if end > size || b[data+ns] != 0 || b[end-1] != 0 {
				return false
			}
			name := bytesView(b[data : data+ns])
			for j, want := range names {
				if uint64(len(want)) == ns && !found[j].ok && want == name {
					found[j] = pairSlot{bytesView(b[data+ns+1 : end-1]), true}
				}
			}
		}
		data = end
	}
	return data == size
}

// Whole-map states of a request (requestSources.whole).
const (
	wholeOff    uint8 = iota // read header by header
	wholeUnread              // read the map at the first header read
	wholeRead                // rs.found holds the values
)

// The moving average of present headers per request (presentAvg) is kept
// in 1/256ths and moves a quarter of the way to each request's count, so a
// traffic mix that changes is followed within a few requests.
const (
	presentScale = 256
	presentShift = 2
	// wholeMinPresent: the average (x presentScale) from which requests
	// are read whole: 1.75 present headers per request.
	wholeMinPresent = presentScale * 7 / 4
)

// startWhole folds the last request's count of present headers into the
// moving average and sets how this request's headers are read: whole when
// the configuration can read several, recent requests had several of them,
// and the host reported at most maxPairsHeaders headers.
func (rs *requestSources) startWhole(numHeaders int) {
	rs.presentAvg += (int32(rs.presentReads)*presentScale - rs.presentAvg) >> presentShift
	rs.presentReads = 0
	rs.whole = wholeOff
	if rs.cfg.readsSeveral && rs.presentAvg >= wholeMinPresent && numHeaders > 0 && numHeaders <= maxPairsHeaders {
		rs.whole = wholeUnread
	}
}

// readWhole reads the request's header map and finds every name the
// configuration reads in it; when the host fails or sends a malformed map,
// the request is read header by header instead.
func (rs *requestSources) readWhole() {
	rs.whole = wholeOff
	cfg := rs.cfg
	if cap(rs.found) < len(cfg.readNames) {
		rs.found = make([]pairSlot, len(cfg.readNames))
	}
	start := len(rs.vals)
	b, ok := getRequestHeaderPairs(rs.vals)
	if !ok || !indexPairs(b[start:], cfg.readNames, cfg.readMask, rs.found) {
		clear(rs.found[:cap(rs.found)]) // no views of a buffer about to be reused
		rs.vals = b[:start]
		return
	}
	rs.vals = b
	rs.whole = wholeRead
}
