package state

import (
	"encoding/binary"
	"errors"
	"math"
	"strconv"
)

// Slot records.
//
// Envoy's shared data has no delete and no TTL, so one key per client (exact
// storage's "tb:{rule}:{composite}") grows the proxy's memory with every
// distinct identity ever seen. A rule with max_keys = N > 0 instead keeps its
// buckets in a fixed set of group keys, "tb:{rule}:#{group}" (group.go).
// Each way of a group holds one slot record: a bucket and the identity it
// belongs to, binary:
//
//	byte  0       SlotFormat (0x05)
//	bytes 1-8     fingerprint, uint64, little-endian
//	bytes 9-16    tokens, float64 (IEEE 754 bits, little-endian)
//	bytes 17-24   last_refill, float64 (unix seconds)
//	bytes 25-     identity, 1 to MaxIdentity bytes
//
//   - fingerprint: KeyedFingerprint(key, identity), SipHash-2-4 under the
//     deployment's key (siphash.go). It picks the identity's group
//     (GroupOf), and lookups compare it (and then the identity) with each
//     way's to find the identity's bucket without comparing strings.
//   - tokens, last_refill: the bucket, rounded to micro-units as in
//     EncodeBucket, so a bucket reads back the same in both storage modes.
//   - identity: the limit-key identity the bucket belongs to, as shown to
//     operators (AppendIdentity: the composite key, at most MaxIdentity
//     bytes). It is last, so it may contain any byte.
//
// Binary because a record is decoded and encoded on every request: the text
// form this replaced, "{fingerprint}:{tokens}:{last_refill}:{identity}"
// with 16 hex digits and six-decimal numbers, cost about 1.2 us of an
// 8.5 us allowed request inside wasm (number parsing and printing), the
// binary one a few tens of ns. Nothing reads shared data but the plugin
// (operators see buckets through telemetry), so readability bought nothing.
//
// DecodeSlot also reads the formats of earlier versions, so buckets survive
// an upgrade (SplitGroup reads such a value, found at a group key, as a group
// of one way):
//
//   - SlotFormatV1 (0x01): the same fields with an 8-byte spill_until
//     (float64) between last_refill and the identity, which starts at byte
//     33. It was a mark of the two-candidate slots that groups replaced,
//     needed to claim a slot safely after one read; a group is claimed with
//     one compare-and-swap, so the mark is ignored, whatever it holds.
//   - text: "{fingerprint}:{tokens}:{last_refill}:{identity}", the
//     fingerprint as 16 lower-case hex digits.
//
// No record starts with GroupFormat: binary ones start with their format
// byte, text ones with a hex digit.
//
// The group key namespace cannot collide with exact keys: a verbatim
// composite never starts with '#' (the filter escapes it), and a hashed one
// is "#{16 hex}#{prefix}", which has a second '#', while a group key has
// only decimal digits after its '#'.

// First bytes of the binary slot records: SlotFormat is written,
// SlotFormatV1 (with a spill mark) only read.
const (
	SlotFormatV1 = 0x01
	SlotFormat   = 0x05
)

// Sizes of binary slot records before their identity.
const (
	slotHeader   = 25
	slotHeaderV1 = 33
)

// MaxIdentity bounds the identity stored in a slot record. The filter's
// composite keys already respect it (longer ones are hashed, AppendIdentity).
const MaxIdentity = 256

// identityPrefix is how many bytes of a long identity are kept, after its
// hash, for readability.
const identityPrefix = 64

// Errors returned by DecodeSlot, in addition to ErrTokens and ErrLastRefill.
var (
	ErrSlotFormat = errors.New("state: slot value is neither a binary slot format nor \"{fingerprint}:{tokens}:{last_refill}:{identity}\"")
	ErrIdentity   = errors.New("state: slot identity is empty or longer than MaxIdentity")
)

// Slot is a decoded slot record.
type Slot struct {
	Fingerprint uint64
	Bucket      Bucket
	Identity    []byte // aliases the decoded value
}

// AppendIdentity appends the identity of a composite limit key as stored in
// slot records and shown to operators: the composite itself when it has at
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

// Fingerprint is the unkeyed 64-bit fingerprint of an identity: FNV-1a 64
// followed by a murmur3 finalizer. It is the first half of fleet mode's
// sluice_id, which must be the same on every proxy; buckets and pools are
// placed by KeyedFingerprint. FNV-1a alone mixes its low bits poorly (the
// lowest bit is the parity of the input's lowest bits), so the finalizer
// spreads every input bit over all 64. No allocation, one multiply per byte: a few tens of ns for an IP
// address in wasm.
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

// AppendSlotKey appends the shared-data key of a token-bucket group (the
// name is from the slots groups replaced): "tb:{rule}:#{group}".
func AppendSlotKey(dst []byte, rule string, group int) []byte {
	dst = append(dst, "tb:"...)
	dst = append(dst, rule...)
	dst = append(dst, ":#"...)
	return strconv.AppendInt(dst, int64(group), 10)
}

// SlotKey returns the shared-data key of a token-bucket group:
// "tb:{rule}:#{group}".
func SlotKey(rule string, group int) string {
	return string(AppendSlotKey(nil, rule, group))
}

// ParseKey splits a bucket key: "tb:{rule}:#{group}" gives (rule, group, "",
// true); "tb:{rule}:{composite}" gives (rule, -1, composite, true) (the exact
// key of a rule with max_keys 0). Anything else, including a rule part with
// a ':' (rule names cannot contain one), gives ok false.
func ParseKey(key string) (rule string, group int, composite string, ok bool) {
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
		if n, ok := parseGroup(rest[1:]); ok {
			return rule, n, "", true
		}
	}
	return rule, -1, rest, true
}

// parseGroup reads a canonical decimal group number (no sign, no leading
// zero, at most 10 digits).
func parseGroup(s string) (int, bool) {
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

// EncodeSlot appends a slot record in SlotFormat (see the file comment).
// identity should come from AppendIdentity (at most MaxIdentity bytes, as
// DecodeSlot requires); a longer one is stored in its AppendIdentity form so
// the record stays bounded. It does not allocate when dst has room.
func EncodeSlot(dst []byte, fp uint64, b Bucket, identity string) []byte {
	dst = append(dst, SlotFormat)
	dst = binary.LittleEndian.AppendUint64(dst, fp)
	dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(roundMicro(b.Tokens)))
	dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(roundMicro(b.LastRefill)))
	return AppendIdentity(dst, identity)
}

// PatchSlotBucket overwrites, in place, the bucket of a record in the
// current binary format (SlotFormat), rounded as EncodeSlot rounds it, and
// reports whether it could: false for any other format, which must be
// encoded anew. A bucket's update changes nothing else in its record, so
// the filter patches the group it read and writes it back as it is.
func PatchSlotBucket(rec []byte, b Bucket) bool {
	if len(rec) < slotHeader || rec[0] != SlotFormat {
		return false
	}
	binary.LittleEndian.PutUint64(rec[9:], math.Float64bits(roundMicro(b.Tokens)))
	binary.LittleEndian.PutUint64(rec[17:], math.Float64bits(roundMicro(b.LastRefill)))
	return true
}

// roundMicro rounds v to the nearest micro-unit, as EncodeBucket prints it
// (values too large for that are kept as they are).
func roundMicro(v float64) float64 {
	if m := math.Round(v * 1e6); m > -maxMicro && m < maxMicro {
		return m / 1e6
	}
	return v
}

// DecodeSlot parses a slot record: SlotFormat as EncodeSlot writes it, or a
// format of earlier versions, SlotFormatV1 (its spill mark ignored) or the
// text form "{fingerprint}:{tokens}:{last_refill}:{identity}". It is
// strict: tokens finite, last_refill finite and >= 0, the identity 1 to
// MaxIdentity bytes of anything (text: the fingerprint exactly 16
// lower-case hex digits, the numbers as DecodeBucket reads them). It never
// panics and does not allocate; the returned Identity aliases v.
func DecodeSlot(v []byte) (Slot, error) {
	var s Slot
	err := DecodeSlotInto(v, &s)
	return s, err
}

// DecodeSlotInto is DecodeSlot writing the slot to *s (the zero Slot on
// error). The request path uses it: in wasm a Slot result is copied at
// every return (a memory.copy each, which Envoy's fast JIT runs as a call
// into the runtime), a binary record decoded into *s is not copied at all.
func DecodeSlotInto(v []byte, s *Slot) error {
	// The binary formats are decoded here, not in a function of their own:
	// this runs for every request of a bounded rule, and in wasm every
	// call costs. Both place the fingerprint and the bucket alike; what V1
	// has between the bucket and the identity (the spill mark) is skipped
	// unread.
	header := slotHeader
	switch {
	case len(v) == 0:
		return decodeTextSlotInto(v, s)
	case v[0] == SlotFormatV1:
		header = slotHeaderV1
	case v[0] != SlotFormat:
		return decodeTextSlotInto(v, s)
	}
	if len(v) < header {
		*s = Slot{}
		return ErrSlotFormat
	}
	tokens := math.Float64frombits(binary.LittleEndian.Uint64(v[9:]))
	last := math.Float64frombits(binary.LittleEndian.Uint64(v[17:]))
	var err error
	switch id := v[header:]; {
	case !isFinite(tokens):
		err = ErrTokens
	case !isFinite(last) || last < 0:
		err = ErrLastRefill
	case len(id) == 0 || len(id) > MaxIdentity:
		err = ErrIdentity
	default:
		s.Fingerprint = binary.LittleEndian.Uint64(v[1:])
		s.Bucket = Bucket{Tokens: tokens, LastRefill: last}
		s.Identity = id
		return nil
	}
	*s = Slot{}
	return err
}

func decodeTextSlotInto(v []byte, s *Slot) error {
	var err error
	*s, err = decodeTextSlot(v)
	return err
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

// decodeSlotSlow returns why rest, a text record after its fingerprint, is
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
