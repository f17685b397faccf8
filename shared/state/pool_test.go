package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"
)

func TestPoolRoundTrip(t *testing.T) {
	id := []byte("0123456789abcdef0123456789abcdef")
	for _, p := range []Pool{
		{Mode: PoolLease, Tokens: 5_000_000, Stamp: 1_700_000_000_123, Spent: 3, LastSync: 1},
		{Mode: PoolShare, Stamp: -5, DenyUntil: 99},
		{Mode: PoolShare, Tokens: -2_500_000, Stamp: 1}, // a fallback bucket in debt
		{Mode: PoolShare, Tokens: -MaxPoolDebt, Stamp: 1},
		{Mode: PoolLease, Tokens: math.MaxInt64, Stamp: math.MinInt64, Spent: math.MaxInt64, DenyUntil: -1, LastSync: math.MaxInt64},
	} {
		rec := EncodePool(nil, 0xfeedface, p, id)
		s, err := DecodePool(rec)
		if err != nil || s.Pool != p || s.Fingerprint != 0xfeedface || !bytes.Equal(s.Identity, id) {
			t.Fatalf("round trip of %+v: %+v, %v", p, s, err)
		}
		if len(rec) != poolHeader+len(id) {
			t.Errorf("record of %d bytes, want %d: one length per identity length", len(rec), poolHeader+len(id))
		}
	}
}

func TestDecodePoolRejectsWhatItCannotRead(t *testing.T) {
	good := EncodePool(nil, 7, Pool{Mode: PoolLease, Tokens: 1}, []byte("id"))
	with := func(at int, b ...byte) []byte {
		v := append([]byte(nil), good...)
		copy(v[at:], b)
		return v
	}
	negative := binary.LittleEndian.AppendUint64(nil, uint64(1<<63))
	beyondDebt := -MaxPoolDebt - 1
	for _, c := range []struct {
		name string
		v    []byte
		want error
	}{
		{"empty", nil, ErrPoolFormat},
		{"truncated header", good[:poolHeader-1], ErrPoolFormat},
		{"no identity", good[:poolHeader], ErrIdentity},
		{"another format", with(0, SlotFormat), ErrPoolFormat},
		{"unknown mode", with(9, 'X'), ErrPoolFormat},
		{"negative tokens", with(10, negative...), ErrPoolTokens},
		{"a lease in debt", with(10, binary.LittleEndian.AppendUint64(nil, ^uint64(0))...), ErrPoolTokens},
		{"a fallback bucket beyond the debt bound", with(9, append([]byte{PoolShare}, binary.LittleEndian.AppendUint64(nil, uint64(beyondDebt))...)...), ErrPoolTokens},
		{"negative spent", with(26, negative...), ErrPoolTokens},
		{"identity too long", append(good[:poolHeader:poolHeader], bytes.Repeat([]byte("i"), MaxIdentity+1)...), ErrIdentity},
		{"text form of earlier versions", []byte("0123456789abcdef0123456789abcdef:L:1:2:3:4:5"), ErrPoolFormat},
	} {
		if _, err := DecodePool(c.v); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func TestEncodePoolCutsALongIdentity(t *testing.T) {
	long := bytes.Repeat([]byte("x"), MaxIdentity+10)
	s, err := DecodePool(EncodePool(nil, 1, Pool{Mode: PoolShare}, long))
	if err != nil || len(s.Identity) != MaxIdentity {
		t.Fatalf("identity of %d bytes stored as %d (%v), want %d", len(long), len(s.Identity), err, MaxIdentity)
	}
}

func TestPoolCodecAllocs(t *testing.T) {
	id, buf := []byte("0123456789abcdef0123456789abcdef"), make([]byte, 0, 128)
	p := Pool{Mode: PoolLease, Tokens: 9}
	if n := testing.AllocsPerRun(100, func() {
		rec := EncodePool(buf[:0], 1, p, id)
		if _, err := DecodePool(rec); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per encode and decode, want 0", n)
	}
}

func FuzzDecodePool(f *testing.F) {
	f.Add(EncodePool(nil, 3, Pool{Mode: PoolLease, Tokens: 7, Stamp: 9}, []byte("0123456789abcdef0123456789abcdef")))
	f.Add(EncodePool(nil, 0, Pool{Mode: PoolShare}, []byte("k")))
	f.Add([]byte("0123456789abcdef0123456789abcdef:L:1:2:3:4:5"))
	f.Add([]byte{PoolFormat})
	f.Fuzz(func(t *testing.T, v []byte) {
		s, err := DecodePool(v)
		if err != nil {
			return
		}
		if again := EncodePool(nil, s.Fingerprint, s.Pool, s.Identity); !bytes.Equal(again, v) {
			t.Fatalf("%x decodes to %+v, which encodes to %x", v, s, again)
		}
	})
}
