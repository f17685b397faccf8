package state

import (
	"strings"
	"testing"
)

// The reference vectors of SipHash-2-4 (the paper's appendix and the
// reference implementation's test vectors, as most implementations pin
// them): keys and messages as bytes.
func TestSipHash24Vectors(t *testing.T) {
	seq := func(n int) string {
		var b []byte
		for i := 0; i < n; i++ {
			b = append(b, byte(i))
		}
		return string(b)
	}
	ref, _ := HashKeyFrom([]byte(seq(16)))
	for _, c := range []struct {
		k    HashKey
		m    string
		want uint64
	}{
		{ref, seq(15), 0xa129ca6149be45e5},
		{HashKey{}, "Hello world", 0xc9e8a3021f3822d9},
		{HashKey{}, "", 0x1e924b9d737700d7},
		{HashKey{}, "12345678123", 0x0f95d77ccdb0649f},
		{HashKey{}, strings.Repeat("\x00", 8), 0xe849e8bb6ffe2567},
		{HashKey{}, strings.Repeat("\x00", 1535), 0xe74d1c0ab64b2afa},
		{ref, "", 0x726fdb47dd0e0e31},
	} {
		if got := SipHash24(c.k, c.m); got != c.want {
			t.Errorf("SipHash24(%x, %d bytes) = %#x, want %#x", c.k, len(c.m), got, c.want)
		}
	}
}

// The key changes the group of the same identities: under two keys, most
// of 1000 identities land in different groups of a 1024-group table.
func TestKeyedFingerprintDependsOnKey(t *testing.T) {
	a, b := HashKey{1, 2}, HashKey{3, 4}
	same := 0
	for i := 0; i < 1000; i++ {
		id := "10.0.0." + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if GroupOf(KeyedFingerprint(a, id), 1024) == GroupOf(KeyedFingerprint(b, id), 1024) {
			same++
		}
	}
	if same > 10 {
		t.Errorf("%d of 1000 identities in the same group under two keys", same)
	}
	k, ok := HashKeyFrom(AppendHashKey(nil, HashKey{0x0102030405060708, 0x1112131415161718}))
	if !ok || k != (HashKey{0x0102030405060708, 0x1112131415161718}) {
		t.Errorf("HashKey round trip: %x %v", k, ok)
	}
	if _, ok := HashKeyFrom(make([]byte, 15)); ok {
		t.Error("a 15-byte key read")
	}
}

func TestKeyedFingerprintAllocs(t *testing.T) {
	id := "203.0.113.7"
	if n := testing.AllocsPerRun(100, func() { _ = KeyedFingerprint(HashKey{1, 2}, id) }); n != 0 {
		t.Errorf("%v allocations", n)
	}
}
