// Package state encodes token-bucket state for proxy-wasm shared data.
//
// A bucket is stored as one shared-data entry (the Fairvisor token bucket design):
//
//	key:   tb:{rule_name}:{composite_limit_key}
//	value: "{tokens}:{last_refill}"   e.g. "87.432100:1736940000.000000"
//
// Both numbers are written with exactly six decimals. That is a rule with
// max_keys 0 (unbounded, exact per-key storage). By default a rule keeps its
// buckets in a fixed number of groups instead (group.go), each holding the
// slot records (slot.go) of up to Ways identities:
//
//	key:   tb:{rule_name}:#{group}
//	value: a group of slot records, each a fingerprint, bucket and identity, binary
//
// The package is pure Go (no I/O, no globals) and allocation-light: it runs
// on the request hot path inside the wasm filter and in the native admin
// server. It is the only codec of these values: the filter and the admin
// both call it.
package state

import (
	"errors"
	"math"
	"strconv"
)

// Bucket is the persisted state of one token bucket.
type Bucket struct {
	Tokens     float64 // tokens available at LastRefill (may be negative for reservations)
	LastRefill float64 // unix seconds of the last refill
}

// Stored is b as shared data keeps it, each number rounded to micro-units
// (EncodeSlot, EncodeBucket): the bucket the next request reads back.
func (b Bucket) Stored() Bucket {
	return Bucket{Tokens: roundMicro(b.Tokens), LastRefill: roundMicro(b.LastRefill)}
}

// Errors returned by DecodeBucket. They are sentinel values so decoding
// allocates nothing; compare with errors.Is.
var (
	ErrFormat     = errors.New(`state: bucket value is not "{tokens}:{last_refill}"`)
	ErrTokens     = errors.New("state: bucket tokens is not a finite number")
	ErrLastRefill = errors.New("state: bucket last_refill is not a finite number >= 0")
)

// EncodeBucket appends the encoding of b to dst and returns the extended
// buffer: "{tokens}:{last_refill}", both with six decimals.
//
// Each number is rounded to the nearest micro-unit (math.Round(v*1e6), ties
// away from zero) and printed as an integer count of micro-units; see
// AppendMicros. It does not allocate when dst has room.
func EncodeBucket(dst []byte, b Bucket) []byte {
	dst = AppendMicros(dst, b.Tokens)
	dst = append(dst, ':')
	return AppendMicros(dst, b.LastRefill)
}

// maxMicro bounds the magnitudes AppendMicros prints as integers:
// |v|*1e6 < 2^53, so a micro-unit count is an exact integer in a float64
// (|v| below about 9.007e9: every unix time until the year 2255, and any
// token count up to 9e9).
const maxMicro = 1 << 53

// AppendMicros appends v with exactly six decimals.
//
// Why not strconv.AppendFloat(v, 'f', 6)? A unix time with six decimals has
// 16 significant digits, past strconv's fast fixed-precision algorithm (15
// digits), so every such call takes the multiprecision path: about 1.7 us
// per bucket inside wasm, once the single most expensive step of an allowed
// request. Here v is rounded to an integer number of micro-units,
// m = math.Round(v*1e6), and m is printed as "{m/1e6}.{m%1e6, six
// digits}". The text is exactly what strconv prints for m/1e6 (the
// TestAppendMicrosMatchesStrconv and FuzzEncodeBucket checks); for v itself
// it can differ from strconv only in the last digit of a value that lies
// within one rounding error of a half micro-unit. Values outside
// |v|*1e6 < 2^53 (and NaN/Inf, which DecodeBucket rejects anyway) fall
// back to strconv.
func AppendMicros(dst []byte, v float64) []byte {
	m := math.Round(v * 1e6)
	if !(m > -maxMicro && m < maxMicro) { // also false for NaN
		return strconv.AppendFloat(dst, v, 'f', 6, 64)
	}
	k := int64(m)
	if k < 0 || (k == 0 && math.Signbit(m)) {
		// strconv prints the sign of a negative value that rounds to
		// zero ("-0.000000"); keep the text identical.
		dst = append(dst, '-')
		k = -k
	}
	dst = strconv.AppendInt(dst, k/1e6, 10)
	frac := k % 1e6
	var f [7]byte
	f[0] = '.'
	for i := 6; i >= 1; i-- {
		f[i] = byte('0' + frac%10)
		frac /= 10
	}
	return append(dst, f[:]...)
}

// DecodeBucket parses a value written by EncodeBucket. It is strict: the value
// must contain exactly one ':' separating two decimal numbers, tokens must be
// finite (negative is allowed) and last_refill finite and >= 0. Anything else
// (NaN, Inf, hex floats, spaces, underscores, empty parts) is an error.
// It never panics and does not allocate.
func DecodeBucket(v []byte) (Bucket, error) {
	// One pass for the values EncodeBucket writes; invalid values are
	// classified by decodeBucketSlow.
	tokens, i, ok := parseNumber(v, 0)
	if ok && i < len(v) && v[i] == ':' {
		last, j, ok := parseNumber(v, i+1)
		if ok && j == len(v) && last >= 0 {
			return Bucket{Tokens: tokens, LastRefill: last}, nil
		}
	}
	return Bucket{}, decodeBucketSlow(v)
}

// decodeBucketSlow returns why v is not a valid bucket value: ErrFormat
// unless it has exactly one ':', else ErrTokens or ErrLastRefill.
func decodeBucketSlow(v []byte) error {
	sep := -1
	for i, c := range v {
		if c == ':' {
			if sep >= 0 {
				return ErrFormat
			}
			sep = i
		}
	}
	if sep < 0 {
		return ErrFormat
	}
	if _, ok := parseDecimal(v[:sep]); !ok {
		return ErrTokens
	}
	return ErrLastRefill
}

// parseNumber reads a decimal number starting at v[i]: [-+]digits[.digits]
// with at least one digit. It stops at the first byte that cannot continue
// the number and returns the value, the index of that byte and whether the
// text read was a valid, finite number. The syntax check keeps strconv from
// accepting "inf", "nan", "0x1p3", "1e5" or "1_000". One pass, no
// allocation: it runs on every request inside wasm, where each byte costs.
func parseNumber(v []byte, i int) (float64, int, bool) {
	start := i
	neg := false
	if i < len(v) && (v[i] == '-' || v[i] == '+') {
		neg = v[i] == '-'
		i++
	}
	var mant uint64
	digits, frac, dot := 0, 0, false
	for ; i < len(v); i++ {
		c := v[i]
		if d := c - '0'; d <= 9 {
			digits++
			if dot {
				frac++
			}
			if mant < 1e18 {
				mant = mant*10 + uint64(d)
			}
			continue
		}
		if c == '.' && !dot {
			dot = true
			continue
		}
		break
	}
	if digits == 0 {
		return 0, i, false
	}
	// Fast path (Clinger's; strconv's "exact" case): a mantissa below 2^53
	// and a power of ten up to 1e22 are exact float64s, so one division is
	// correctly rounded and equals strconv.ParseFloat's result. Values
	// EncodeBucket writes for real buckets (unix times with 6 decimals have
	// 16 digits) land here.
	if digits <= 19 && mant < 1<<53 && frac < len(pow10) {
		f := float64(mant) / pow10[frac]
		if neg {
			f = -f
		}
		return f, i, true
	}
	// The conversion of a []byte to string in a call argument does not
	// allocate here: strconv does not retain it.
	f, err := strconv.ParseFloat(string(v[start:i]), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, i, false
	}
	return f, i, true
}

// parseDecimal parses a whole byte slice as a number (parseNumber of all
// of b).
func parseDecimal(b []byte) (float64, bool) {
	f, i, ok := parseNumber(b, 0)
	return f, ok && i == len(b)
}

var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// BucketKey returns the shared-data key of a bucket: "tb:{rule}:{composite}".
func BucketKey(rule, composite string) string {
	return "tb:" + rule + ":" + composite
}
