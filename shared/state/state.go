// Package state encodes token-bucket state for proxy-wasm shared data.
//
// A bucket is stored as one shared-data entry (seed 001):
//
//	key:   tb:{rule_name}:{composite_limit_key}
//	value: "{tokens}:{last_refill}"   e.g. "87.432100:1736940000.000000"
//
// Both numbers are written with exactly six decimals. The package is pure Go
// (no I/O, no globals) and allocation-light: it runs on the request hot path
// inside the wasm filter and in the native admin server.
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

// Errors returned by DecodeBucket. They are sentinel values so decoding
// allocates nothing; compare with errors.Is.
var (
	ErrFormat     = errors.New(`state: bucket value is not "{tokens}:{last_refill}"`)
	ErrTokens     = errors.New("state: bucket tokens is not a finite number")
	ErrLastRefill = errors.New("state: bucket last_refill is not a finite number >= 0")
)

// EncodeBucket appends the encoding of b to dst and returns the extended
// buffer: "{tokens}:{last_refill}", both with six decimals.
func EncodeBucket(dst []byte, b Bucket) []byte {
	dst = strconv.AppendFloat(dst, b.Tokens, 'f', 6, 64)
	dst = append(dst, ':')
	return strconv.AppendFloat(dst, b.LastRefill, 'f', 6, 64)
}

// DecodeBucket parses a value written by EncodeBucket. It is strict: the value
// must contain exactly one ':' separating two decimal numbers, tokens must be
// finite (negative is allowed) and last_refill finite and >= 0. Anything else
// (NaN, Inf, hex floats, spaces, underscores, empty parts) is an error.
// It never panics and does not allocate.
func DecodeBucket(v []byte) (Bucket, error) {
	sep := -1
	for i, c := range v {
		if c == ':' {
			if sep >= 0 {
				return Bucket{}, ErrFormat
			}
			sep = i
		}
	}
	if sep < 0 {
		return Bucket{}, ErrFormat
	}
	tokens, ok := parseDecimal(v[:sep])
	if !ok {
		return Bucket{}, ErrTokens
	}
	last, ok := parseDecimal(v[sep+1:])
	if !ok || last < 0 {
		return Bucket{}, ErrLastRefill
	}
	return Bucket{Tokens: tokens, LastRefill: last}, nil
}

// parseDecimal accepts [-+]digits[.digits] (at least one digit overall) and
// returns a finite value. The syntax check keeps strconv from accepting
// "inf", "nan", "0x1p3", "1e5" or "1_000".
func parseDecimal(b []byte) (float64, bool) {
	i, neg := 0, false
	if i < len(b) && (b[i] == '-' || b[i] == '+') {
		neg = b[i] == '-'
		i++
	}
	var mant uint64
	digits, frac, dot := 0, 0, false
	for ; i < len(b); i++ {
		c := b[i]
		switch {
		case c >= '0' && c <= '9':
			digits++
			if dot {
				frac++
			}
			if mant < 1e18 {
				mant = mant*10 + uint64(c-'0')
			}
		case c == '.' && !dot:
			dot = true
		default:
			return 0, false
		}
	}
	if digits == 0 {
		return 0, false
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
		return f, true
	}
	// The conversion of a []byte to string in a call argument does not
	// allocate here: strconv does not retain it.
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// BucketKey returns the shared-data key of a bucket: "tb:{rule}:{composite}".
func BucketKey(rule, composite string) string {
	return "tb:" + rule + ":" + composite
}
