package state

import (
	"bytes"
	"math"
	"strconv"
	"testing"
)

func TestOverflowRoundTrip(t *testing.T) {
	b := Bucket{Tokens: 3.25, LastRefill: 1736940000.5}
	v := EncodeOverflow(nil, 0x8001, b)
	if len(v) != overflowSize {
		t.Fatalf("length %d", len(v))
	}
	s, got, err := DecodeOverflow(v)
	if err != nil || s != 0x8001 || got != b {
		t.Fatalf("DecodeOverflow = %x, %+v, %v", s, got, err)
	}
	w := Window{Start: 60, N: 2, Counts: [MaxCounts]float64{3, 1.5}}
	wv := EncodeWindowOverflow(nil, 7, &w)
	var gw Window
	if s, err := DecodeWindowOverflow(wv, &gw); err != nil || s != 7 || gw != w {
		t.Fatalf("DecodeWindowOverflow = %x, %+v, %v", s, gw, err)
	}
	for name, bad := range map[string][]byte{
		"empty":        nil,
		"short":        v[:24],
		"long":         append(bytes.Clone(v), 0),
		"slot":         EncodeSlot(nil, 1, b, "a"),
		"window":       wv,
		"nan tokens":   EncodeOverflow(nil, 0, Bucket{Tokens: math.NaN()}),
		"neg refill":   EncodeOverflow(nil, 0, Bucket{LastRefill: -1}),
		"group format": {GroupFormat},
	} {
		if _, _, err := DecodeOverflow(bad); err == nil {
			t.Errorf("%s: DecodeOverflow(%x) accepted", name, bad)
		}
	}
	for name, bad := range map[string][]byte{
		"empty":    nil,
		"bucket":   v,
		"trailing": append(bytes.Clone(wv), 0),
		"short":    wv[:10],
	} {
		if _, err := DecodeWindowOverflow(bad, &gw); err == nil {
			t.Errorf("%s: DecodeWindowOverflow(%x) accepted", name, bad)
		}
	}
}

// Linear counting: on average within 10% up to a hundred identities, a
// single estimate within 50%; a full sketch says MaxSharers.
func TestEstimateSharers(t *testing.T) {
	if EstimateSharers(0) != 0 || EstimateSharers(math.MaxUint64) != MaxSharers {
		t.Fatalf("empty %d, full %d", EstimateSharers(0), EstimateSharers(math.MaxUint64))
	}
	k := HashKey{5, 6}
	for _, n := range []int{1, 2, 5, 10, 30, 60, 100} {
		worst, sum := 0.0, 0.0
		const trials = 50
		for trial := 0; trial < trials; trial++ {
			var s uint64
			for i := 0; i < n; i++ {
				s |= SharerBit(KeyedFingerprint(k, strconv.Itoa(trial)+"/"+strconv.Itoa(i)))
			}
			e := float64(EstimateSharers(s))
			worst = max(worst, math.Abs(e-float64(n))/float64(n))
			sum += e
		}
		if mean := sum / trials; math.Abs(mean-float64(n)) > 0.1*float64(n) || worst > 0.5 {
			t.Errorf("%d identities: mean estimate %.1f, off by up to %.0f%%", n, mean, worst*100)
		}
	}
}

// Overflow records round-trip through a group, and replacing the overflow
// record keeps the ways (and replacing a way keeps the overflow record).
func TestReplaceOverflow(t *testing.T) {
	a, b := EncodeSlot(nil, 1, Bucket{1, 2}, "a"), EncodeSlot(nil, 2, Bucket{3, 4}, "b")
	o1 := EncodeOverflow(nil, 1, Bucket{Tokens: 1, LastRefill: 5})
	o2 := EncodeOverflow(nil, 3, Bucket{Tokens: 0, LastRefill: 6})
	for name, v := range map[string][]byte{
		"v1 group":      AppendGroup(nil, [][]byte{a, nil}, 2, b),
		"overflow":      AppendGroupOverflow(nil, o1, [][]byte{a, nil}, 2, b),
		"legacy record": a,
		"empty":         nil,
	} {
		var ways, after [Ways][]byte
		n, _, err := SplitGroupOverflow(v, &ways)
		if err != nil {
			t.Fatal(err)
		}
		got := ReplaceOverflow(nil, v, o2)
		m, ovf, err := SplitGroupOverflow(got, &after)
		if err != nil || got[0] != GroupFormat || !bytes.Equal(ovf, o2) || !sameWays(ways[:n], after[:m]) {
			t.Errorf("%s: ReplaceOverflow(%x) = %x: %q, overflow %x, %v", name, v, got, after[:m], ovf, err)
		}
		r := EncodeSlot(nil, 9, Bucket{7, 8}, "r")
		at := min(1, m)
		again := ReplaceWay(nil, got, at, r)
		m, ovf, err = SplitGroupOverflow(again, &after)
		if err != nil || !bytes.Equal(ovf, o2) || m < at+1 || !bytes.Equal(after[at], r) {
			t.Errorf("%s: ReplaceWay after ReplaceOverflow: %x (%v)", name, again, err)
		}
	}
	for _, bad := range [][]byte{{GroupFormat, 0xff}, {GroupFormat, 30, 1}, {GroupFormatV1, 5, 'a'}} {
		got := ReplaceOverflow(nil, bad, o1)
		var ways [Ways][]byte
		n, ovf, err := SplitGroupOverflow(got, &ways)
		if err != nil || n != 0 || !bytes.Equal(ovf, o1) {
			t.Errorf("malformed %x: %x, want a group of the overflow record alone", bad, got)
		}
	}
	dst := make([]byte, 0, 256)
	v := AppendGroupOverflow(nil, o1, [][]byte{a, b}, 2, a)
	if n := testing.AllocsPerRun(100, func() { dst = ReplaceOverflow(dst[:0], v, o2) }); n != 0 {
		t.Errorf("ReplaceOverflow allocates %v times", n)
	}
}

// FuzzDecodeOverflow: the decoders never panic; what they accept
// re-encodes to the same bytes (bucket) or decodes again to the same
// window.
func FuzzDecodeOverflow(f *testing.F) {
	w := Window{Start: 60, N: 2, Counts: [MaxCounts]float64{3, 1.5}}
	for _, v := range [][]byte{
		nil, {OverflowFormat}, EncodeOverflow(nil, 5, Bucket{Tokens: 2, LastRefill: 3}),
		EncodeOverflow(nil, math.MaxUint64, Bucket{Tokens: -4, LastRefill: 1736940000.25}),
		EncodeWindowOverflow(nil, 1, &w), {WindowOverflowFormat, 0, 0, 0, 0, 0, 0, 0, 0},
	} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		if s, b, err := DecodeOverflow(v); err == nil {
			if !isFinite(b.Tokens) || !isFinite(b.LastRefill) || b.LastRefill < 0 {
				t.Fatalf("accepted %x as %+v", v, b)
			}
			s2, b2, err := DecodeOverflow(EncodeOverflow(nil, s, b))
			if err != nil || s2 != s || !within(b2.Tokens, b.Tokens) || !within(b2.LastRefill, b.LastRefill) {
				t.Fatalf("round trip %x: %+v -> %+v, %v", v, b, b2, err)
			}
		}
		var w, w2 Window
		if s, err := DecodeWindowOverflow(v, &w); err == nil {
			if w.N < 1 || w.N > MaxCounts || !isFinite(w.Start) || w.Start < 0 {
				t.Fatalf("accepted %x as %+v", v, w)
			}
			s2, err := DecodeWindowOverflow(EncodeWindowOverflow(nil, s, &w), &w2)
			if err != nil || s2 != s || w2.N > w.N {
				t.Fatalf("window round trip %x: %+v -> %+v, %v", v, w, w2, err)
			}
		}
		// Any value as a group's overflow record: the group splits back to
		// it and keeps its ways.
		g := AppendGroupOverflow(nil, v, [][]byte{{1}}, 1, []byte{2})
		var ways [Ways][]byte
		n, ovf, err := SplitGroupOverflow(g, &ways)
		if err != nil || n != 2 || !bytes.Equal(ovf, v) {
			t.Fatalf("group with overflow %x: %x split as %d ways, %x, %v", v, g, n, ovf, err)
		}
	})
}
