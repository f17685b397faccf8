package state

import "testing"

// Delayed admission leaves buckets in debt: tokens down to
// -tokens_per_second*max_delay (at most 1e12/s * 60 s). Both codecs must
// round-trip them, in the fast integer path and the strconv fallback.
func TestNegativeTokensRoundTrip(t *testing.T) {
	for _, tokens := range []float64{-0.000001, -0.5, -1, -4096, -59999.999999, -6e4 * 1e3, -1e12 * 60} {
		b := Bucket{Tokens: tokens, LastRefill: 1736940000.123456}
		got, err := DecodeBucket(EncodeBucket(nil, b))
		if err != nil || !within(got.Tokens, b.Tokens) || !within(got.LastRefill, b.LastRefill) {
			t.Errorf("bucket %v: %+v %v", tokens, got, err)
		}
		s, err := DecodeSlot(EncodeSlot(nil, 0xfeed, b, "10.0.0.1|a:b"))
		if err != nil || !within(s.Bucket.Tokens, b.Tokens) || s.Fingerprint != 0xfeed || string(s.Identity) != "10.0.0.1|a:b" {
			t.Errorf("slot %v: %+v %v", tokens, s, err)
		}
	}
}
