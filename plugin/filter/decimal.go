package filter

import (
	"math/bits"
	"strconv"
)

// appendDecimal appends v in decimal: the bytes of strconv.AppendInt(dst,
// v, 10). A non-negative v (every number of the request path: header
// values, group numbers, delays) is written in place, its length counted
// first, so there is no call below this one and no copy from a scratch
// buffer: in wasm every call and every copy costs (a copy is a
// memory.copy, which Envoy's fast JIT runs as a call into the runtime).
// Digits are produced two at a time with 32-bit arithmetic, nine-digit
// chunks split off larger values first.
func appendDecimal(dst []byte, v int64) []byte {
	if v < 10 {
		if v < 0 {
			return strconv.AppendInt(dst, v, 10)
		}
		return append(dst, byte('0'+v))
	}
	u := uint64(v)
	// Digit count: bits.Len64 (one wasm i64.clz) scaled by log10(2),
	// corrected by one comparison.
	t := bits.Len64(u) * 1233 >> 12
	n := t + 1
	if u < pow10[t] {
		n = t
	}
	end := len(dst) + n
	if end > cap(dst) {
		dst = append(dst[:cap(dst)], make([]byte, end-cap(dst))...)
	}
	dst = dst[:end]
	i := end
	for u >= 1<<32 {
		q := u / 1e9
		lo := uint32(u - q*1e9)
		u = q
		for range 4 {
			d := lo % 100 * 2
			lo /= 100
			i -= 2
			dst[i], dst[i+1] = digitPairs[d], digitPairs[d+1]
		}
		i--
		dst[i] = byte('0' + lo)
	}
	w := uint32(u)
	for w >= 100 {
		d := w % 100 * 2
		w /= 100
		i -= 2
		dst[i], dst[i+1] = digitPairs[d], digitPairs[d+1]
	}
	if w >= 10 {
		dst[i-2], dst[i-1] = digitPairs[w*2], digitPairs[w*2+1]
	} else {
		dst[i-1] = byte('0' + w)
	}
	return dst
}

// digitPairs holds "00" to "99": digit pair d is digitPairs[2d:2d+2].
const digitPairs = "00010203040506070809" +
	"10111213141516171819" +
	"20212223242526272829" +
	"30313233343536373839" +
	"40414243444546474849" +
	"50515253545556575859" +
	"60616263646566676869" +
	"70717273747576777879" +
	"80818283848586878889" +
	"90919293949596979899"

// pow10[i] is 10^i, for the digit count of appendDecimal.
var pow10 = [20]uint64{
	1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9,
	1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19,
}
