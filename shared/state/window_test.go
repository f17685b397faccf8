package state

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestEncodeWindow(t *testing.T) {
	for _, c := range []struct {
		w    Window
		want string
	}{
		{Window{Start: 1736942400, N: 1, Counts: [MaxCounts]float64{3}}, "1736942400:3"},
		{Window{Start: 60, N: 4, Counts: [MaxCounts]float64{120, 80.5, 0, 7}}, "60:120,80.5,0,7"},
		{Window{Start: 60, N: 4, Counts: [MaxCounts]float64{0, 2, 0, 0}}, "60:0,2"}, // trailing zeros left out
		{Window{Start: 0, N: 3}, "0:0"},
		{Window{Start: 1.25, N: 1, Counts: [MaxCounts]float64{0.000001}}, "1.25:0.000001"},
	} {
		if got := string(EncodeWindow(nil, &c.w)); got != c.want {
			t.Errorf("EncodeWindow(%+v) = %q, want %q", c.w.Counts[:c.w.N], got, c.want)
		}
	}
}

func TestDecodeWindowRejects(t *testing.T) {
	for _, c := range []struct {
		in   string
		want error
	}{
		{"", ErrWindowStart},
		{"5", ErrWindowFormat},
		{"5:", ErrWindowCount},
		{"-1:2", ErrWindowStart},
		{"NaN:2", ErrWindowStart},
		{"5:1,", ErrWindowCount},
		{"5:1,-2", ErrWindowCount},
		{"5:1;2", ErrWindowFormat},
		{"5:1,2:3", ErrWindowFormat},
		{"5:" + strings.Repeat("1,", MaxCounts) + "1", ErrWindowCounts},
		{"5:1e3", ErrWindowFormat},
		{"5: 1", ErrWindowCount},
	} {
		var w Window
		if err := DecodeWindow([]byte(c.in), &w); !errors.Is(err, c.want) {
			t.Errorf("DecodeWindow(%q) = %v, want %v", c.in, err, c.want)
		}
	}
	var w Window
	if err := DecodeWindow([]byte("5:"+strings.Repeat("1,", MaxCounts-1)+"1"), &w); err != nil || w.N != MaxCounts {
		t.Errorf("MaxCounts counts: %v, N %d", err, w.N)
	}
}

func TestWindowSlotRoundTrip(t *testing.T) {
	w := Window{Start: 3600, N: 3, Counts: [MaxCounts]float64{1, 0, 2.5}}
	v := EncodeWindowSlot(nil, 0x3f0c2a9be4d10f57, &w, "10.0.0.1:with:colons", 0)
	if string(v) != "3f0c2a9be4d10f57:3600:1,0,2.5:10.0.0.1:with:colons" {
		t.Fatalf("slot value %q", v)
	}
	var got Window
	fp, spill, id, err := DecodeWindowSlot(v, &got)
	if err != nil || fp != 0x3f0c2a9be4d10f57 || string(id) != "10.0.0.1:with:colons" || got != w || spill != 0 {
		t.Fatalf("decoded %x %q %+v %v %v", fp, id, got, spill, err)
	}
	// With a spill mark (rounded up to the micro-second), and raised.
	v = EncodeWindowSlot(nil, 0x3f0c2a9be4d10f57, &w, "x", 7200.0000004)
	if string(v) != "^7200.000001:3f0c2a9be4d10f57:3600:1,0,2.5:x" {
		t.Fatalf("marked slot value %q", v)
	}
	if _, spill, id, err := DecodeWindowSlot(v, &got); err != nil || spill != 7200.000001 || string(id) != "x" || got != w {
		t.Fatalf("marked: %v %q %+v %v", spill, id, got, err)
	}
	if r := RaiseWindowSpill(nil, v, 9000); string(r) != "^9000.000000:3f0c2a9be4d10f57:3600:1,0,2.5:x" {
		t.Fatalf("raised %q", r)
	}
	if r := RaiseWindowSpill(nil, []byte("3f0c2a9be4d10f57:3600:1:x"), 5); string(r) != "^5.000000:3f0c2a9be4d10f57:3600:1:x" {
		t.Fatalf("raised unmarked %q", r)
	}
	for _, bad := range []string{"^", "^:", "^-1:", "^x:", "^5", "^5:^5:3f0c2a9be4d10f57:3600:1:x"} {
		if _, _, _, err := DecodeWindowSlot([]byte(bad), &got); err == nil {
			t.Errorf("DecodeWindowSlot(%q) accepted", bad)
		}
	}
	for _, bad := range []string{
		"3f0c2a9be4d10f57:3600:1",    // no identity
		"3f0c2a9be4d10f57:3600:1:",   // empty identity
		"3F0C2A9BE4D10F57:3600:1:x",  // upper-case fingerprint
		"3f0c2a9be4d10f57:3600:-1:x", // negative count
		"3f0c2a9be4d10f57:1.5:2.5:x", // valid: decodes
	} {
		_, _, _, err := DecodeWindowSlot([]byte(bad), &got)
		if (err == nil) != strings.HasSuffix(bad, "2.5:x") {
			t.Errorf("DecodeWindowSlot(%q) = %v", bad, err)
		}
	}
}

// FuzzDecodeWindow: never panics; what it accepts is finite, >= 0, within
// MaxCounts and survives an encode/decode round trip (up to the trimming
// of trailing zero counts and micro-unit rounding).
func FuzzDecodeWindow(f *testing.F) {
	for _, s := range []string{"1736942400:120,80.5,0,7", "0:0", "5:", "", "1:2:3", "NaN:1", "1:Inf", "1:1,,2", "-0:0"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		var w Window
		if err := DecodeWindow(v, &w); err != nil {
			return
		}
		checkWindow(t, v, &w)
		var w2 Window
		enc := EncodeWindow(nil, &w)
		if err := DecodeWindow(enc, &w2); err != nil {
			t.Fatalf("re-encoding of %q = %q does not decode: %v", v, enc, err)
		}
		if !nearMicro(w.Start, w2.Start) {
			t.Fatalf("start %v -> %v", w.Start, w2.Start)
		}
		for i := range w.Counts {
			if !nearMicro(w.Counts[i], w2.Counts[i]) {
				t.Fatalf("count %d: %v -> %v (%q -> %q)", i, w.Counts[i], w2.Counts[i], v, enc)
			}
		}
	})
}

// FuzzDecodeWindowSlot: never panics; accepted values have a valid window
// and a 1..MaxIdentity identity.
func FuzzDecodeWindowSlot(f *testing.F) {
	f.Add([]byte("3f0c2a9be4d10f57:3600:1,0,2.5:10.0.0.1"))
	f.Add([]byte("3f0c2a9be4d10f57:3600:1:"))
	f.Add([]byte("zz"))
	f.Add([]byte("^7200.000001:3f0c2a9be4d10f57:3600:1:x"))
	f.Add([]byte("^-1:3f0c2a9be4d10f57:3600:1:x"))
	f.Fuzz(func(t *testing.T, v []byte) {
		var w Window
		fp, spill, id, err := DecodeWindowSlot(v, &w)
		if err != nil {
			return
		}
		if len(id) == 0 || len(id) > MaxIdentity {
			t.Fatalf("identity %q accepted", id)
		}
		if !(spill >= 0) || math.IsInf(spill, 0) {
			t.Fatalf("spill mark %v accepted", spill)
		}
		// Raising the mark keeps everything else.
		var w2 Window
		fp2, spill2, id2, err := DecodeWindowSlot(RaiseWindowSpill(nil, v, spill+10), &w2)
		if err != nil || fp2 != fp || string(id2) != string(id) || w2 != w || spill2 < spill+10 {
			t.Fatalf("raising %q: %x %v %q %v", v, fp2, spill2, id2, err)
		}
		checkWindow(t, v, &w)
	})
}

func checkWindow(t *testing.T, v []byte, w *Window) {
	t.Helper()
	if !(w.Start >= 0) || math.IsInf(w.Start, 0) || w.N < 1 || w.N > MaxCounts {
		t.Fatalf("accepted %q as start %v, n %d", v, w.Start, w.N)
	}
	for i, c := range w.Counts {
		if !(c >= 0) || math.IsInf(c, 0) || (i >= w.N && c != 0) {
			t.Fatalf("accepted %q with count %d = %v", v, i, c)
		}
	}
}

// nearMicro: equal after rounding to micro-units (what the codec keeps).
func nearMicro(a, b float64) bool {
	return math.Abs(a-b) <= 5e-7*math.Max(1, math.Abs(a))+1e-12
}
