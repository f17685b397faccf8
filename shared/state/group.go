package state

import (
	"encoding/binary"
	"errors"
)

// Groups: bounded storage as a set-associative table.
//
// A rule with max_keys = N > 0 keeps the buckets (or windows) of at most N
// identities, Ways to a shared-data key, and one overflow record per key:
//
//	key:      {prefix}{rule}:#{group}        group in [0, Groups(N))
//	value:    GroupFormat (0x07) | overflow | way | way | ...   at most Ways ways
//	earlier:  GroupFormatV1 (0x04) | way | way | ...           (no overflow record)
//	overflow: uvarint length | overflow record (length 0: none)
//	way:      uvarint length | record            (length 0: a free way)
//	record:   a slot value (EncodeSlot), a window slot value (EncodeWindowSlot)
//	          or a fleet pool (EncodePool, pool.go)
//	overflow record: EncodeOverflow or EncodeWindowOverflow (overflow.go)
//
// An identity with fingerprint fp lives only in group GroupOf(fp, N), in any
// of its ways. One get returns every bucket the identity could be in, and
// one conditional set writes them all back, so finding, claiming or reusing
// a bucket, or deciding on the group's overflow limit, is a single
// compare-and-swap on one key: two workers that race for the same identity
// write the same key, one of them wins, the other re-reads and finds the
// winner's bucket. Nothing else is needed to keep one identity from holding
// two buckets.
//
// The overflow record is the group's shared limit for identities that find
// no way: every way holds another identity's active bucket (the filter's
// store.go explains the rules). A group that never needed it is written in
// the earlier format, GroupFormatV1, which reads as a group whose overflow
// limit is idle: the two formats differ only by that record, so a group
// gets the new format byte the first time its overflow record is written.
//
// Why Ways is 4: a new identity overflows only when every way of its group
// is active; at a fraction a of active buckets that is about a^4 (0.8% at a
// third), against a^2 (11%) for two choices. A request copies the whole
// group in and out (about 170 bytes for four IPv4 identities), a few tens
// of ns, against the cost of a shared-data lookup that misses the CPU
// caches (about 1 us on a cold key), which every design pays once per
// request.
//
// A value that is not a group (a slot value written by a version before
// groups, or an empty placeholder) reads as a group of that one way (or of
// none) with no overflow record, so an upgraded plugin keeps a bucket it
// finds at its group key and treats everything else as another identity's.

// GroupFormat is the first byte of a group value with an overflow record,
// GroupFormatV1 of one without (written while a group's overflow record is
// empty, and by earlier versions). They differ from every record format
// (SlotFormat, SlotFormatV1, WindowFormat, WindowSlotFormatV1,
// WindowSlotFormat, OverflowFormat, WindowOverflowFormat, PoolFormat) and from the
// first byte of every text record (a hex digit).
const (
	GroupFormatV1 = 0x04
	GroupFormat   = 0x07
)

// Ways is the number of buckets (ways) a group holds.
const Ways = 4

// ErrGroupFormat is returned by SplitGroup for a group value whose ways do
// not parse.
var ErrGroupFormat = errors.New("state: group value is truncated, has more than 4 ways or a way longer than its value")

// IsGroup reports whether v is a group value (of either format).
func IsGroup(v []byte) bool {
	return len(v) > 0 && (v[0] == GroupFormat || v[0] == GroupFormatV1)
}

// waysStart returns where the ways of group value v begin (after its format
// byte and, in GroupFormat, its overflow record) and that record; ok is
// false when the overflow record does not parse.
func waysStart(v []byte) (start int, overflow []byte, ok bool) {
	if v[0] != GroupFormat {
		return 1, nil, true
	}
	l, k := binary.Uvarint(v[1:])
	if k <= 0 || l > uint64(len(v)-1-k) {
		return 0, nil, false
	}
	start = 1 + k + int(l)
	return start, v[1+k : start : start], true
}

// GroupWays returns the number of ways per group of a table for maxKeys
// identities: Ways, or maxKeys when smaller (a table of 2 is one group of 2).
func GroupWays(maxKeys int) int {
	return max(1, min(Ways, maxKeys))
}

// Groups returns the number of groups, i.e. shared-data keys, of a table for
// maxKeys identities: maxKeys / GroupWays(maxKeys), rounded up. The table
// holds Groups(maxKeys) * GroupWays(maxKeys) identities: maxKeys rounded up
// to a multiple of GroupWays(maxKeys). maxKeys <= 0 gives 0.
func Groups(maxKeys int) int {
	if maxKeys <= 0 {
		return 0
	}
	// Not (maxKeys + w - 1) / w, which overflows near math.MaxInt.
	return (maxKeys-1)/GroupWays(maxKeys) + 1
}

// GroupOf returns the group of an identity with fingerprint fp in a table of
// groups groups: Lemire's multiply-shift range reduction of the fingerprint's
// high 32 bits (no division). groups <= 1 gives 0; values above 2^32 are
// treated as 2^32.
func GroupOf(fp uint64, groups int) int {
	if groups <= 1 {
		return 0
	}
	n := uint64(groups)
	if n > 1<<32 {
		n = 1 << 32
	}
	return int(((fp >> 32) * n) >> 32)
}

// SplitGroup splits a group value into its ways, which alias v, and returns
// how many there are (0 to Ways). A value that is not a group reads as one
// way (a record of an earlier version), an empty one as none. It never
// panics and does not allocate. The overflow record is left out
// (SplitGroupOverflow returns it).
func SplitGroup(v []byte, ways *[Ways][]byte) (int, error) {
	n, _, err := SplitGroupOverflow(v, ways)
	return n, err
}

// SplitGroupOverflow is SplitGroup that also returns the group's overflow
// record (aliasing v; empty when the group has none: a GroupFormatV1
// group, a value that is not a group, or an error).
func SplitGroupOverflow(v []byte, ways *[Ways][]byte) (int, []byte, error) {
	if len(v) == 0 {
		return 0, nil, nil
	}
	if !IsGroup(v) {
		ways[0] = v
		return 1, nil, nil
	}
	i, overflow, ok := waysStart(v)
	if !ok {
		return 0, nil, ErrGroupFormat
	}
	n := 0
	for ; i < len(v); n++ {
		if n == Ways {
			return 0, nil, ErrGroupFormat
		}
		l, k := binary.Uvarint(v[i:])
		if k <= 0 || l > uint64(len(v)-i-k) {
			return 0, nil, ErrGroupFormat
		}
		i += k
		ways[n] = v[i : i+int(l) : i+int(l)] // capped: appending to a way cannot overwrite the next
		i += int(l)
	}
	return n, overflow, nil
}

// AppendGroup appends a group value without an overflow record
// (GroupFormatV1): ways with way at replaced by rec (at == len(ways)
// appends rec as a new way). Trailing free ways are left out. at must be in
// [0, len(ways)] and len(ways) < Ways when appending.
func AppendGroup(dst []byte, ways [][]byte, at int, rec []byte) []byte {
	return AppendGroupOverflow(dst, nil, ways, at, rec)
}

// AppendGroupOverflow is AppendGroup with an overflow record: a group in
// GroupFormat, or in GroupFormatV1 when overflow is empty.
func AppendGroupOverflow(dst, overflow []byte, ways [][]byte, at int, rec []byte) []byte {
	n := max(len(ways), at+1)
	for n > 0 && len(wayOf(ways, at, rec, n-1)) == 0 {
		n--
	}
	if len(overflow) == 0 {
		dst = append(dst, GroupFormatV1)
	} else {
		dst = append(dst, GroupFormat)
		dst = binary.AppendUvarint(dst, uint64(len(overflow)))
		dst = append(dst, overflow...)
	}
	for i := 0; i < n; i++ {
		w := wayOf(ways, at, rec, i)
		dst = binary.AppendUvarint(dst, uint64(len(w)))
		dst = append(dst, w...)
	}
	return dst
}

// ReplaceWay appends group value v (as read: SplitGroup gave it n ways)
// with way at replaced by rec (at == n appends rec as a new way), its
// overflow record kept. For a group value it copies v's bytes around the
// way in three copies rather than rebuilding the group way by way; it gives
// AppendGroupOverflow's result unless v ends in free ways, which are kept
// (AppendGroupOverflow never writes them). Anything else (an earlier
// version's record, an empty value) is rewritten as a group by AppendGroup,
// and a value SplitGroup rejects is replaced by a group of rec alone.
func ReplaceWay(dst, v []byte, at int, rec []byte) []byte {
	if !IsGroup(v) {
		var ways [Ways][]byte
		n, _ := SplitGroup(v, &ways)
		return AppendGroup(dst, ways[:n], at, rec)
	}
	start, _, ok := waysStart(v) // of way at: after the ways before it
	if !ok {
		return AppendGroup(dst, nil, 0, rec) // a value SplitGroup rejects
	}
	for w := 0; w < at && start < len(v); w++ {
		l, k := binary.Uvarint(v[start:])
		if k <= 0 || l > uint64(len(v)-start-k) {
			return AppendGroup(dst, nil, 0, rec)
		}
		start += k + int(l)
	}
	end := start // of way at: where the ways after it start
	if end < len(v) {
		l, k := binary.Uvarint(v[end:])
		if k <= 0 || l > uint64(len(v)-end-k) {
			return AppendGroup(dst, nil, 0, rec)
		}
		end += k + int(l)
	}
	dst = append(dst, v[:start]...)
	dst = binary.AppendUvarint(dst, uint64(len(rec)))
	dst = append(dst, rec...)
	return append(dst, v[end:]...)
}

// ReplaceOverflow appends group value v (as read) with its overflow record
// replaced by rec, in GroupFormat, its ways unchanged. A value that is not a
// group is rewritten as a group of its one way (or none), and a value
// SplitGroup rejects is replaced by a group of the overflow record alone.
func ReplaceOverflow(dst, v, rec []byte) []byte {
	var ways [Ways][]byte
	n, _, err := SplitGroupOverflow(v, &ways)
	if err != nil {
		n = 0
	}
	if err != nil || !IsGroup(v) || len(rec) == 0 {
		return AppendGroupOverflow(dst, rec, ways[:n], n, nil)
	}
	start, _, _ := waysStart(v) // valid: v split
	dst = append(dst, GroupFormat)
	dst = binary.AppendUvarint(dst, uint64(len(rec)))
	dst = append(dst, rec...)
	return append(dst, v[start:]...)
}

// RecordFingerprint returns the fingerprint of a binary slot, window or
// pool record (any of their formats, current or earlier: all keep it in
// bytes 1-8), without decoding the rest; ok is false for anything else (a text
// record of an earlier version, an empty way), which only a full decode
// can tell. It lets a lookup skip the records of other identities.
func RecordFingerprint(rec []byte) (fp uint64, ok bool) {
	if len(rec) < 9 {
		return 0, false
	}
	switch rec[0] {
	case SlotFormat, SlotFormatV1, WindowSlotFormat, WindowSlotFormatV1, PoolFormat:
		return binary.LittleEndian.Uint64(rec[1:]), true
	}
	return 0, false
}

// wayOf is way i of ways with way at replaced by rec.
func wayOf(ways [][]byte, at int, rec []byte, i int) []byte {
	if i == at {
		return rec
	}
	return ways[i]
}
