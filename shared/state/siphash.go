package state

import (
	"encoding/binary"
	"math/bits"
)

// Keyed fingerprints. A bounded rule's identity picks its group, and so the
// identities it shares a group (and an overflow limit, group.go) with, from
// its fingerprint. An unkeyed hash lets anyone who reads this source compute
// sets of identities that land in one group (hash flooding: many client
// addresses or API keys crowding a victim's group). The plugin therefore
// fingerprints identities with SipHash-2-4 (Aumasson and Bernstein, 2012), a
// keyed hash made for exactly this, under a 128-bit key created at random
// once per deployment (per Envoy process and vm_id) and kept in shared data:
// without the key, group collisions cannot be computed.
//
// SipHash is written out here rather than imported: it is 60 lines, the
// request path needs it allocation-free on a string (the usual packages
// take a []byte, which costs a conversion), and the reference vectors
// (siphash_test.go) pin it down.

// HashKey is a 128-bit SipHash key, as two little-endian halves of its 16
// bytes.
type HashKey struct{ K0, K1 uint64 }

// HashKeyLen is the length of a HashKey's bytes.
const HashKeyLen = 16

// HashKeyFrom reads a HashKey from its 16 bytes; ok is false for any other
// length.
func HashKeyFrom(b []byte) (k HashKey, ok bool) {
	if len(b) != HashKeyLen {
		return HashKey{}, false
	}
	return HashKey{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])}, true
}

// AppendHashKey appends k's 16 bytes.
func AppendHashKey(dst []byte, k HashKey) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, k.K0)
	return binary.LittleEndian.AppendUint64(dst, k.K1)
}

// KeyedFingerprint is the fingerprint of an identity under key k:
// SipHash-2-4 of its bytes. It does not allocate.
func KeyedFingerprint(k HashKey, identity string) uint64 {
	return SipHash24(k, identity)
}

// SipHash24 returns SipHash-2-4 of s under key k.
func SipHash24(k HashKey, s string) uint64 {
	v0 := k.K0 ^ 0x736f6d6570736575
	v1 := k.K1 ^ 0x646f72616e646f6d
	v2 := k.K0 ^ 0x6c7967656e657261
	v3 := k.K1 ^ 0x7465646279746573
	n := len(s)
	for len(s) >= 8 {
		m := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
		v3 ^= m
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
		v0 ^= m
		s = s[8:]
	}
	m := uint64(n) << 56
	for i := len(s) - 1; i >= 0; i-- {
		m |= uint64(s[i]) << (8 * uint(i))
	}
	v3 ^= m
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0 ^= m
	v2 ^= 0xff
	for i := 0; i < 4; i++ {
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	}
	return v0 ^ v1 ^ v2 ^ v3
}

func sipRound(v0, v1, v2, v3 uint64) (uint64, uint64, uint64, uint64) {
	v0 += v1
	v1 = bits.RotateLeft64(v1, 13)
	v1 ^= v0
	v0 = bits.RotateLeft64(v0, 32)
	v2 += v3
	v3 = bits.RotateLeft64(v3, 16)
	v3 ^= v2
	v0 += v3
	v3 = bits.RotateLeft64(v3, 21)
	v3 ^= v0
	v2 += v1
	v1 = bits.RotateLeft64(v1, 17)
	v1 ^= v2
	v2 = bits.RotateLeft64(v2, 32)
	return v0, v1, v2, v3
}
