package filter

import (
	"math"
	"strconv"
	"testing"
)

// appendDecimal writes exactly what strconv does, at every digit count and
// either side of each power of ten, the 32-bit boundary and the limits.
func TestAppendDecimalMatchesStrconv(t *testing.T) {
	vs := []int64{0, 1, 9, 10, 99, 100, math.MaxUint32 - 1, math.MaxUint32, math.MaxUint32 + 1,
		1e12, 999_999_999_999, math.MaxInt64, math.MinInt64, -1, -10}
	for p := int64(1); p <= 1e18; p *= 10 {
		vs = append(vs, p-1, p, p+1, 7*p+3)
	}
	for _, v := range vs {
		if got, want := string(appendDecimal([]byte("x"), v)), "x"+strconv.FormatInt(v, 10); got != want {
			t.Errorf("appendDecimal(%d) = %q, want %q", v, got, want)
		}
	}
}

// appendDecimal keeps what dst held and grows it when its capacity is short.
func TestAppendDecimalGrowsAndKeepsThePrefix(t *testing.T) {
	dst := make([]byte, 3, 4)
	copy(dst, "abc")
	got := appendDecimal(dst, 123456789012)
	if string(got) != "abc123456789012" {
		t.Fatalf("got %q", got)
	}
	if string(dst) != "abc" {
		t.Fatalf("dst changed to %q", dst)
	}
}

func FuzzAppendDecimal(f *testing.F) {
	for _, v := range []int64{0, 7, 42, 1e9, math.MaxUint32 + 1, math.MaxInt64, -5} {
		f.Add(v, "p")
	}
	f.Fuzz(func(t *testing.T, v int64, prefix string) {
		if got, want := string(appendDecimal([]byte(prefix), v)), prefix+strconv.FormatInt(v, 10); got != want {
			t.Fatalf("appendDecimal(%q, %d) = %q, want %q", prefix, v, got, want)
		}
	})
}
