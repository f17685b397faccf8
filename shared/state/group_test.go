package state

import (
	"bytes"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
)

// A table holds max_keys identities, rounded up to a multiple of its ways,
// in groups of Ways ways (fewer for tables below Ways).
func TestGroups(t *testing.T) {
	for _, tc := range []struct{ maxKeys, groups, ways int }{
		{0, 0, 1},
		{-1, 0, 1},
		{math.MinInt, 0, 1},
		{1, 1, 1},
		{2, 1, 2},
		{3, 1, 3},
		{4, 1, 4},
		{5, 2, 4},
		{8, 2, 4},
		{9, 3, 4},
		{65536, 16384, 4},
		{65537, 16385, 4},
		{math.MaxInt, math.MaxInt/4 + 1, 4},
	} {
		g, w := Groups(tc.maxKeys), GroupWays(tc.maxKeys)
		if g != tc.groups || w != tc.ways {
			t.Errorf("max_keys %d: Groups %d, GroupWays %d; want %d, %d", tc.maxKeys, g, w, tc.groups, tc.ways)
		}
		// Room for every identity, and less than one more group's worth.
		if capacity := uint64(g) * uint64(w); tc.maxKeys > 0 && (capacity < uint64(tc.maxKeys) || capacity-uint64(tc.maxKeys) >= uint64(w)) {
			t.Errorf("max_keys %d: %d groups of %d ways", tc.maxKeys, g, w)
		}
	}
}

// GroupOf is in range for any fingerprint and table, depends only on the
// fingerprint's high half, and keeps the order of fingerprints.
func TestGroupOfRange(t *testing.T) {
	fps := []uint64{0, 1, 1<<32 - 1, 1 << 32, 1<<63 - 1, 1 << 63, math.MaxUint64 - 1, math.MaxUint64}
	for i := 0; i < 1000; i++ {
		fps = append(fps, Fingerprint("id-"+strconv.Itoa(i)))
	}
	for _, groups := range []int{math.MinInt, -1, 0, 1, 2, 3, 7, 16384, 1 << 32, 1<<32 + 1, math.MaxInt} {
		for _, fp := range fps {
			g := GroupOf(fp, groups)
			if g < 0 || (groups > 0 && g >= groups) || (groups <= 1 && g != 0) {
				t.Fatalf("GroupOf(%x, %d) = %d", fp, groups, g)
			}
			if g != GroupOf(fp&^(1<<32-1), groups) {
				t.Fatalf("GroupOf(%x, %d) depends on the low half", fp, groups)
			}
		}
		if groups > 1 && (GroupOf(0, groups) != 0 || GroupOf(math.MaxUint64, groups) != min(groups, 1<<32)-1) {
			t.Errorf("%d groups: first %d, last %d", groups, GroupOf(0, groups), GroupOf(math.MaxUint64, groups))
		}
	}
}

// Fingerprints of a million IPv4 addresses (consecutive ones, the worst
// case for a weak hash) spread evenly over the groups of a default table:
// a chi-squared statistic within 6 standard deviations of its mean, and no
// group above twice (or below a third of) the mean load.
func TestGroupOfSpread(t *testing.T) {
	const ids = 1 << 20
	groups := Groups(65536)
	counts := make([]int, groups)
	buf := make([]byte, 0, 16)
	for i := 0; i < ids; i++ {
		buf = strconv.AppendInt(append(buf[:0], "10."...), int64(i>>16), 10)
		buf = strconv.AppendInt(append(buf, '.'), int64(i>>8&0xff), 10)
		buf = strconv.AppendInt(append(buf, '.'), int64(i&0xff), 10)
		counts[GroupOf(Fingerprint(string(buf)), groups)]++
	}
	mean := float64(ids) / float64(groups)
	chi2, lo, hi := 0.0, ids, 0
	for _, c := range counts {
		d := float64(c) - mean
		chi2 += d * d / mean
		lo, hi = min(lo, c), max(hi, c)
	}
	df := float64(groups - 1)
	if math.Abs(chi2-df) > 6*math.Sqrt(2*df) {
		t.Errorf("chi-squared %.0f over %d groups (expected %.0f ± %.0f)", chi2, groups, df, math.Sqrt(2*df))
	}
	if float64(hi) > 2*mean || float64(lo) < mean/3 {
		t.Errorf("group loads from %d to %d, mean %.1f", lo, hi, mean)
	}
}

// splitOK splits v, failing the test on an error.
func splitOK(t *testing.T, v []byte) [][]byte {
	t.Helper()
	var ways [Ways][]byte
	n, err := SplitGroup(v, &ways)
	if err != nil {
		t.Fatalf("SplitGroup(%x): %v", v, err)
	}
	return ways[:n]
}

// sameWays reports whether a and b hold equal ways (nil and empty alike).
func sameWays(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func TestSplitGroupLegacy(t *testing.T) {
	if ways := splitOK(t, nil); len(ways) != 0 {
		t.Errorf("empty value: %d ways", len(ways))
	}
	w := Window{Start: 60, N: 1, Counts: [MaxCounts]float64{1}}
	// Records of every format, as earlier versions left them at slot keys
	// (which are now group keys), read as a group of that one way, aliased.
	for name, v := range map[string][]byte{
		"slot":        EncodeSlot(nil, 1, Bucket{1, 2}, "10.0.0.1"),
		"slot V1":     appendSlotV1(nil, 1, Bucket{1, 2}, 0, "10.0.0.1"),
		"text slot":   []byte("3f0c2a9be4d10f57:9.000000:1736940000.250000:10.0.0.1"),
		"window":      EncodeWindow(nil, &w),
		"window slot": EncodeWindowSlot(nil, 1, &w, "x"),
		"window V1":   appendWindowSlotV1(nil, 1, 0, &w, "x"),
		"text window": []byte("3f0c2a9be4d10f57:3600:1,0,2.5:x"),
		"garbage":     {0xff},
	} {
		ways := splitOK(t, v)
		if len(ways) != 1 || len(ways[0]) != len(v) || &ways[0][0] != &v[0] {
			t.Errorf("%s %x: ways %x, want the value itself", name, v, ways)
		}
	}
}

// The format bytes of groups and records are distinct, so no record is
// mistaken for a group.
func TestGroupFormatDistinct(t *testing.T) {
	seen := map[int]string{}
	for name, f := range map[string]int{
		"GroupFormat": GroupFormat, "GroupFormatV1": GroupFormatV1, "OverflowFormat": OverflowFormat, "WindowOverflowFormat": WindowOverflowFormat,
		"SlotFormat": SlotFormat, "SlotFormatV1": SlotFormatV1, "WindowFormat": WindowFormat,
		"WindowSlotFormat": WindowSlotFormat, "WindowSlotFormatV1": WindowSlotFormatV1, "PoolFormat": PoolFormat,
	} {
		if other, ok := seen[f]; ok {
			t.Errorf("%s and %s are both %#x", name, other, f)
		}
		seen[f] = name
		if hexValue[f] <= 15 {
			t.Errorf("%s %#x is a hex digit, the first byte of text records", name, f)
		}
	}
}

func TestAppendGroup(t *testing.T) {
	a, b := EncodeSlot(nil, 1, Bucket{1, 2}, "a"), EncodeSlot(nil, 2, Bucket{3, 4}, "b")
	c := EncodeSlot(nil, 3, Bucket{5, 6}, strings.Repeat("c", 200)) // a 2-byte length
	// The documented layout, with a free way in the middle.
	v := AppendGroup([]byte("pre"), [][]byte{a, nil, c}, 3, b)
	want := append([]byte("pre\x04"), byte(len(a)))
	want = append(append(want, a...), 0, byte(len(c))|0x80, byte(len(c)>>7))
	want = append(append(append(want, c...), byte(len(b))), b...)
	if !bytes.Equal(v, want) {
		t.Fatalf("AppendGroup = %x, want %x", v, want)
	}
	full := [][]byte{a, {}, c, b}
	if ways := splitOK(t, v[3:]); !sameWays(ways, full) || len(ways[1]) != 0 {
		t.Fatalf("split %x: %q", v, ways)
	}
	// Replacing each way keeps the others.
	r := EncodeSlot(nil, 9, Bucket{7, 8}, "r")
	for at := range full {
		ways := splitOK(t, AppendGroup(nil, full, at, r))
		for i, w := range ways {
			if wantWay := map[bool][]byte{true: r, false: full[i]}[i == at]; !bytes.Equal(w, wantWay) {
				t.Errorf("replacing way %d: way %d is %x", at, i, w)
			}
		}
		if len(ways) != Ways {
			t.Errorf("replacing way %d: %d ways", at, len(ways))
		}
	}
	// Appending a way, to a group and to none.
	for n := 0; n < Ways; n++ {
		if ways := splitOK(t, AppendGroup(nil, full[:n], n, r)); !sameWays(ways, append(full[:n:n], r)) {
			t.Errorf("appending to %d ways: %q", n, ways)
		}
	}
	// Trailing free ways are left out, down to a bare format byte.
	for _, tc := range []struct {
		ways [][]byte
		at   int
		rec  []byte
		want [][]byte
	}{
		{[][]byte{a, b, nil, nil}, 1, nil, [][]byte{a}},
		{[][]byte{a, {}, {}, c}, 3, nil, [][]byte{a}},
		{[][]byte{a, nil, b}, 0, nil, [][]byte{nil, nil, b}},
		{[][]byte{a}, 0, nil, nil},
		{nil, 0, nil, nil},
		{[][]byte{nil, nil}, 2, nil, nil},
	} {
		v := AppendGroup(nil, tc.ways, tc.at, tc.rec)
		if ways := splitOK(t, v); !sameWays(ways, tc.want) {
			t.Errorf("AppendGroup(%q, %d, %q) = %x: %q, want %q", tc.ways, tc.at, tc.rec, v, ways, tc.want)
		}
		if len(tc.want) == 0 && string(v) != "\x04" {
			t.Errorf("AppendGroup(%q, %d, %q) = %x, want a bare format byte", tc.ways, tc.at, tc.rec, v)
		}
	}
}

func TestSplitGroupRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		n    int
		err  error
	}{
		{"bare format byte", "\x04", 0, nil},
		{"one free way", "\x04\x00", 1, nil},
		{"four ways", "\x04\x00\x01a\x00\x02bc", 4, nil},
		{"five ways", "\x04\x00\x00\x00\x00\x00", 0, ErrGroupFormat},
		{"five ways, last not free", "\x04\x01a\x01b\x01c\x01d\x01e", 0, ErrGroupFormat},
		{"truncated length", "\x04\x80", 0, ErrGroupFormat},
		{"truncated length after a way", "\x04\x01a\xff", 0, ErrGroupFormat},
		{"length past the end", "\x04\x02a", 0, ErrGroupFormat},
		{"length past the end by far", "\x04\xff\xff\xff\xff\x0fa", 0, ErrGroupFormat},
		{"length overflows 64 bits", "\x04\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f", 0, ErrGroupFormat},
		{"second length past the end", "\x04\x01a\x02b", 0, ErrGroupFormat},
	} {
		var ways [Ways][]byte
		n, err := SplitGroup([]byte(tc.in), &ways)
		if n != tc.n || !errors.Is(err, tc.err) {
			t.Errorf("%s: SplitGroup(%x) = %d, %v; want %d, %v", tc.name, tc.in, n, err, tc.n, tc.err)
		}
	}
}

func TestGroupCodecAllocs(t *testing.T) {
	rec := EncodeSlot(nil, 1, Bucket{1, 2}, "10.0.0.1")
	v := AppendGroup(nil, [][]byte{rec, nil, rec}, 3, rec)
	var ways [Ways][]byte
	if n := testing.AllocsPerRun(100, func() { _, _ = SplitGroup(v, &ways) }); n != 0 {
		t.Errorf("SplitGroup allocates %v times per call", n)
	}
	buf := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() { buf = AppendGroup(buf[:0], ways[:Ways], 1, rec) }); n != 0 {
		t.Errorf("AppendGroup allocates %v times per call", n)
	}
}

// FuzzSplitGroup: SplitGroup never panics; an error means no ways and a
// group value; a non-group value is one way, itself; the ways of a valid
// group fit in it, and AppendGroup writes them (up to trailing free ways)
// to a value that splits back to them, no longer than the input.
func FuzzSplitGroup(f *testing.F) {
	rec := EncodeSlot(nil, 1, Bucket{1, 2}, "10.0.0.1")
	for _, v := range [][]byte{
		nil, {GroupFormatV1}, {GroupFormatV1, 0}, {GroupFormatV1, 0, 0, 0, 0, 0}, {GroupFormatV1, 0x80}, {GroupFormatV1, 2, 'a'},
		rec, appendSlotV1(nil, 1, Bucket{1, 2}, 0, "x"), []byte("3f0c2a9be4d10f57:9.000000:1736940000.250000:10.0.0.1"),
		AppendGroup(nil, [][]byte{rec, nil, rec}, 3, rec),
		AppendGroup(nil, nil, 0, EncodeSlot(nil, 2, Bucket{3, 4}, strings.Repeat("k", 200))),
		AppendGroupOverflow(nil, EncodeOverflow(nil, 3, Bucket{1, 2}), [][]byte{rec, nil}, 2, rec),
		{GroupFormat, 0}, {GroupFormat, 1, OverflowFormat, 0}, {GroupFormat, 0x80}, {GroupFormat, 2, 'a'},
	} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		var ways [Ways][]byte
		n, ovf, err := SplitGroupOverflow(v, &ways)
		isGroup := IsGroup(v)
		switch {
		case err != nil:
			if n != 0 || !isGroup {
				t.Fatalf("SplitGroup(%x) = %d, %v", v, n, err)
			}
			return
		case n < 0 || n > Ways:
			t.Fatalf("SplitGroup(%x) = %d ways", v, n)
		case len(v) == 0 && n != 0:
			t.Fatalf("empty value: %d ways", n)
		case len(v) > 0 && !isGroup && (n != 1 || len(ways[0]) != len(v) || &ways[0][0] != &v[0]):
			t.Fatalf("record %x split as %q", v, ways[:n])
		}
		size := 0
		if len(v) > 0 && v[0] == GroupFormat {
			size += 1 + len(ovf)
		}
		for _, w := range ways[:n] {
			size += 1 + len(w)
		}
		if isGroup && 1+size > len(v) {
			t.Fatalf("ways %q do not fit in %x", ways[:n], v)
		}
		checkRegroup(t, v, ovf, ways[:n])
		checkReplaceWay(t, v, ovf, ways[:n])
	})
}

// checkReplaceWay checks ReplaceWay against the ways of v: replacing each
// way (and appending one, while there is room) splits back to exactly those
// ways with the one replaced.
func checkReplaceWay(t *testing.T, v, ovf []byte, ways [][]byte) {
	t.Helper()
	rec := EncodeSlot(nil, 7, Bucket{Tokens: 1, LastRefill: 2}, "new")
	for at := 0; at <= len(ways) && at < Ways; at++ {
		got := ReplaceWay(nil, v, at, rec)
		want := append(append([][]byte(nil), ways...), nil)[:max(len(ways), at+1)]
		want[at] = rec
		if !IsGroup(v) { // rewritten by AppendGroup
			if exp := AppendGroup(nil, ways, at, rec); string(got) != string(exp) {
				t.Fatalf("ReplaceWay(%x, %d) = %x, want AppendGroup's %x", v, at, got, exp)
			}
			continue
		}
		var split [Ways][]byte
		n, gotOvf, err := SplitGroupOverflow(got, &split)
		if err != nil || n != len(want) || string(gotOvf) != string(ovf) {
			t.Fatalf("ReplaceWay(%x, %d) = %x: %d ways, %v; want %d", v, at, got, n, err, len(want))
		}
		for i := range want {
			if string(split[i]) != string(want[i]) {
				t.Fatalf("ReplaceWay(%x, %d): way %d = %x, want %x", v, at, i, split[i], want[i])
			}
		}
	}
}

// ReplaceWay gives AppendGroup's bytes for the groups AppendGroup writes,
// rewrites earlier versions' values as groups, and allocates nothing.
func TestReplaceWay(t *testing.T) {
	a := EncodeSlot(nil, 1, Bucket{Tokens: 1, LastRefill: 2}, "a")
	b := EncodeSlot(nil, 2, Bucket{Tokens: 3, LastRefill: 4}, strings.Repeat("b", 200)) // a 2-byte length
	c := EncodeSlot(nil, 3, Bucket{Tokens: 5, LastRefill: 6}, "c")
	for _, ways := range [][][]byte{{a}, {a, b}, {a, nil, b}, {b, a, c, a}} {
		v := AppendGroup(nil, ways, 0, ways[0])
		for at := 0; at <= len(ways) && at < Ways; at++ {
			if got, want := ReplaceWay(nil, v, at, c), AppendGroup(nil, ways, at, c); string(got) != string(want) {
				t.Errorf("ways %d, at %d: %x, want %x", len(ways), at, got, want)
			}
		}
	}
	legacy := appendSlotV1(nil, 1, Bucket{Tokens: 1, LastRefill: 2}, 0, "a")
	if got, want := ReplaceWay(nil, legacy, 1, c), AppendGroup(nil, [][]byte{legacy}, 1, c); string(got) != string(want) {
		t.Errorf("legacy value: %x, want %x", got, want)
	}
	if got, want := ReplaceWay(nil, nil, 0, c), AppendGroup(nil, nil, 0, c); string(got) != string(want) {
		t.Errorf("empty value: %x, want %x", got, want)
	}
	for _, bad := range [][]byte{{GroupFormatV1, 0xff}, {GroupFormatV1, 5, 'a'}, {GroupFormat, 0xff}, {GroupFormat, 0, 5, 'a'}, {GroupFormat, 5, 'a'}, append(AppendGroup(nil, [][]byte{a}, 0, a), 9)} {
		if got, want := ReplaceWay(nil, bad, 1, c), AppendGroup(nil, nil, 0, c); string(got) != string(want) {
			t.Errorf("malformed group %x: %x, want a group of the record alone %x", bad, got, want)
		}
	}
	v := AppendGroup(nil, [][]byte{a, b, c}, 0, a)
	dst := make([]byte, 0, 1024)
	if n := testing.AllocsPerRun(100, func() { dst = ReplaceWay(dst[:0], v, 1, c) }); n != 0 {
		t.Errorf("ReplaceWay allocates %v times per call", n)
	}
}

// RecordFingerprint reads the fingerprint of every binary record format and
// refuses everything else.
func TestRecordFingerprint(t *testing.T) {
	w := &Window{Start: 60, N: 1, Counts: [MaxCounts]float64{2}}
	for _, rec := range [][]byte{
		EncodeSlot(nil, 42, Bucket{Tokens: 1, LastRefill: 2}, "a"),
		appendSlotV1(nil, 42, Bucket{Tokens: 1, LastRefill: 2}, 5, "a"),
		EncodeWindowSlot(nil, 42, w, "a"),
		EncodePool(nil, 42, Pool{Mode: PoolLease}, []byte("a")),
	} {
		if fp, ok := RecordFingerprint(rec); !ok || fp != 42 {
			t.Errorf("RecordFingerprint(%x) = %d, %v; want 42", rec, fp, ok)
		}
	}
	for _, rec := range [][]byte{nil, {SlotFormat, 1, 2}, []byte("000000000000002a:1:2:a"), {GroupFormat, 0, 0, 0, 0, 0, 0, 0, 0}} {
		if _, ok := RecordFingerprint(rec); ok {
			t.Errorf("RecordFingerprint(%x) accepted", rec)
		}
	}
}

// checkRegroup checks that AppendGroup writes ways (the split of v) to a
// value that splits back to them, trailing free ways left out, and that
// is no longer than v was as a group.
func checkRegroup(t *testing.T, v, ovf []byte, ways [][]byte) {
	t.Helper()
	at, rec := 0, []byte(nil)
	if len(ways) > 0 {
		at, rec = len(ways)-1, ways[len(ways)-1]
	}
	enc := AppendGroupOverflow(nil, ovf, ways, at, rec)
	want := ways
	for len(want) > 0 && len(want[len(want)-1]) == 0 {
		want = want[:len(want)-1]
	}
	var again [Ways][]byte
	m, encOvf, err := SplitGroupOverflow(enc, &again)
	if err != nil || !sameWays(again[:m], want) || string(encOvf) != string(ovf) {
		t.Fatalf("%x: ways %q regrouped as %x: %q, %v", v, ways, enc, again[:m], err)
	}
	if IsGroup(v) && len(enc) > len(v) {
		t.Fatalf("group %x regrouped as the longer %x", v, enc)
	}
}
