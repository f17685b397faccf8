package state

import (
	"encoding/binary"
	"errors"
	"math"
	"strconv"
)

// Bounded storage (issue 4).
//
// Envoy's shared data has no delete and no TTL, so one key per client (seed
// 001's "tb:{rule}:{composite}") grows the proxy's memory with every
// distinct identity ever seen. A rule with max_keys = N > 0 instead keeps its
// buckets in at most N fixed keys, its slots:
//
//	key:   tb:{rule}:#{slot}                                   slot in [0, N)
//	value: the slot's bucket, its owner and the slot's spill mark, binary:
//
//	  byte  0       SlotFormat (0x01)
//	  bytes 1-8     fingerprint, uint64, little-endian
//	  bytes 9-16    tokens, float64 (IEEE 754 bits, little-endian)
//	  bytes 17-24   last_refill, float64 (unix seconds)
//	  bytes 25-32   spill_until, float64 (unix seconds; 0: no mark)
//	  bytes 33-     identity, 1 to MaxIdentity bytes
//
//   - fingerprint: Fingerprint(identity). Lookups compare it (and the
//     identity) to find an identity's bucket.
//   - tokens, last_refill: the bucket, rounded to micro-units as in
//     EncodeBucket, so a bucket reads back the same in both storage modes.
//   - spill_until: belongs to the slot, not to the bucket in it: until then,
//     an identity whose FIRST candidate is this slot may hold an active
//     bucket in its second candidate. Without a live mark, a new identity
//     whose first candidate is free or full claims it after one read (see
//     plugin/filter/store.go, "one-read claims"). Rounded up to the next
//     micro-second, so never earlier than meant.
//   - identity: the limit-key identity the bucket belongs to, as shown to
//     operators (AppendIdentity: the composite key, at most MaxIdentity
//     bytes). It is last, so it may contain any byte.
//
// Binary because a slot is decoded and encoded on every request: the text
// form this replaced, "{fingerprint}:{tokens}:{last_refill}:{identity}"
// with 16 hex digits and six-decimal numbers, cost about 1.2 us of an
// 8.5 us allowed request inside wasm (number parsing and printing), the
// binary one a few tens of ns. Nothing reads shared data but the plugin
// (operators see slots through telemetry), so readability bought nothing.
// DecodeSlot still reads the text form (with no spill mark), so slots
// written by an earlier plugin version keep their buckets across an
// upgrade; a text value never starts with SlotFormat.
//
// An identity's candidate slots are CandidateSlots(Fingerprint(identity), N).
// The slot key namespace cannot collide with exact keys: a verbatim
// composite never starts with '#' (the filter escapes it), and a hashed one
// is "#{16 hex}#{prefix}", which has a second '#', while a slot key has only
// decimal digits after its '#'.

// SlotFormat is the first byte of a binary slot value.
const SlotFormat = 0x01

// slotHeader is the size of a binary slot value before its identity.
const slotHeader = 33

// Candidates is the number of candidate slots per identity (d). Two is
// enough: with two choices a new identity finds a reusable slot unless both
// of its candidates hold active buckets (probability about a^2 at a fraction
// a of active slots), and every extra candidate costs one more shared-data
// get on each miss and one more conditional write on each claim (the claim
// rewrites every candidate it read; see plugin/filter/store.go).
const Candidates = 2

// MaxIdentity bounds the identity stored in a slot value. The filter's
// composite keys already respect it (longer ones are hashed, AppendIdentity).
const MaxIdentity = 256

// identityPrefix is how many bytes of a long identity are kept, after its
// hash, for readability.
const identityPrefix = 64

// Errors returned by DecodeSlot, in addition to ErrTokens and ErrLastRefill.
var (
	ErrSlotFormat = errors.New("state: slot value is neither the binary slot format nor \"{fingerprint}:{tokens}:{last_refill}:{identity}\"")
	ErrIdentity   = errors.New("state: slot identity is empty or longer than MaxIdentity")
	ErrSpill      = errors.New("state: slot spill_until is not a finite number >= 0")
)

// Slot is a decoded slot value.
type Slot struct {
	Fingerprint uint64
	Bucket      Bucket
	Identity    []byte // aliases the decoded value
	// SpillUntil is the slot's spill mark (0: none), see the file comment.
	SpillUntil float64
}

// AppendIdentity appends the identity of a composite limit key as stored in
// slot values and shown to operators: the composite itself when it has at
// most MaxIdentity bytes, else "#{FNV-1a 64 of the composite, 16 hex}#{its
// first 64 bytes}" (82 bytes). The plugin's exact keys use the same form, so
// an identity reads the same in both storage modes.
func AppendIdentity(dst []byte, composite string) []byte {
	if len(composite) <= MaxIdentity {
		return append(dst, composite...)
	}
	dst = append(dst, '#')
	dst = AppendHex16(dst, FNV1a64(composite))
	dst = append(dst, '#')
	return append(dst, composite[:identityPrefix]...)
}

// Fingerprint is the 64-bit fingerprint of an identity: FNV-1a 64 followed by
// a murmur3 finalizer. FNV-1a alone mixes its low bits poorly (the lowest bit
// is the parity of the input's lowest bits), and slot indices are taken from
// both halves, so the finalizer spreads every input bit over all 64. No
// allocation, one multiply per byte: a few tens of ns for an IP address in
// wasm.
func Fingerprint(identity string) uint64 {
	h := FNV1a64(identity)
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// FNV1a64 is the 64-bit FNV-1a hash, inlined to avoid hash/fnv's allocation.
func FNV1a64(s string) uint64 {
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	h := uint64(offset64)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= prime64
	}
	return h
}

// CandidateSlots returns the slots an identity with fingerprint fp may occupy
// in a table of maxKeys slots, in probe order: one index from each 32-bit
// half of the fingerprint (Lemire's multiply-shift range reduction, no
// division). The two differ whenever maxKeys > 1. maxKeys <= 0 gives
// {0, 0}; values above 2^32 are treated as 2^32.
func CandidateSlots(fp uint64, maxKeys int) [Candidates]int {
	if maxKeys <= 0 {
		return [Candidates]int{}
	}
	n := uint64(maxKeys)
	if n > 1<<32 {
		n = 1 << 32
	}
	a := (uint64(uint32(fp)) * n) >> 32
	b := ((fp >> 32) * n) >> 32
	if a == b && n > 1 {
		b = a + 1
		if b == n {
			b = 0
		}
	}
	return [Candidates]int{int(a), int(b)}
}

// AppendSlotKey appends the shared-data key of a slot: "tb:{rule}:#{slot}".
func AppendSlotKey(dst []byte, rule string, slot int) []byte {
	dst = append(dst, "tb:"...)
	dst = append(dst, rule...)
	dst = append(dst, ":#"...)
	return strconv.AppendInt(dst, int64(slot), 10)
}

// SlotKey returns the shared-data key of a slot: "tb:{rule}:#{slot}".
func SlotKey(rule string, slot int) string {
	return string(AppendSlotKey(nil, rule, slot))
}

// ParseKey splits a bucket key: "tb:{rule}:#{slot}" gives (rule, slot, "",
// true); "tb:{rule}:{composite}" gives (rule, -1, composite, true) (the exact
// key of a rule with max_keys 0). Anything else, including a rule part with
// a ':' (rule names cannot contain one), gives ok false.
func ParseKey(key string) (rule string, slot int, composite string, ok bool) {
	if len(key) < 3 || key[:3] != "tb:" {
		return "", -1, "", false
	}
	rest := key[3:]
	i := 0
	for i < len(rest) && rest[i] != ':' {
		i++
	}
	if i == 0 || i == len(rest) {
		return "", -1, "", false
	}
	rule, rest = rest[:i], rest[i+1:]
	if rest == "" {
		return "", -1, "", false
	}
	if rest[0] == '#' {
		if n, ok := parseSlot(rest[1:]); ok {
			return rule, n, "", true
		}
	}
	return rule, -1, rest, true
}

// parseSlot reads a canonical decimal slot number (no sign, no leading zero,
// at most 10 digits).
func parseSlot(s string) (int, bool) {
	if s == "" || len(s) > 10 || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// EncodeSlot appends a slot value with no spill mark; see EncodeMarkedSlot.
func EncodeSlot(dst []byte, fp uint64, b Bucket, identity string) []byte {
	return EncodeMarkedSlot(dst, fp, b, identity, 0)
}

// EncodeMarkedSlot appends a binary slot value (see the file comment) with
// the spill mark spillUntil (not > 0, or +Inf: no mark). identity should
// come from AppendIdentity (at most MaxIdentity bytes, as DecodeSlot
// requires); a longer one is stored in its AppendIdentity form so the value
// stays bounded. It does not allocate when dst has room.
func EncodeMarkedSlot(dst []byte, fp uint64, b Bucket, identity string, spillUntil float64) []byte {
	dst = append(dst, SlotFormat)
	dst = binary.LittleEndian.AppendUint64(dst, fp)
	dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(roundMicro(b.Tokens)))
	dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(roundMicro(b.LastRefill)))
	dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(spillMark(spillUntil)))
	return AppendIdentity(dst, identity)
}

// RaiseSlotSpill appends the slot value v (as read, and valid) with its
// spill mark set to spillUntil, the rest unchanged: a binary value is
// copied with its mark patched, without decoding it; a text value of an
// earlier version is rewritten in the binary form.
func RaiseSlotSpill(dst, v []byte, spillUntil float64) []byte {
	if len(v) >= slotHeader && v[0] == SlotFormat {
		return appendWithSpill(dst, v, 25, spillUntil)
	}
	s, err := DecodeSlot(v)
	if err != nil {
		return append(dst, v...)
	}
	return EncodeMarkedSlot(dst, s.Fingerprint, s.Bucket, string(s.Identity), spillUntil)
}

// appendWithSpill appends the binary value v with the spill mark at offset
// set to spillUntil.
func appendWithSpill(dst, v []byte, offset int, spillUntil float64) []byte {
	at := len(dst) + offset
	dst = append(dst, v...)
	binary.LittleEndian.PutUint64(dst[at:], math.Float64bits(spillMark(spillUntil)))
	return dst
}

// spillMark is a spill mark as stored: rounded up to the micro-second (so
// never earlier than meant), 0 (none) unless finite and > 0.
func spillMark(spillUntil float64) float64 {
	if !(spillUntil > 0) || math.IsInf(spillUntil, 0) {
		return 0
	}
	if m := math.Ceil(spillUntil * 1e6); m < maxMicro {
		return m / 1e6
	}
	return spillUntil
}

// roundMicro rounds v to the nearest micro-unit, as EncodeBucket prints it
// (values too large for that are kept as they are).
func roundMicro(v float64) float64 {
	if m := math.Round(v * 1e6); m > -maxMicro && m < maxMicro {
		return m / 1e6
	}
	return v
}

// DecodeSlot parses a slot value: the binary form EncodeMarkedSlot writes,
// or the text form "{fingerprint}:{tokens}:{last_refill}:{identity}" of
// earlier versions (no spill mark). It is strict: tokens finite,
// last_refill and spill_until finite and >= 0, the identity 1 to
// MaxIdentity bytes of anything (text: the fingerprint exactly 16
// lower-case hex digits, the numbers as DecodeBucket reads them). It never
// panics and does not allocate; the returned Identity aliases v.
func DecodeSlot(v []byte) (Slot, error) {
	if len(v) > 0 && v[0] == SlotFormat {
		return decodeBinarySlot(v)
	}
	return decodeTextSlot(v)
}

func decodeBinarySlot(v []byte) (Slot, error) {
	if len(v) < slotHeader {
		return Slot{}, ErrSlotFormat
	}
	tokens := math.Float64frombits(binary.LittleEndian.Uint64(v[9:]))
	last := math.Float64frombits(binary.LittleEndian.Uint64(v[17:]))
	spill := math.Float64frombits(binary.LittleEndian.Uint64(v[25:]))
	switch id := v[slotHeader:]; {
	case !isFinite(tokens):
		return Slot{}, ErrTokens
	case !isFinite(last) || last < 0:
		return Slot{}, ErrLastRefill
	case !isFinite(spill) || spill < 0:
		return Slot{}, ErrSpill
	case len(id) == 0 || len(id) > MaxIdentity:
		return Slot{}, ErrIdentity
	default:
		return Slot{
			Fingerprint: binary.LittleEndian.Uint64(v[1:]),
			Bucket:      Bucket{Tokens: tokens, LastRefill: last},
			Identity:    id,
			SpillUntil:  spill,
		}, nil
	}
}

func isFinite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// decodeTextSlot reads the text form of earlier versions, in one pass for
// valid values; invalid ones are classified by decodeSlotSlow.
func decodeTextSlot(v []byte) (Slot, error) {
	if len(v) < 17 || v[16] != ':' {
		return Slot{}, ErrSlotFormat
	}
	var fp uint64
	for _, c := range v[:16] {
		d := hexValue[c]
		if d > 15 {
			return Slot{}, ErrSlotFormat
		}
		fp = fp<<4 | uint64(d)
	}
	tokens, i, ok := parseNumber(v, 17)
	if ok && i < len(v) && v[i] == ':' {
		last, j, ok := parseNumber(v, i+1)
		if ok && last >= 0 && j < len(v) && v[j] == ':' {
			if id := v[j+1:]; len(id) > 0 && len(id) <= MaxIdentity {
				return Slot{Fingerprint: fp, Bucket: Bucket{Tokens: tokens, LastRefill: last}, Identity: id}, nil
			}
		}
	}
	return Slot{}, decodeSlotSlow(v[17:])
}

// decodeSlotSlow returns why rest, a slot value after its fingerprint, is
// invalid: ErrSlotFormat without three parts, else the first bad part's
// error.
func decodeSlotSlow(rest []byte) error {
	c1 := indexColon(rest)
	if c1 < 0 {
		return ErrSlotFormat
	}
	c2 := indexColon(rest[c1+1:])
	if c2 < 0 {
		return ErrSlotFormat
	}
	c2 += c1 + 1
	if _, ok := parseDecimal(rest[:c1]); !ok {
		return ErrTokens
	}
	if last, ok := parseDecimal(rest[c1+1 : c2]); !ok || last < 0 {
		return ErrLastRefill
	}
	return ErrIdentity
}

func indexColon(b []byte) int {
	for i, c := range b {
		if c == ':' {
			return i
		}
	}
	return -1
}

// hexValue maps a lower-case hex digit to its value, anything else to 0xff.
var hexValue = func() (t [256]uint8) {
	for i := range t {
		t[i] = 0xff
	}
	for i := 0; i < 10; i++ {
		t['0'+i] = uint8(i)
	}
	for i := 0; i < 6; i++ {
		t['a'+i] = uint8(10 + i)
	}
	return t
}()

// AppendHex16 appends v as 16 lower-case hex digits.
func AppendHex16(dst []byte, v uint64) []byte {
	const digits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, digits[(v>>uint(shift))&0xf])
	}
	return dst
}
