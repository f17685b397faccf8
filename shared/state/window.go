package state

import (
	"errors"
	"math"
	"strconv"
)

// Window state (issue 7): the use of one identity in the recent periods of a
// fixed_window, sliding_window or rolling_window rule.
//
// Periods are aligned to the Unix epoch: period k covers [k*P, (k+1)*P) for
// the rule's period length P (the window length for fixed and sliding
// windows, period_seconds for rolling windows). A value is
//
//	{start}:{c0},{c1},...      e.g. "1736942400:120,80.5,0,7"
//
// where start is the Unix time at which the newest period began, c0 the use
// (summed cost) in that period, c1 in the one before, and so on. Trailing
// zero counts are left out (at least c0 is written), so a window with use
// only in its current period is "{start}:{c0}". Numbers are written with at
// most six decimals and no trailing zeros ("12", "0.5"). A fixed window has
// one count, a sliding window two (current, previous), a rolling window at
// most one per sub-period (MaxCounts).
//
// Keys differ per algorithm ("fw:", "sw:", "rw:" instead of "tb:"), so a
// rule that changes algorithm never decodes another algorithm's value; the
// slot form is "{fingerprint}:{start}:{counts}:{identity}", optionally
// preceded by the slot's spill mark "^{spill_until}:" (six decimals, rounded
// up): the same mark as in a token bucket's slot (slot.go), here as a text
// prefix so it can be raised without decoding the window after it
// (RaiseWindowSpill). A fingerprint never starts with '^'.

// MaxCounts bounds the counts of a window value (policy.MaxPeriods).
const MaxCounts = 60

// Window is a decoded window state.
type Window struct {
	Start  float64 // Unix seconds at which the newest period began, >= 0
	N      int     // counts in use, 1..MaxCounts; Counts[N:] are zero
	Counts [MaxCounts]float64
}

// Errors returned by DecodeWindow and DecodeWindowSlot.
var (
	ErrWindowFormat = errors.New(`state: window value is not "{start}:{count},{count},..."`)
	ErrWindowStart  = errors.New("state: window start is not a finite number >= 0")
	ErrWindowCount  = errors.New("state: window count is not a finite number >= 0")
	ErrWindowCounts = errors.New("state: window has more than MaxCounts counts")
)

// EncodeWindow appends "{start}:{c0},{c1},..." (trailing zero counts left
// out) to dst. It does not allocate when dst has room.
func EncodeWindow(dst []byte, w *Window) []byte {
	dst = AppendCompact(dst, w.Start)
	dst = append(dst, ':')
	n := min(max(w.N, 1), MaxCounts)
	for n > 1 && AppendCompactIsZero(w.Counts[n-1]) {
		n--
	}
	for i := 0; i < n; i++ {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendCompact(dst, w.Counts[i])
	}
	return dst
}

// AppendCompactIsZero reports whether AppendCompact writes v as "0".
func AppendCompactIsZero(v float64) bool { return v < 5e-7 && v > -5e-7 }

// AppendCompact appends v like AppendMicros but without trailing zero
// decimals: "12", "0.5", "1736942400". Window values hold up to 60 numbers,
// most of them whole, so this halves their size.
func AppendCompact(dst []byte, v float64) []byte {
	start := len(dst)
	dst = AppendMicros(dst, v)
	dot := -1
	for i := start; i < len(dst); i++ {
		if dst[i] == '.' {
			dot = i
			break
		}
	}
	if dot < 0 {
		return dst
	}
	end := len(dst)
	for end > dot+1 && dst[end-1] == '0' {
		end--
	}
	if end == dot+1 {
		end = dot
	}
	dst = dst[:end]
	if len(dst)-start == 2 && dst[start] == '-' && dst[start+1] == '0' {
		dst = append(dst[:start], '0') // "-0.000000" of a tiny negative
	}
	return dst
}

// DecodeWindow parses a value written by EncodeWindow into w. It is strict:
// start finite and >= 0, then ':' and 1 to MaxCounts finite counts >= 0
// separated by ','; nothing else. It never panics and does not allocate.
func DecodeWindow(v []byte, w *Window) error {
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

// EncodeWindowSlot appends a window slot value: "{fingerprint}:{start}:
// {counts}:{identity}" (identity as in EncodeSlot), after the spill mark
// "^{spillUntil}:" when spillUntil > 0.
func EncodeWindowSlot(dst []byte, fp uint64, w *Window, identity string, spillUntil float64) []byte {
	dst = appendWindowSpill(dst, spillUntil)
	dst = AppendHex16(dst, fp)
	dst = append(dst, ':')
	dst = EncodeWindow(dst, w)
	dst = append(dst, ':')
	return AppendIdentity(dst, identity)
}

// appendWindowSpill appends the spill mark prefix "^{spillUntil}:", rounded
// up to the micro-second; nothing unless spillUntil is finite and > 0.
func appendWindowSpill(dst []byte, spillUntil float64) []byte {
	if !(spillUntil > 0) || math.IsInf(spillUntil, 0) {
		return dst
	}
	if m := math.Ceil(spillUntil * 1e6); m < maxMicro {
		spillUntil = m / 1e6
	}
	dst = append(dst, '^')
	dst = AppendMicros(dst, spillUntil)
	return append(dst, ':')
}

// splitWindowSpill splits a window slot value into its spill mark (0 when
// it has none) and the rest.
func splitWindowSpill(v []byte) (spill float64, rest []byte, err error) {
	if len(v) == 0 || v[0] != '^' {
		return 0, v, nil
	}
	spill, i, ok := parseNumber(v, 1)
	if !ok || spill < 0 || i >= len(v) || v[i] != ':' {
		return 0, nil, ErrSpill
	}
	return spill, v[i+1:], nil
}

// RaiseWindowSpill appends the window slot value v (as read, valid) with
// its spill mark replaced by spillUntil: the window after the mark is
// copied as it is.
func RaiseWindowSpill(dst, v []byte, spillUntil float64) []byte {
	_, rest, err := splitWindowSpill(v)
	if err != nil {
		rest = v
	}
	return append(appendWindowSpill(dst, spillUntil), rest...)
}

// DecodeWindowSlot parses a value written by EncodeWindowSlot into w and
// returns its fingerprint, spill mark (0: none) and identity (aliasing v).
// Strict like DecodeSlot; never panics, does not allocate.
func DecodeWindowSlot(v []byte, w *Window) (fp uint64, spillUntil float64, identity []byte, err error) {
	spillUntil, v, err = splitWindowSpill(v)
	if err != nil {
		return 0, 0, nil, err
	}
	fp, identity, err = decodeWindowSlotBody(v, w)
	if err != nil {
		return 0, 0, nil, err
	}
	return fp, spillUntil, identity, nil
}

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
// "{prefix}{rule}:{composite}" (max_keys 0) or "{prefix}{rule}:#{slot}".
const (
	PrefixTokenBucket   = "tb:"
	PrefixFixedWindow   = "fw:"
	PrefixSlidingWindow = "sw:"
	PrefixRollingWindow = "rw:"
)

// WindowKey returns the exact key of a window state: "{prefix}{rule}:{composite}".
func WindowKey(prefix, rule, composite string) string {
	return prefix + rule + ":" + composite
}

// WindowSlotKey returns the key of a window slot: "{prefix}{rule}:#{slot}".
func WindowSlotKey(prefix, rule string, slot int) string {
	return prefix + rule + ":#" + strconv.Itoa(slot)
}
