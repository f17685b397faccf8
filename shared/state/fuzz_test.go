package state

import (
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
