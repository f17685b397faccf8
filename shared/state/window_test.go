package state

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
)

// Each window encodes to the documented binary layout, decodes back (with
// trailing zero counts left out), and reads the same as the text form of
// earlier versions.
func TestEncodeWindow(t *testing.T) {
	for _, c := range []struct {
		w     Window
		n     int    // counts written
		text  string // the earlier text form of the same window
		bytes int
	}{
		{Window{Start: 1736942400, N: 1, Counts: [MaxCounts]float64{3}}, 1, "1736942400:3", 1 + 9 + 1},
		{Window{Start: 60, N: 4, Counts: [MaxCounts]float64{120, 80.5, 0, 7}}, 4, "60:120,80.5,0,7", 1 + 9 + 2 + 4 + 1 + 1},
		{Window{Start: 60, N: 4, Counts: [MaxCounts]float64{0, 2, 0, 0}}, 2, "60:0,2", 1 + 9 + 1 + 1},
		{Window{Start: 0, N: 3}, 1, "0:0", 1 + 9 + 1},
		{Window{Start: 1.25, N: 1, Counts: [MaxCounts]float64{0.000001}}, 1, "1.25:0.000001", 1 + 9 + 1},
		{Window{Start: 0, N: 1, Counts: [MaxCounts]float64{1e12}}, 1, "0:1000000000000", 1 + 9 + 6},
	} {
		v := EncodeWindow(nil, &c.w)
		if len(v) != c.bytes || v[0] != WindowFormat || int(v[9]) != c.n ||
			math.Float64frombits(binary.LittleEndian.Uint64(v[1:])) != c.w.Start {
			t.Errorf("EncodeWindow(%v) = %x: want %d bytes, format byte, start, %d counts", c.w.Counts[:c.w.N], v, c.bytes, c.n)
		}
		want := c.w
		want.N = c.n
		var got, legacy Window
		if err := DecodeWindow(v, &got); err != nil || got != want {
			t.Errorf("DecodeWindow(%x) = %+v, %v; want %+v", v, got.Counts[:got.N], err, want.Counts[:want.N])
		}
		if err := DecodeWindow([]byte(c.text), &legacy); err != nil || legacy != want {
			t.Errorf("text %q = %+v, %v; want %+v", c.text, legacy.Counts[:legacy.N], err, want.Counts[:want.N])
		}
	}
	// 60 counts of at most 127 take one byte each.
	w := Window{Start: 3600, N: MaxCounts}
	for i := range w.Counts {
		w.Counts[i] = float64(i%3) * 0.00001
	}
	if n := len(EncodeWindow(nil, &w)); n > 1+9+MaxCounts {
		t.Errorf("60 small counts take %d bytes", n)
	}
}

// Binary windows are as strict as text ones.
func TestDecodeBinaryWindowRejects(t *testing.T) {
	good := EncodeWindow(nil, &Window{Start: 60, N: 2, Counts: [MaxCounts]float64{1, 2}})
	with := func(i int, b byte) []byte { v := append([]byte(nil), good...); v[i] = b; return v }
	for _, c := range []struct {
		name string
		in   []byte
		want error
	}{
		{"format byte only", good[:1], ErrWindowFormat},
		{"no counts", good[:10], ErrWindowCount},
		{"truncated count", good[:len(good)-1], ErrWindowCount},
		{"trailing byte", append(append([]byte(nil), good...), 0), ErrWindowFormat},
		{"zero counts", with(9, 0), ErrWindowFormat},
		{"too many counts", with(9, MaxCounts+1), ErrWindowCounts},
		{"negative start", append(binary.LittleEndian.AppendUint64([]byte{WindowFormat}, math.Float64bits(-1)), 1, 0), ErrWindowStart},
		{"NaN start", append(binary.LittleEndian.AppendUint64([]byte{WindowFormat}, math.Float64bits(math.NaN())), 1, 0), ErrWindowStart},
		{"overlong varint", append(binary.LittleEndian.AppendUint64([]byte{WindowFormat}, 0), 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f), ErrWindowCount},
	} {
		var w Window
		if err := DecodeWindow(c.in, &w); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
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
	if v[0] != WindowSlotFormat || binary.LittleEndian.Uint64(v[1:]) != 0x3f0c2a9be4d10f57 ||
		binary.LittleEndian.Uint64(v[9:]) != 0 || !strings.HasSuffix(string(v), "10.0.0.1:with:colons") {
		t.Fatalf("slot value %x", v)
	}
	var got Window
	fp, spill, id, err := DecodeWindowSlot(v, &got)
	if err != nil || fp != 0x3f0c2a9be4d10f57 || string(id) != "10.0.0.1:with:colons" || got != w || spill != 0 {
		t.Fatalf("decoded %x %q %+v %v %v", fp, id, got, spill, err)
	}
	// With a spill mark (rounded up to the micro-second), and raised.
	v = EncodeWindowSlot(nil, 0x3f0c2a9be4d10f57, &w, "x", 7200.0000004)
	if _, spill, id, err := DecodeWindowSlot(v, &got); err != nil || spill != 7200.000001 || string(id) != "x" || got != w {
		t.Fatalf("marked: %v %q %+v %v", spill, id, got, err)
	}
	r := RaiseWindowSpill([]byte("pre"), v, 9000)
	if _, spill, id, err := DecodeWindowSlot(r[3:], &got); err != nil || spill != 9000 || string(id) != "x" || got != w ||
		string(r[:3]) != "pre" || len(r) != 3+len(v) {
		t.Fatalf("raised %x: %v %q %+v %v", r, spill, id, got, err)
	}
	// The text form of earlier versions: no mark; raising rewrites it binary.
	text := []byte("3f0c2a9be4d10f57:3600:1,0,2.5:x")
	if fp, spill, id, err := DecodeWindowSlot(text, &got); err != nil || fp != 0x3f0c2a9be4d10f57 || spill != 0 || string(id) != "x" || got != w {
		t.Fatalf("text slot: %x %v %q %+v %v", fp, spill, id, got, err)
	}
	if r := RaiseWindowSpill(nil, text, 5); r[0] != WindowSlotFormat {
		t.Fatalf("raised text slot %q", r)
	} else if _, spill, id, err := DecodeWindowSlot(r, &got); err != nil || spill != 5 || string(id) != "x" || got != w {
		t.Fatalf("raised text slot: %v %q %+v %v", spill, id, got, err)
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
	for name, bad := range map[string][]byte{
		"short":       v[:16],
		"no identity": EncodeWindowSlot(nil, 1, &w, "x", 0)[:len(EncodeWindowSlot(nil, 1, &w, "x", 0))-1],
		"negative mark": func() []byte {
			b := append([]byte(nil), v...)
			binary.LittleEndian.PutUint64(b[9:], math.Float64bits(-1))
			return b
		}(),
	} {
		if _, _, _, err := DecodeWindowSlot(bad, &got); err == nil {
			t.Errorf("%s: accepted %x", name, bad)
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
	f.Add(EncodeWindow(nil, &Window{Start: 1736942400, N: 4, Counts: [MaxCounts]float64{120, 80.5, 0, 7}}))
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
			// Counts above MaxWindowCount (far above any limit) are
			// stored as MaxWindowCount.
			if want := min(w.Counts[i], MaxWindowCount); !nearMicro(want, w2.Counts[i]) {
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
	f.Add(EncodeWindowSlot(nil, 0x3f0c2a9be4d10f57, &Window{Start: 3600, N: 2, Counts: [MaxCounts]float64{1, 2.5}}, "x", 7200))
	f.Add(EncodeWindowSlot(nil, 1, &Window{N: 1}, "y", 0)[:20])
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
		// (N may shrink: trailing zero counts are left out when re-encoded.)
		if err != nil || fp2 != fp || string(id2) != string(id) || !sameWindow(&w, &w2) || spill2 < spill+10 {
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

// sameWindow: b is a as stored, up to micro-unit rounding, counts above
// MaxWindowCount stored as it, and trailing zero counts left out.
func sameWindow(a, b *Window) bool {
	if !nearMicro(a.Start, b.Start) {
		return false
	}
	for i := range a.Counts {
		if !nearMicro(min(a.Counts[i], MaxWindowCount), b.Counts[i]) {
			return false
		}
	}
	return true
}
