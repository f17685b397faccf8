package state

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
)

// FuzzDecodeBucket: DecodeBucket never panics; whatever it accepts is finite
// with last_refill >= 0 and survives an encode/decode round trip.
func FuzzDecodeBucket(f *testing.F) {
	for _, s := range []string{
		"87.432100:1736940000.000000", "0:0", "-1.5:2", "", ":", "1:2:3", "NaN:1", "1:Inf",
		"1e3:1", "0x1p3:1", "-0.000000:0.000000", "99999999999999999999999999:1",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		b, err := DecodeBucket(v)
		if err != nil {
			if b != (Bucket{}) {
				t.Fatalf("error %v with non-zero bucket %+v", err, b)
			}
			return
		}
		if math.IsNaN(b.Tokens) || math.IsInf(b.Tokens, 0) || math.IsNaN(b.LastRefill) || math.IsInf(b.LastRefill, 0) || b.LastRefill < 0 {
			t.Fatalf("accepted %q as %+v", v, b)
		}
		// The fast path agrees bit for bit with strconv.
		tok, last, _ := strings.Cut(string(v), ":")
		wt, err1 := strconv.ParseFloat(tok, 64)
		wl, err2 := strconv.ParseFloat(last, 64)
		if err1 != nil || err2 != nil || wt != b.Tokens || wl != b.LastRefill {
			t.Fatalf("DecodeBucket(%q) = %+v; strconv gives %v (%v), %v (%v)", v, b, wt, err1, wl, err2)
		}
		enc := EncodeBucket(nil, b)
		b2, err := DecodeBucket(enc)
		if err != nil {
			t.Fatalf("re-decoding %q (from %q): %v", enc, v, err)
		}
		if !within(b2.Tokens, b.Tokens) || !within(b2.LastRefill, b.LastRefill) {
			t.Fatalf("round trip %+v -> %q -> %+v", b, enc, b2)
		}
	})
}

// FuzzEncodeBucket: every finite bucket with last_refill >= 0 encodes to a
// value that decodes back within 1e-6.
func FuzzEncodeBucket(f *testing.F) {
	f.Add(87.4321, 1736940000.0)
	f.Add(-5.0, 0.0)
	f.Add(-6e13, 1736940000.5) // the deepest debt max_delay_ms allows (1e12/s for 60 s)
	f.Add(1e300, 1e-300)
	f.Fuzz(func(t *testing.T, tokens, last float64) {
		if math.IsNaN(tokens) || math.IsInf(tokens, 0) || math.IsNaN(last) || math.IsInf(last, 0) || last < 0 {
			return
		}
		enc := EncodeBucket(nil, Bucket{tokens, last})
		b, err := DecodeBucket(enc)
		if err != nil {
			t.Fatalf("DecodeBucket(%q): %v", enc, err)
		}
		if !within(b.Tokens, tokens) || !within(b.LastRefill, last) {
			t.Fatalf("round trip {%v %v} -> %q -> %+v", tokens, last, enc, b)
		}
	})
}

// FuzzAppendMicros: the integer fast path prints exactly what strconv prints
// for the value rounded to micro-units, for every float64.
func FuzzAppendMicros(f *testing.F) {
	f.Add(1736940000.123456)
	f.Add(-0.0000005)
	f.Add(9007199254.740991)
	f.Add(math.Inf(-1))
	f.Fuzz(func(t *testing.T, v float64) {
		checkMicros(t, v)
	})
}

// FuzzDecodeSlot: DecodeSlot never panics; whatever it accepts re-encodes
// (in SlotFormat) to the identical value when it was a canonical binary
// record (V1: without its mark), and always decodes back to the same
// fingerprint and identity and (within the six decimals) bucket. A valid
// record keeps its meaning in the V1 layout, whatever the mark holds.
func FuzzDecodeSlot(f *testing.F) {
	for _, s := range []string{
		"3f0c2a9be4d10f57:9.000000:1736940000.250000:10.0.0.1",
		"0000000000000000:-1.500000:0.000000:a:b:c",
		"ffffffffffffffff:1e3:1:x",
		"ffffffffffffffff:1:2:",
		"FFFFFFFFFFFFFFFF:1:2:x",
		"87.432100:1736940000.000000",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Add(EncodeSlot(nil, 0x3f0c2a9be4d10f57, Bucket{9, 1736940000.25}, "10.0.0.1"))
	f.Add(EncodeSlot(nil, 0, Bucket{-6e13, 0}, "a"))
	f.Add(EncodeSlot(nil, 1, Bucket{1, 2}, "")[:slotHeader-3])
	f.Add(appendSlotV1(nil, 0x3f0c2a9be4d10f57, Bucket{9, 1736940000.25}, math.Float64bits(1736940012.000001), "10.0.0.1"))
	f.Add(appendSlotV1(nil, 7, Bucket{-1.5, 0}, math.Float64bits(math.NaN()), "\x00|#"))
	f.Add(appendSlotV1(nil, 1, Bucket{1, 2}, 0, "")[:slotHeaderV1-3])
	f.Fuzz(func(t *testing.T, v []byte) {
		s, err := DecodeSlot(v)
		if err != nil {
			if s.Fingerprint != 0 || s.Bucket != (Bucket{}) || s.Identity != nil {
				t.Fatalf("error %v with non-zero slot %+v", err, s)
			}
			return
		}
		b := s.Bucket
		if math.IsNaN(b.Tokens) || math.IsInf(b.Tokens, 0) || math.IsNaN(b.LastRefill) || math.IsInf(b.LastRefill, 0) ||
			b.LastRefill < 0 || len(s.Identity) == 0 || len(s.Identity) > MaxIdentity {
			t.Fatalf("accepted %q as %+v", v, s)
		}
		enc := EncodeSlot(nil, s.Fingerprint, b, string(s.Identity))
		s2, err := DecodeSlot(enc)
		if err != nil {
			t.Fatalf("re-decoding %q (from %q): %v", enc, v, err)
		}
		if s2.Fingerprint != s.Fingerprint || string(s2.Identity) != string(s.Identity) ||
			!within(s2.Bucket.Tokens, b.Tokens) || !within(s2.Bucket.LastRefill, b.LastRefill) {
			t.Fatalf("round trip %q -> %+v -> %q -> %+v", v, s, enc, s2)
		}
		if canon := canonicalSlot(v, b); canon != nil && string(enc) != string(canon) {
			t.Fatalf("canonical record %x re-encoded as %x", v, enc)
		}
		// The same record in the V1 layout, with the fingerprint's bits as
		// a mark (often NaN or negative: never checked).
		s1, err := DecodeSlot(appendSlotV1(nil, s.Fingerprint, b, ^s.Fingerprint, string(s.Identity)))
		if err != nil || s1.Fingerprint != s.Fingerprint || s1.Bucket != b || string(s1.Identity) != string(s.Identity) {
			t.Fatalf("%+v in the V1 layout: %+v, %v", s, s1, err)
		}
		// The bucket part agrees with DecodeBucket.
		if b2, err := DecodeBucket(EncodeBucket(nil, b)); err != nil || !within(b2.Tokens, b.Tokens) {
			t.Fatalf("bucket part %+v: %v", b, err)
		}
	})
}

// canonicalSlot returns the SlotFormat record a valid binary record v with
// bucket b re-encodes to if it is canonical (its numbers already rounded to
// micro-units), else nil.
func canonicalSlot(v []byte, b Bucket) []byte {
	if roundMicro(b.Tokens) != b.Tokens || roundMicro(b.LastRefill) != b.LastRefill {
		return nil
	}
	switch v[0] {
	case SlotFormat:
		return v
	case SlotFormatV1:
		return append(append([]byte{SlotFormat}, v[1:slotHeader]...), v[slotHeaderV1:]...)
	}
	return nil
}

// FuzzEncodeSlot: any fingerprint, finite bucket and identity encode to a
// bounded value that decodes back.
func FuzzEncodeSlot(f *testing.F) {
	f.Add(uint64(0x3f0c2a9be4d10f57), 9.0, 1736940000.25, "10.0.0.1")
	f.Add(uint64(0), -5.0, 0.0, "a:b")
	f.Add(uint64(3), -6e13, 1736940000.5, "deep-debt")
	f.Add(uint64(1), 1e12, 1e-300, strings.Repeat("k", 300))
	f.Add(uint64(2), 1.0, 1.0, "")
	f.Add(uint64(math.MaxUint64), 0.0000005, 9007199254.740993, strings.Repeat("\xff", MaxIdentity))
	f.Fuzz(func(t *testing.T, fp uint64, tokens, last float64, identity string) {
		if math.IsNaN(tokens) || math.IsInf(tokens, 0) || math.IsNaN(last) || math.IsInf(last, 0) || last < 0 {
			return
		}
		enc := EncodeSlot(nil, fp, Bucket{tokens, last}, identity)
		s, err := DecodeSlot(enc)
		if identity == "" {
			if !errors.Is(err, ErrIdentity) {
				t.Fatalf("empty identity: %v", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("DecodeSlot(%q): %v", enc, err)
		}
		if s.Fingerprint != fp || string(s.Identity) != string(AppendIdentity(nil, identity)) ||
			!within(s.Bucket.Tokens, tokens) || !within(s.Bucket.LastRefill, last) {
			t.Fatalf("round trip (%x, %v, %v, %q) -> %q -> %+v", fp, tokens, last, identity, enc, s)
		}
		if enc[0] != SlotFormat || len(enc) != slotHeader+len(s.Identity) || len(enc) > slotHeader+MaxIdentity {
			t.Fatalf("(%x, %q) encoded as %d bytes %x", fp, identity, len(enc), enc)
		}
	})
}

// FuzzDecodeSlotInto: decoding into a slot that held another record gives
// exactly DecodeSlot's slot and error (the zero Slot on error).
func FuzzDecodeSlotInto(f *testing.F) {
	f.Add(EncodeSlot(nil, 42, Bucket{Tokens: 3, LastRefill: 1.7e9}, "client-1"))
	f.Add([]byte{SlotFormat, 1, 2})
	f.Add([]byte("00000000000000ab:1.5:1700000000:who"))
	f.Fuzz(func(t *testing.T, v []byte) {
		want, wantErr := DecodeSlot(v)
		s := Slot{Fingerprint: 9, Bucket: Bucket{Tokens: 9, LastRefill: 9}, Identity: []byte("stale")}
		err := DecodeSlotInto(v, &s)
		if err != wantErr || s.Fingerprint != want.Fingerprint || string(s.Identity) != string(want.Identity) ||
			math.Float64bits(s.Bucket.Tokens) != math.Float64bits(want.Bucket.Tokens) ||
			math.Float64bits(s.Bucket.LastRefill) != math.Float64bits(want.Bucket.LastRefill) ||
			(s.Identity == nil) != (want.Identity == nil) {
			t.Fatalf("DecodeSlotInto(%q) = %+v, %v; DecodeSlot %+v, %v", v, s, err, want, wantErr)
		}
	})
}
