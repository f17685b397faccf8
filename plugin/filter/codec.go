package filter

import (
	"math"

	"github.com/sluice-rl/sluice/shared/state"
)

// Fast paths for the bucket value "{tokens}:{last_refill}" (six decimals,
// shared/state's format) on the request path.
//
// state.EncodeBucket formats with strconv.AppendFloat('f', 6). A unix time
// with six decimals has 16 significant digits, beyond strconv's fast
// fixed-precision algorithm (15 digits), so every encode takes the
// multiprecision path: about 1.7 us per bucket inside wasm, the single most
// expensive step of an allowed request. Decoding with strconv costs about
// 0.4 us.
//
// Here both numbers are handled as integers of micro-units: encoding rounds
// to the micro-unit (which the six-decimal text does anyway) and prints the
// integer; decoding reads the digits into an integer k and computes k/1e6,
// which for k < 2^53 is exactly the correctly rounded float ParseFloat
// would return. Anything outside that range, or any text not in the exact
// canonical shape, goes through shared/state, so the format and its strict
// validation stay defined there. codec_test.go checks both paths agree.

// maxMicro bounds the magnitudes handled here: |v|*1e6 < 2^53, so micro-unit
// counts are exact integers in a float64.
const maxMicro = 1 << 53

// encodeBucket appends the encoding of b (the same text as
// state.EncodeBucket of b rounded to six decimals).
func encodeBucket(dst []byte, b state.Bucket) []byte {
	t, ok1 := toMicro(b.Tokens)
	l, ok2 := toMicro(b.LastRefill)
	if !ok1 || !ok2 {
		return state.EncodeBucket(dst, b)
	}
	dst = appendMicro(dst, t)
	dst = append(dst, ':')
	return appendMicro(dst, l)
}

func toMicro(v float64) (int64, bool) {
	m := math.Round(v * 1e6)
	if !(m > -maxMicro && m < maxMicro) { // also false for NaN
		return 0, false
	}
	return int64(m), true
}

func appendMicro(dst []byte, m int64) []byte {
	if m < 0 {
		dst = append(dst, '-')
		m = -m
	}
	dst = appendInt(dst, m/1e6)
	frac := m % 1e6
	var f [7]byte
	f[0] = '.'
	for i := 6; i >= 1; i-- {
		f[i] = byte('0' + frac%10)
		frac /= 10
	}
	return append(dst, f[:]...)
}

// decodeBucket is state.DecodeBucket with a fast path for canonical values
// ("-?digits.6digits:digits.6digits").
func decodeBucket(v []byte) (state.Bucket, error) {
	i := 0
	t, i, ok := parseMicro(v, i, true)
	if ok && i < len(v) && v[i] == ':' {
		var l float64
		if l, i, ok = parseMicro(v, i+1, false); ok && i == len(v) {
			return state.Bucket{Tokens: t, LastRefill: l}, nil
		}
	}
	return state.DecodeBucket(v)
}

// parseMicro reads digits '.' six digits starting at v[i] and returns the
// value, the index after it and whether it was canonical and in range.
func parseMicro(v []byte, i int, signed bool) (float64, int, bool) {
	neg := false
	if signed && i < len(v) && v[i] == '-' {
		neg = true
		i++
	}
	var k int64
	start := i
	for i < len(v) && v[i] >= '0' && v[i] <= '9' {
		k = k*10 + int64(v[i]-'0')
		i++
		if i-start > 10 { // 2^53 micro-units is a 10-digit integer part
			return 0, i, false
		}
	}
	if i == start || i+7 > len(v) || v[i] != '.' {
		return 0, i, false
	}
	i++
	for j := 0; j < 6; j++ {
		c := v[i+j]
		if c < '0' || c > '9' {
			return 0, i, false
		}
		k = k*10 + int64(c-'0')
	}
	i += 6
	if k >= maxMicro {
		return 0, i, false
	}
	f := float64(k) / 1e6
	if neg {
		f = -f
	}
	return f, i, true
}
