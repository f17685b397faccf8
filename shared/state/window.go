package state

import (
	"encoding/binary"
	"errors"
	"math"
	"strconv"
)

// Window state: the use of one identity in the recent periods of a
// fixed_window, sliding_window or rolling_window rule.
//
// Periods are aligned to the Unix epoch: period k covers [k*P, (k+1)*P) for
// the rule's period length P (the window length for fixed and sliding
// windows, period_seconds for rolling windows). A window is its start, the
// Unix time at which the newest period began, and its counts: c0 the use
// (summed cost) in that period, c1 in the one before, and so on. A fixed
// window has one count, a sliding window two (current, previous), a rolling
// window at most one per sub-period (MaxCounts). Values are binary:
//
//	exact key:  WindowFormat (0x02) | window
//	slot:       WindowSlotFormat (0x06) | fingerprint u64 | window | identity
//	window:     start f64 | n (1 byte, 1..MaxCounts) | n counts, each a uvarint:
//	            c<<1 for a whole count c, else (micro-units)<<1 | 1
//
// (numbers little-endian; start rounded to micro-seconds). A slot record is
// what one way of a group holds under max_keys > 0 (group.go); its
// fingerprint and identity are as in a token bucket's slot record
// (slot.go). Trailing zero counts are left out (at least c0 is written),
// and a whole count below 64 takes one byte, so a 60-period rolling window
// of small counts takes about 70 bytes. Binary because the text form this
// replaced, "{start}:{c0},{c1},..." and
// "{fingerprint}:{start}:{counts}:{identity}", was parsed and printed on
// every request (a windowed request cost 1.2x a token-bucket one, mostly
// for that).
//
// Formats of earlier versions still decode, so windows survive an upgrade:
// the text forms above, and
//
//	slot V1:    WindowSlotFormatV1 (0x03) | fingerprint u64 | spill_until f64 | window | identity
//
// whose spill mark (see SlotFormatV1) is ignored, whatever it holds.
//
// Keys differ per algorithm ("fw:", "sw:", "rw:" instead of "tb:"), so a
// rule that changes algorithm never decodes another algorithm's value.

// MaxCounts bounds the counts of a window value (policy.MaxPeriods).
const MaxCounts = 60

// Window is a decoded window state.
type Window struct {
	Start  float64 // Unix seconds at which the newest period began, >= 0
	N      int     // counts in use, 1..MaxCounts; Counts[N:] are zero
	Counts [MaxCounts]float64
}

// Stored is w as shared data keeps it (EncodeWindow): its start and counts
// rounded to micro-units, trailing empty counts left out. It is the window
// the next request reads back.
func (w Window) Stored() Window {
	var out Window
	if DecodeWindow(EncodeWindow(nil, &w), &out) != nil {
		return w // a start EncodeWindow cannot keep; the limiter never makes one
	}
	return out
}

// Errors returned by DecodeWindow and DecodeWindowSlot.
var (
	ErrWindowFormat = errors.New("state: window value is neither the binary window format nor \"{start}:{count},{count},...\"")
	ErrWindowStart  = errors.New("state: window start is not a finite number >= 0")
	ErrWindowCount  = errors.New("state: window count is not a finite number >= 0")
	ErrWindowCounts = errors.New("state: window has more than MaxCounts counts")
)

// First bytes of the binary window values. WindowSlotFormatV1 (with a
// spill mark) is only read.
const (
	WindowFormat       = 0x02
	WindowSlotFormatV1 = 0x03
	WindowSlotFormat   = 0x06
)

// Sizes of binary window slot records before their window.
const (
	windowSlotHeader   = 9
	windowSlotHeaderV1 = 17
)

// EncodeWindow appends the binary value of w for an exact key (see the
// file comment). It does not allocate when dst has room.
func EncodeWindow(dst []byte, w *Window) []byte {
	return appendWindow(append(dst, WindowFormat), w)
}

// appendWindow appends start, n and the counts (trailing zero counts left
// out, at least one written).
func appendWindow(dst []byte, w *Window) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(roundMicro(w.Start)))
	n := min(max(w.N, 1), MaxCounts)
	for n > 1 && microCount(w.Counts[n-1]) == 0 {
		n--
	}
	dst = append(dst, byte(n))
	for i := 0; i < n; i++ {
		dst = binary.AppendUvarint(dst, countCode(microCount(w.Counts[i])))
	}
	return dst
}

// countCode is how a count of m micro-units is written: a whole count c as
// c<<1 (one byte up to 63, two up to 8191: counts are mostly whole), any
// other as m<<1 | 1.
func countCode(m uint64) uint64 {
	if m%1e6 == 0 {
		return m / 1e6 << 1
	}
	return m<<1 | 1
}

// countOf decodes countCode.
func countOf(code uint64) float64 {
	if code&1 == 0 {
		return float64(code >> 1)
	}
	return float64(code>>1) / 1e6
}

// maxMicroCount bounds a count's micro-units, so that m<<1 never overflows.
const maxMicroCount = 1 << 62

// MaxWindowCount is the largest count a window value stores (about 4.6e12,
// above any limit, policy's 1e12); larger counts are stored as it.
const MaxWindowCount = float64(maxMicroCount) / 1e6

// microCount is a count in micro-units, rounded; negative and NaN counts
// (which the limiter never produces) are 0, huge ones maxMicroCount.
func microCount(c float64) uint64 {
	m := math.Round(c * 1e6)
	switch {
	case !(m > 0):
		return 0
	case m >= maxMicroCount:
		return maxMicroCount
	}
	return uint64(m)
}

// decodeWindow reads a binary window (after its format byte) into w and
// returns the bytes after it.
func decodeWindow(v []byte, w *Window) ([]byte, error) {
	if len(v) < 9 {
		return nil, ErrWindowFormat
	}
	start := math.Float64frombits(binary.LittleEndian.Uint64(v))
	n := int(v[8])
	switch {
	case !isFinite(start) || start < 0:
		return nil, ErrWindowStart
	case n < 1:
		return nil, ErrWindowFormat
	case n > MaxCounts:
		return nil, ErrWindowCounts
	}
	v = v[9:]
	for i := 0; i < n; i++ {
		code, k := binary.Uvarint(v)
		if k <= 0 || code>>1 > maxMicroCount || (code&1 == 0 && code>>1 > maxMicroCount/1_000_000) {
			return nil, ErrWindowCount // unreadable, or more than the encoder writes
		}
		w.Counts[i] = countOf(code)
		v = v[k:]
	}
	w.Start, w.N = start, n
	clear(w.Counts[n:])
	return v, nil
}

// DecodeWindow parses a value written by EncodeWindow into w, or the text
// form of earlier versions. It is strict: start finite and >= 0, 1 to
// MaxCounts counts >= 0 (text: separated by ','), nothing else. It never
// panics and does not allocate.
func DecodeWindow(v []byte, w *Window) error {
	if len(v) > 0 && v[0] == WindowFormat {
		rest, err := decodeWindow(v[1:], w)
		if err == nil && len(rest) != 0 {
			err = ErrWindowFormat
		}
		return err
	}
	i, err := decodeWindowAt(v, 0, w)
	if err != nil {
		return err
	}
	if i != len(v) {
		return ErrWindowFormat
	}
	return nil
}

// decodeWindowAt decodes a window starting at v[i] and returns the index of
// the first byte after it (the end of the counts).
func decodeWindowAt(v []byte, i int, w *Window) (int, error) {
	start, j, ok := parseNumber(v, i)
	if !ok || start < 0 {
		return j, ErrWindowStart
	}
	if j >= len(v) || v[j] != ':' {
		return j, ErrWindowFormat
	}
	w.Start, w.N = start, 0
	j++
	for {
		c, k, ok := parseNumber(v, j)
		if !ok || c < 0 {
			return k, ErrWindowCount
		}
		if w.N == MaxCounts {
			return k, ErrWindowCounts
		}
		w.Counts[w.N] = c
		w.N++
		j = k
		if j >= len(v) || v[j] != ',' {
			break
		}
		j++
	}
	clear(w.Counts[w.N:])
	return j, nil
}

// EncodeWindowSlot appends a window slot record in WindowSlotFormat (see
// the file comment): fingerprint, window and identity (as in EncodeSlot).
// It does not allocate when dst has room.
func EncodeWindowSlot(dst []byte, fp uint64, w *Window, identity string) []byte {
	dst = append(dst, WindowSlotFormat)
	dst = binary.LittleEndian.AppendUint64(dst, fp)
	dst = appendWindow(dst, w)
	return AppendIdentity(dst, identity)
}

// DecodeWindowSlot parses a window slot record into w and returns its
// fingerprint and identity (aliasing v). It reads WindowSlotFormat as
// EncodeWindowSlot writes it, and the formats of earlier versions:
// WindowSlotFormatV1 (its spill mark ignored) and the text form. Strict like
// DecodeSlot; never panics, does not allocate.
func DecodeWindowSlot(v []byte, w *Window) (fp uint64, identity []byte, err error) {
	if len(v) > 0 {
		switch v[0] {
		case WindowSlotFormat:
			return decodeBinaryWindowSlot(v, windowSlotHeader, w)
		case WindowSlotFormatV1:
			return decodeBinaryWindowSlot(v, windowSlotHeaderV1, w)
		}
	}
	return decodeWindowSlotBody(v, w)
}

// decodeBinaryWindowSlot reads a binary record whose window starts at
// header; what V1 has between the fingerprint and the window (the spill
// mark) is skipped unread.
func decodeBinaryWindowSlot(v []byte, header int, w *Window) (uint64, []byte, error) {
	if len(v) < header {
		return 0, nil, ErrSlotFormat
	}
	id, err := decodeWindow(v[header:], w)
	if err != nil {
		return 0, nil, err
	}
	if len(id) == 0 || len(id) > MaxIdentity {
		return 0, nil, ErrIdentity
	}
	return binary.LittleEndian.Uint64(v[1:]), id, nil
}

// decodeWindowSlotBody reads the text slot form of earlier versions,
// "{fingerprint}:{start}:{counts}:{identity}".
func decodeWindowSlotBody(v []byte, w *Window) (fp uint64, identity []byte, err error) {
	if len(v) < 17 || v[16] != ':' {
		return 0, nil, ErrSlotFormat
	}
	for _, c := range v[:16] {
		d := hexValue[c]
		if d > 15 {
			return 0, nil, ErrSlotFormat
		}
		fp = fp<<4 | uint64(d)
	}
	j, err := decodeWindowAt(v, 17, w)
	if err != nil {
		return 0, nil, err
	}
	if j >= len(v) || v[j] != ':' {
		return 0, nil, ErrSlotFormat
	}
	id := v[j+1:]
	if len(id) == 0 || len(id) > MaxIdentity {
		return 0, nil, ErrIdentity
	}
	return fp, id, nil
}

// Key prefixes per algorithm. Each algorithm's keys are
// "{prefix}{rule}:{composite}" (max_keys 0) or "{prefix}{rule}:#{group}".
const (
	PrefixTokenBucket   = "tb:"
	PrefixFixedWindow   = "fw:"
	PrefixSlidingWindow = "sw:"
	PrefixRollingWindow = "rw:"
	// PrefixQuota is the calendar quota's: a window of one count whose
	// start is the start of the calendar period.
	PrefixQuota = "qt:"
	// PrefixConcurrency is a concurrency rule's: a window of two counts of
	// places taken (limiter.Concurrency).
	PrefixConcurrency = "cc:"
)

// WindowKey returns the exact key of a window state: "{prefix}{rule}:{composite}".
func WindowKey(prefix, rule, composite string) string {
	return prefix + rule + ":" + composite
}

// WindowSlotKey returns the key of a group of window slot records (the name
// is from the slots groups replaced): "{prefix}{rule}:#{group}".
func WindowSlotKey(prefix, rule string, group int) string {
	return prefix + rule + ":#" + strconv.Itoa(group)
}
