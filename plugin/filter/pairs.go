package filter

import (
	"unsafe"

	"github.com/sluice-rl/sluice/plugin/headermap"
)

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
// recent requests carried, on average, at least wholeMinPresent of the
// headers the configuration reads (a moving average, presentAvg, of
// requestSources.presentReads), and only for requests of at most
// maxPairsHeaders headers. A configuration that
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
// the request is read header by header instead. It is not inlined: in
// header, which is inlined where a request reads its sources, it made every
// request that is not read whole 0.1k instructions slower (fast JIT).
//
//go:noinline
func (rs *requestSources) readWhole() {
	rs.whole = wholeOff
	cfg := rs.cfg
	if len(rs.found) < cfg.readSet.Len() {
		rs.found = make([]uint64, cfg.readSet.Len())
	}
	start := len(rs.vals)
	// The host call is made here, not through a wrapper like the other
	// getters (hostcalls_direct.go): a Go call costs about 0.2k
	// instructions under Envoy's fast JIT, a tenth of what a trial rule on
	// a header adds.
	arm(rs.vals)
	st := rawGetHeaderMapPairs(mapTypeRequestHeaders, unsafe.Pointer(&hostRet.data), unsafe.Pointer(&hostRet.size))
	b := takeInto(rs.vals)
	present := -1
	if st == statusOK {
		present = headermap.Index(b[start:], cfg.readSet, rs.found)
	}
	if present < 0 {
		rs.vals = b[:start]
		return
	}
	rs.vals, rs.pairsAt = b, start
	rs.presentReads += present
	rs.whole = wholeRead
}
