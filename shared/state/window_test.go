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
	v := EncodeWindowSlot(nil, 0x3f0c2a9be4d10f57, &w, "10.0.0.1:with:colons")
	// The documented layout: format byte, fingerprint, window, identity.
	want := binary.LittleEndian.AppendUint64([]byte{WindowSlotFormat}, 0x3f0c2a9be4d10f57)
	want = append(want, EncodeWindow(nil, &w)[1:]...)
	want = append(want, "10.0.0.1:with:colons"...)
	if string(v) != string(want) || v[0] != 0x06 {
		t.Fatalf("slot value %x, want %x", v, want)
	}
	var got Window
	fp, id, err := DecodeWindowSlot(v, &got)
	if err != nil || fp != 0x3f0c2a9be4d10f57 || string(id) != "10.0.0.1:with:colons" || got != w {
		t.Fatalf("decoded %x %q %+v %v", fp, id, got, err)
	}
	// The text form of earlier versions.
	text := []byte("3f0c2a9be4d10f57:3600:1,0,2.5:x")
	if fp, id, err := DecodeWindowSlot(text, &got); err != nil || fp != 0x3f0c2a9be4d10f57 || string(id) != "x" || got != w {
		t.Fatalf("text slot: %x %q %+v %v", fp, id, got, err)
	}
	for _, bad := range []string{
		"3f0c2a9be4d10f57:3600:1",    // no identity
		"3f0c2a9be4d10f57:3600:1:",   // empty identity
		"3F0C2A9BE4D10F57:3600:1:x",  // upper-case fingerprint
		"3f0c2a9be4d10f57:3600:-1:x", // negative count
		"3f0c2a9be4d10f57:1.5:2.5:x", // valid: decodes
	} {
		_, _, err := DecodeWindowSlot([]byte(bad), &got)
		if (err == nil) != strings.HasSuffix(bad, "2.5:x") {
			t.Errorf("DecodeWindowSlot(%q) = %v", bad, err)
		}
	}
	x := EncodeWindowSlot(nil, 1, &w, "x")
	for name, bad := range map[string][]byte{
		"format byte only": {WindowSlotFormat},
		"short":            v[:windowSlotHeader],
		"no identity":      x[:len(x)-1],
		"long identity":    append(x[:len(x)-1:len(x)-1], strings.Repeat("y", MaxIdentity+1)...),
		"no counts":        v[:windowSlotHeader+9],
		"negative start":   append(binary.LittleEndian.AppendUint64(v[:windowSlotHeader:windowSlotHeader], math.Float64bits(-1)), 1, 0, 'x'),
	} {
		if fp, id, err := DecodeWindowSlot(bad, &got); err == nil || fp != 0 || id != nil {
			t.Errorf("%s: accepted %x", name, bad)
		}
	}
}

// appendWindowSlotV1 builds a record in the WindowSlotFormatV1 layout by
// hand: format byte, fingerprint, the 8 spill_until bytes given, window and
// identity.
func appendWindowSlotV1(dst []byte, fp uint64, spill uint64, w *Window, identity string) []byte {
	dst = append(dst, WindowSlotFormatV1)
	dst = binary.LittleEndian.AppendUint64(dst, fp)
	dst = binary.LittleEndian.AppendUint64(dst, spill)
	dst = append(dst, EncodeWindow(nil, w)[1:]...)
	return append(dst, identity...)
}

// Window records of the version before groups decode to the same window
// whatever their spill mark holds, and re-encode in WindowSlotFormat.
func TestDecodeWindowSlotV1(t *testing.T) {
	w := Window{Start: 3600, N: 3, Counts: [MaxCounts]float64{1, 0, 2.5}}
	for _, spill := range []uint64{
		0, math.Float64bits(7200.000001), math.Float64bits(math.NaN()), math.Float64bits(math.Inf(-1)),
		math.Float64bits(-1), 0xffffffffffffffff,
	} {
		v := appendWindowSlotV1(nil, 0x3f0c2a9be4d10f57, spill, &w, "10.0.0.1")
		var got Window
		fp, id, err := DecodeWindowSlot(v, &got)
		if err != nil || fp != 0x3f0c2a9be4d10f57 || string(id) != "10.0.0.1" || got != w {
			t.Errorf("V1 record with spill bits %x: %x %q %+v %v", spill, fp, id, got, err)
		}
		enc := EncodeWindowSlot(nil, fp, &got, string(id))
		if enc[0] != WindowSlotFormat || string(enc[1:]) != string(v[1:9])+string(v[17:]) {
			t.Errorf("V1 record %x re-encoded as %x", v, enc)
		}
	}
	good := appendWindowSlotV1(nil, 1, 0, &w, "x")
	for name, bad := range map[string][]byte{
		"short":              good[:windowSlotHeaderV1-1],
		"no window":          good[:windowSlotHeaderV1],
		"no identity":        good[:len(good)-1],
		"new layout, tagged": retag(EncodeWindowSlot(nil, 1, &Window{N: 1}, "1234"), WindowSlotFormatV1),
	} {
		var got Window
		if fp, id, err := DecodeWindowSlot(bad, &got); err == nil || fp != 0 || id != nil {
			t.Errorf("%s: accepted %x", name, bad)
		}
	}
}

func TestWindowSlotCodecAllocs(t *testing.T) {
	w := Window{Start: 3600, N: 3, Counts: [MaxCounts]float64{1, 0, 2.5}}
	var got Window
	for name, v := range map[string][]byte{
		"new": EncodeWindowSlot(nil, 1, &w, "10.0.0.1"),
		"V1":  appendWindowSlotV1(nil, 1, 0, &w, "10.0.0.1"),
	} {
		if n := testing.AllocsPerRun(100, func() { _, _, _ = DecodeWindowSlot(v, &got) }); n != 0 {
			t.Errorf("DecodeWindowSlot of a %s record allocates %v times per call", name, n)
		}
	}
	buf := make([]byte, 0, 128)
	if n := testing.AllocsPerRun(100, func() { buf = EncodeWindowSlot(buf[:0], 1, &w, "10.0.0.1") }); n != 0 {
		t.Errorf("EncodeWindowSlot allocates %v times per call", n)
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
// and a 1..MaxIdentity identity, and re-encode (in WindowSlotFormat) to a
// record that decodes to the same fingerprint, identity and window; binary
// ones that were canonical re-encode to themselves (V1: without the mark).
func FuzzDecodeWindowSlot(f *testing.F) {
	w := Window{Start: 3600, N: 2, Counts: [MaxCounts]float64{1, 2.5}}
	f.Add([]byte("3f0c2a9be4d10f57:3600:1,0,2.5:10.0.0.1"))
	f.Add([]byte("3f0c2a9be4d10f57:3600:1:"))
	f.Add([]byte("zz"))
	f.Add(EncodeWindowSlot(nil, 0x3f0c2a9be4d10f57, &w, "x"))
	f.Add(EncodeWindowSlot(nil, 1, &Window{N: 1}, "y")[:12])
	f.Add(appendWindowSlotV1(nil, 0x3f0c2a9be4d10f57, math.Float64bits(7200), &w, "x"))
	f.Add(appendWindowSlotV1(nil, 2, math.Float64bits(math.NaN()), &Window{N: 1}, "\x00:"))
	f.Add(appendWindowSlotV1(nil, 1, 0, &Window{N: 1}, "y")[:20])
	f.Fuzz(func(t *testing.T, v []byte) {
		var w Window
		fp, id, err := DecodeWindowSlot(v, &w)
		if err != nil {
			if fp != 0 || id != nil {
				t.Fatalf("error %v with fingerprint %x, identity %q", err, fp, id)
			}
			return
		}
		if len(id) == 0 || len(id) > MaxIdentity {
			t.Fatalf("identity %q accepted", id)
		}
		checkWindow(t, v, &w)
		var w2 Window
		enc := EncodeWindowSlot(nil, fp, &w, string(id))
		fp2, id2, err := DecodeWindowSlot(enc, &w2)
		// (N may shrink: trailing zero counts are left out when re-encoded.)
		if err != nil || fp2 != fp || string(id2) != string(id) || !sameWindow(&w, &w2) {
			t.Fatalf("re-encoding %q as %q: %x %q %v", v, enc, fp2, id2, err)
		}
		if canon := canonicalWindowSlot(v); canon != nil && string(enc) != string(canon) {
			t.Fatalf("canonical record %x re-encoded as %x", v, enc)
		}
	})
}

// canonicalWindowSlot returns the WindowSlotFormat record a valid binary
// record v re-encodes to if it is canonical (EncodeWindow writes its window
// back byte for byte), else nil.
func canonicalWindowSlot(v []byte) []byte {
	var header int
	switch v[0] {
	case WindowSlotFormat:
		header = windowSlotHeader
	case WindowSlotFormatV1:
		header = windowSlotHeaderV1
	default:
		return nil
	}
	var w Window
	rest, _ := decodeWindow(v[header:], &w)
	win := v[header : len(v)-len(rest)]
	if string(EncodeWindow(nil, &w)[1:]) != string(win) {
		return nil
	}
	return append(append([]byte{WindowSlotFormat}, v[1:9]...), v[header:]...)
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
