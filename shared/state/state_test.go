package state

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
)

func TestEncodeBucketTextFormat(t *testing.T) {
	// The Fairvisor token bucket: tb:per-org-rps:org-abc -> "87.432100:1736940000.000000"
	got := string(EncodeBucket(nil, Bucket{Tokens: 87.4321, LastRefill: 1736940000}))
	if got != "87.432100:1736940000.000000" {
		t.Errorf("EncodeBucket = %q", got)
	}
	if k := BucketKey("per-org-rps", "org-abc"); k != "tb:per-org-rps:org-abc" {
		t.Errorf("BucketKey = %q", k)
	}
	b, err := DecodeBucket([]byte("87.432100:1736940000.000000"))
	if err != nil || b != (Bucket{Tokens: 87.4321, LastRefill: 1736940000}) {
		t.Errorf("DecodeBucket = %+v, %v", b, err)
	}
}

func TestEncodeBucketAppends(t *testing.T) {
	buf := []byte("prefix|")
	got := string(EncodeBucket(buf, Bucket{Tokens: -1.5, LastRefill: 0.0000004}))
	if got != "prefix|-1.500000:0.000000" {
		t.Errorf("got %q", got)
	}
}

func TestBucketKeyComposite(t *testing.T) {
	// Composite keys may contain ':' themselves; the key is a plain concatenation.
	if k := BucketKey("r", "a:b|c"); k != "tb:r:a:b|c" {
		t.Errorf("BucketKey = %q", k)
	}
}

func TestDecodeBucket(t *testing.T) {
	good := []struct {
		in   string
		want Bucket
	}{
		{"0:0", Bucket{0, 0}},
		{"10.000000:1736940000.123456", Bucket{10, 1736940000.123456}},
		{"-3.5:1", Bucket{-3.5, 1}},
		{"+2:3", Bucket{2, 3}},
		{".5:1.", Bucket{0.5, 1}},
		{"-0:0", Bucket{0, 0}},
	}
	for _, tc := range good {
		b, err := DecodeBucket([]byte(tc.in))
		if err != nil || b != tc.want {
			t.Errorf("DecodeBucket(%q) = %+v, %v; want %+v", tc.in, b, err, tc.want)
		}
	}
	bad := []struct {
		in   string
		want error
	}{
		{"", ErrFormat},
		{"1", ErrFormat},
		{"1:2:3", ErrFormat},
		{"::", ErrFormat},
		{":1", ErrTokens},
		{"1:", ErrLastRefill},
		{"NaN:1", ErrTokens},
		{"nan:1", ErrTokens},
		{"Inf:1", ErrTokens},
		{"-Inf:1", ErrTokens},
		{"+Inf:1", ErrTokens},
		{"1:NaN", ErrLastRefill},
		{"1:Inf", ErrLastRefill},
		{"1:-1", ErrLastRefill},
		{"1:-0.000001", ErrLastRefill},
		{"1e3:1", ErrTokens},
		{"0x10:1", ErrTokens},
		{"1_0:1", ErrTokens},
		{" 1:1", ErrTokens},
		{"1:1 ", ErrLastRefill},
		{"1:1\n", ErrLastRefill},
		{"1..2:1", ErrTokens},
		{".:1", ErrTokens},
		{"-:1", ErrTokens},
		{"--1:1", ErrTokens},
		{"1:+", ErrLastRefill},
		{strings.Repeat("9", 400) + ":1", ErrTokens}, // overflows to Inf
		{"1:" + strings.Repeat("9", 400), ErrLastRefill},
		{"\xff:1", ErrTokens},
	}
	for _, tc := range bad {
		b, err := DecodeBucket([]byte(tc.in))
		if !errors.Is(err, tc.want) {
			t.Errorf("DecodeBucket(%q) = %+v, %v; want %v", tc.in, b, err, tc.want)
		}
		if err != nil && b != (Bucket{}) {
			t.Errorf("DecodeBucket(%q) returned %+v with an error", tc.in, b)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for _, b := range []Bucket{
		{0, 0}, {1, 1}, {87.4321, 1736940000}, {-12.25, 1736940000.5}, {1e12, 4e9}, {1e-7, 1e-7},
		{math.MaxFloat64, math.MaxFloat64}, {-math.MaxFloat64, 0},
	} {
		got, err := DecodeBucket(EncodeBucket(nil, b))
		if err != nil {
			t.Errorf("round trip %+v: %v", b, err)
			continue
		}
		if !within(got.Tokens, b.Tokens) || !within(got.LastRefill, b.LastRefill) {
			t.Errorf("round trip %+v = %+v", b, got)
		}
	}
}

// within reports whether got equals want to within the encoding's six
// decimals (plus float rounding relative to the magnitude).
func within(got, want float64) bool {
	return math.Abs(got-want) <= 5e-7+math.Abs(want)*1e-15
}

func TestDecodeBucketAllocs(t *testing.T) {
	v := []byte("87.432100:1736940000.000000")
	if n := testing.AllocsPerRun(100, func() { _, _ = DecodeBucket(v) }); n != 0 {
		t.Errorf("DecodeBucket allocates %v times per call", n)
	}
	bad := []byte("87.4x:1")
	if n := testing.AllocsPerRun(100, func() { _, _ = DecodeBucket(bad) }); n != 0 {
		t.Errorf("DecodeBucket (error) allocates %v times per call", n)
	}
	buf := make([]byte, 0, 64)
	if n := testing.AllocsPerRun(100, func() { buf = EncodeBucket(buf[:0], Bucket{87.4321, 1736940000}) }); n != 0 {
		t.Errorf("EncodeBucket into a large enough buffer allocates %v times per call", n)
	}
}

func BenchmarkEncodeBucket(b *testing.B) {
	buf := make([]byte, 0, 64)
	bk := Bucket{Tokens: 87.4321, LastRefill: 1736940000.123456}
	b.ReportAllocs()
	for b.Loop() {
		buf = EncodeBucket(buf[:0], bk)
	}
}

func BenchmarkDecodeBucket(b *testing.B) {
	v := []byte("87.432100:1736940000.123456")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeBucket(v); err != nil {
			b.Fatal(err)
		}
	}
}

func TestDecodeMatchesStrconv(t *testing.T) {
	// Values around the fast path's limits must equal strconv's result.
	for _, s := range []string{
		"1736940000.123456", "9007199254740991", "9007199254740992", "9007199254740993",
		"0.1", "0.000000000000000000001", "0.0000000000000000000001", "0.00000000000000000000001",
		"123456789012345678", "1234567890123456789", "12345678901234567890", "-0.3", "+0.7",
		"4503599627370497.5", "87.432100",
	} {
		got, ok := parseDecimal([]byte(s))
		want, err := strconv.ParseFloat(s, 64)
		if !ok || err != nil || got != want {
			t.Errorf("parseDecimal(%q) = %v, %v; strconv: %v, %v", s, got, ok, want, err)
		}
	}
}
