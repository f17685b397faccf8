package state

import (
	"encoding/binary"
	"errors"
	"math"
	"math/bits"
)

// Overflow records: a group's shared limit for the identities that find no
// way of their group (every way holds another identity's active bucket or
// window). Binary, like slot records:
//
//	bucket:  OverflowFormat (0x08)       | sharers u64 | tokens f64 | last_refill f64
//	window:  WindowOverflowFormat (0x09) | sharers u64 | window (as in a window slot)
//
// (little-endian; numbers rounded to micro-units as in slot records).
//
//   - the state: a token bucket or window with the rule's own rate and
//     burst (limit and window), debited by every identity that overflows in
//     the group, and copied into the new bucket of an identity that claims
//     a way of the group (the filter's store.go says why).
//   - sharers: a 64-bit linear-counting sketch of the identities that drew
//     on it since it was last idle (full, or no use in its window): bit
//     SharerBit(fp) per identity. EstimateSharers turns it into a count.
//
// A record that does not decode reads as no record (an idle limit).

// Format bytes of overflow records (distinct from every other record and
// group format).
const (
	OverflowFormat       = 0x08
	WindowOverflowFormat = 0x09
)

// overflowSize is the length of a bucket overflow record.
const overflowSize = 25

// ErrOverflowFormat is returned for a value that is not an overflow record.
var ErrOverflowFormat = errors.New("state: overflow record is truncated or not in an overflow format")

// EncodeOverflow appends a bucket overflow record. It does not allocate
// when dst has room.
func EncodeOverflow(dst []byte, sharers uint64, b Bucket) []byte {
	dst = append(dst, OverflowFormat)
	dst = binary.LittleEndian.AppendUint64(dst, sharers)
	dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(roundMicro(b.Tokens)))
	return binary.LittleEndian.AppendUint64(dst, math.Float64bits(roundMicro(b.LastRefill)))
}

// DecodeOverflow parses a bucket overflow record: exactly 25 bytes, tokens
// finite, last_refill finite and >= 0. It never panics and does not
// allocate.
func DecodeOverflow(v []byte) (sharers uint64, b Bucket, err error) {
	if len(v) != overflowSize || v[0] != OverflowFormat {
		return 0, Bucket{}, ErrOverflowFormat
	}
	tokens := math.Float64frombits(binary.LittleEndian.Uint64(v[9:]))
	last := math.Float64frombits(binary.LittleEndian.Uint64(v[17:]))
	switch {
	case !isFinite(tokens):
		return 0, Bucket{}, ErrTokens
	case !isFinite(last) || last < 0:
		return 0, Bucket{}, ErrLastRefill
	}
	return binary.LittleEndian.Uint64(v[1:]), Bucket{Tokens: tokens, LastRefill: last}, nil
}

// EncodeWindowOverflow appends a window overflow record. It does not
// allocate when dst has room.
func EncodeWindowOverflow(dst []byte, sharers uint64, w *Window) []byte {
	dst = append(dst, WindowOverflowFormat)
	dst = binary.LittleEndian.AppendUint64(dst, sharers)
	return appendWindow(dst, w)
}

// DecodeWindowOverflow parses a window overflow record into w (strict like
// DecodeWindow; nothing may follow the window). It never panics and does
// not allocate.
func DecodeWindowOverflow(v []byte, w *Window) (sharers uint64, err error) {
	if len(v) < 9 || v[0] != WindowOverflowFormat {
		return 0, ErrOverflowFormat
	}
	rest, err := decodeWindow(v[9:], w)
	if err != nil {
		return 0, err
	}
	if len(rest) != 0 {
		return 0, ErrOverflowFormat
	}
	return binary.LittleEndian.Uint64(v[1:]), nil
}

// SharerBit is the bit an identity with fingerprint fp sets in an overflow
// record's sharers: one of 64, from the fingerprint's low bits (a group is
// chosen by its high bits, so the identities of one group spread evenly
// over them).
func SharerBit(fp uint64) uint64 { return 1 << (fp & 63) }

// MaxSharers is what EstimateSharers returns for a full sketch: it means
// "about this many or more".
const MaxSharers = 266 // 64 ln 64, rounded

// EstimateSharers estimates how many distinct identities set the bits of a
// sharers sketch (linear counting: 64 ln(64 / zero bits), rounded; exact
// enough for a handful, within about 20% up to about 100). A full sketch
// gives MaxSharers.
func EstimateSharers(sharers uint64) int {
	zeros := 64 - bits.OnesCount64(sharers)
	if zeros == 0 {
		return MaxSharers
	}
	return int(math.Round(64 * math.Log(64/float64(zeros))))
}
