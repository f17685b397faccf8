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

// Names is a set of distinct header names compiled for Index: each
// name with its first bytes as one word, and a mask of the names' lengths.
type Names struct {
	entries []nameEntry
	// lengths has bit 63-(n mod 64) set for each name's length n: the
	// pass shifts it left by a pair's name length and tests the sign bit,
	// without taking the length out of the word it loads it in.
	lengths uint64
}

// nameEntry is one name of a Names. Entries are 32 bytes, so that the
// assembly finds an entry's slot in found with a shift.
type nameEntry struct {
	word uint64 // nameWord of the name
	name string
	_    uint64
}

// NewNames compiles names for Index; they must be distinct (a repeated
// name is found once, its later slots stay 0).
func NewNames(names ...string) *Names {
	s := &Names{entries: make([]nameEntry, len(names))}
	for i, n := range names {
		s.entries[i] = nameEntry{word: nameWord([]byte(n)), name: n}
		s.lengths |= lengthBit(len(n))
	}
	return s
}

// Len is how many names s has: the least length of Index's found.
func (s *Names) Len() int { return len(s.entries) }

// lengthBit is the bit of Names.lengths for a name of n bytes. Lengths
// equal mod 64 share a bit, which costs a comparison, never a miss.
func lengthBit(n int) uint64 { return 1 << 63 >> (uint(n) & 63) }

// nameWord packs a name into one word, with its length deciding whether
// two names are equal when they are at most 8 bytes long: the first 8
// bytes (little-endian), or for a shorter name two overlapping halves
// (the first and last 4 bytes, or 2, or its one byte).
func nameWord(b []byte) uint64 {
	le := binary.LittleEndian
	switch n := len(b); {
	case n >= 8:
		return le.Uint64(b)
	case n >= 4:
		return uint64(le.Uint32(b)) | uint64(le.Uint32(b[n-4:]))<<32
	case n >= 2:
		return uint64(le.Uint16(b)) | uint64(le.Uint16(b[n-2:]))<<16
	case n == 1:
		return uint64(b[0])
	}
	return 0
}

// Index (index_wasm.s, index_other.go) finds in the encoded map b the
// first value of each of names: found[i] becomes a slot for Value (the
// value's offset in b and its length), or 0 when no pair is named as
// names' i-th name. It returns how many of names it found, or -1 for a
// malformed map. found must be at least names.Len() long. Names are
// compared exactly: Envoy stores them lower-case.
//
// Only pairs whose name has one of names' lengths (mod 64) are looked at,
// so a pass over a browser's headers compares a handful of names, and
// those by their first word before any byte after it. Nothing in b is
// trusted: Index returns -1 (found is then meaningless) for a count or
// lengths that do not add up to len(b), a pair named as one of names
// without a NUL after its name or value, or a found shorter than names;
// it never panics and reads nothing outside b and names. An empty b is the
// empty map (what the host returns for one).
//
// indexGo is Index in Go; the WebAssembly version follows it step by step.
func indexGo(b []byte, names *Names, found []uint64) int {
	if len(found) < len(names.entries) {
		return -1
	}
	clear(found[:len(names.entries)])
	size := uint64(len(b))
	if size == 0 {
		return 0
	}
	if size < 4 || size > math.MaxUint32 {
		return -1
	}
	le := binary.LittleEndian
	n := uint64(le.Uint32(b))
	if n*10 > size-4 { // every pair takes at least 10 bytes: two lengths, two NULs
		return -1
	}
	present := 0
	lensEnd := 4 + 8*n
	// data is where the name of the pair whose lengths are at p starts:
	// after the lengths, and the names and values before it with a NUL
	// after each (no overflow: fewer than 2^29 pairs of lengths below 2^32).
	data := lensEnd
	for p := uint64(4); p < lensEnd; p += 8 {
		ns, vs := uint64(le.Uint32(b[p:])), uint64(le.Uint32(b[p+4:]))
		if names.lengths<<(ns&63)>>63 != 0 {
			if data+ns >= size {
				return -1
			}
			name := b[data : data+ns]
			word := nameWord(name)
			for j := range names.entries {
				e := &names.entries[j]
				if e.word == word && uint64(len(e.name)) == ns && (ns <= 8 || string(name[8:]) == e.name[8:]) {
					// A pair of one of names: checked whole before use.
					end := data + ns + 1 + vs + 1
					if end > size || b[data+ns] != 0 || b[end-1] != 0 {
						return -1
					}
					if found[j] == 0 {
						found[j] = (data+ns+1)<<32 | vs
						present++
					}
					break
				}
			}
		}
		data += ns + vs + 2
	}
	if data != size {
		return -1
	}
	return present
}
