// Package headermap reads and writes header maps in the proxy-wasm
// encoding: what proxy_get_header_map_pairs returns and
// proxy_send_local_response takes. The encoding is the number of pairs,
// each name and value length (uint32, little-endian), then each name and
// value followed by a NUL byte.
//
// Index finds a few names' values in an encoded map in one pass, without
// decoding it. In the filter's module (GOARCH=wasm) it is written in
// WebAssembly (index_wasm.s): the pass is on the request path of every
// request read whole, and the compiled Go loop cost four times as much
// under Envoy's WAMR fast JIT (docs/design/performance.md, "Headers in one
// call"). Elsewhere it is indexGo, the Go it must agree with; the tests
// run under both (make test runs them in wasm too).
package headermap

import (
	"encoding/binary"
	"math"
)

// Append appends pairs to dst in the proxy-wasm map encoding, with copies
// into a reused buffer instead of a byte loop into a new one.
func Append(dst []byte, pairs [][2]string) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(pairs)))
	for _, kv := range pairs {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(kv[0])))
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(kv[1])))
	}
	for _, kv := range pairs {
		dst = append(dst, kv[0]...)
		dst = append(dst, 0)
		dst = append(dst, kv[1]...)
		dst = append(dst, 0)
	}
	return dst
}

// LengthBit is the bit of an Index mask for a name of n bytes. Lengths
// equal mod 64 share a bit, which costs a comparison, never a miss.
func LengthBit(n int) uint64 { return 1 << (uint(n) & 63) }

// Value is the value a slot Index filled refers to in the same b, and
// whether the name was found.
func Value(b []byte, slot uint64) ([]byte, bool) {
	if slot == 0 {
		return nil, false
	}
	off := slot >> 32
	return b[off : off+uint64(uint32(slot))], true
}

// ValueLen is the length of the value a slot refers to, 0 for a name not
// found: enough to tell a value from one of another length.
func ValueLen(slot uint64) int { return int(uint32(slot)) }

// Index (index_wasm.s, index_other.go) finds in the encoded map b the
// first value of each of names: found[i] becomes a slot for Value (the
// value's offset in b and its length), or 0 when no pair is named
// names[i]. It returns how many of names it found, or -1 for a malformed
// map. names must be distinct (a repeated name is found once) and
// mask must have the LengthBit of each; found must be at least as long as
// names. Names are compared exactly: Envoy stores them lower-case.
//
// Only pairs whose name has a length in mask are looked at, so a pass over
// a browser's headers compares a handful of names. Nothing in b is
// trusted: Index returns -1 (found is then meaningless) for a count or
// lengths that do not add up to len(b), a pair it compares without a NUL
// after its name or value, or a found shorter than names; it never panics
// and reads nothing outside b and names. An empty b is the empty map (what
// the host returns for one).
//
// indexGo is Index in Go; the WebAssembly version follows it step by step.
func indexGo(b []byte, names []string, mask uint64, found []uint64) int {
	if len(found) < len(names) {
		return -1
	}
	clear(found[:len(names)])
	size := uint64(len(b))
	if size == 0 {
		return 0
	}
	if size < 4 || size > math.MaxUint32 {
		return -1
	}
	n := uint64(binary.LittleEndian.Uint32(b))
	if n*10 > size-4 { // every pair takes at least 10 bytes: two lengths, two NULs
		return -1
	}
	present := 0
	lensEnd := 8 * n
	data := 4 + lensEnd // where the next pair's name starts
	for i := uint64(0); i < lensEnd; i += 8 {
		ns := uint64(binary.LittleEndian.Uint32(b[4+i:]))
		vs := uint64(binary.LittleEndian.Uint32(b[8+i:]))
		end := data + ns + 1 + vs + 1 // no overflow: each term < 2^32, n < 2^29
		if mask>>(ns&63)&1 != 0 {
			if end > size || b[data+ns] != 0 || b[end-1] != 0 {
				return -1
			}
			for j, want := range names {
				if uint64(len(want)) == ns && string(b[data:data+ns]) == want {
					if found[j] == 0 {
						found[j] = (data+ns+1)<<32 | vs
						present++
					}
					break
				}
			}
		}
		data = end
	}
	if data != size {
		return -1
	}
	return present
}
