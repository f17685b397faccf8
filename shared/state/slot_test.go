package state

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand"
	"strconv"
	"strings"
	"testing"
)

// AppendMicros prints exactly what strconv prints for the value rounded to
// micro-units (the fast path of the former plugin/filter codec, now the
// only encoder).
func TestAppendMicrosMatchesStrconv(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	vals := []float64{0, 1, -1, 0.5, 1e-7, -1e-7, 0.0000005, -0.0000005, 19.9999995, 1700000000, 1700000000.123456,
		1700000000.1234565, 2000, 1e12, 9e9, 8.9e9, -8.9e9, 9007199254.740991, 9007199254.740992, 1e15,
		math.MaxFloat64, -math.MaxFloat64, math.Inf(1), math.Inf(-1), math.NaN(), math.Copysign(0, -1),
		math.SmallestNonzeroFloat64}
	for i := 0; i < 50000; i++ {
		switch i % 4 {
		case 0:
			vals = append(vals, rng.Float64()*2000)
		case 1:
			vals = append(vals, 1.7e9+rng.Float64()*1e8)
		case 2:
			vals = append(vals, (rng.Float64()-0.5)*1e10)
		default:
			vals = append(vals, math.Float64frombits(rng.Uint64()))
		}
	}
	for _, v := range vals {
		checkMicros(t, v)
	}
}

func checkMicros(t *testing.T, v float64) {
	t.Helper()
	got := string(AppendMicros(nil, v))
	m := math.Round(v * 1e6)
	want := strconv.FormatFloat(v, 'f', 6, 64)
	if m > -maxMicro && m < maxMicro {
		want = strconv.FormatFloat(m/1e6, 'f', 6, 64)
	}
	if got != want {
		t.Fatalf("AppendMicros(%v) = %q, want %q", v, got, want)
	}
	if !math.IsNaN(v) && !math.IsInf(v, 0) {
		back, err := strconv.ParseFloat(got, 64)
		if err != nil || !within(back, v) {
			t.Fatalf("AppendMicros(%v) = %q reads back as %v (%v)", v, got, back, err)
		}
	}
}

func TestEncodeDecodeSlot(t *testing.T) {
	id := "10.0.0.1"
	fp := Fingerprint(id)
	b := Bucket{Tokens: 9, LastRefill: 1736940000.25}
	v := EncodeSlot(nil, fp, b, id)
	// The documented layout, byte by byte.
	want := []byte{SlotFormat}
	want = binary.LittleEndian.AppendUint64(want, fp)
	want = binary.LittleEndian.AppendUint64(want, math.Float64bits(9))
	want = binary.LittleEndian.AppendUint64(want, math.Float64bits(1736940000.25))
	want = append(want, id...)
	if string(v) != string(want) || v[0] != 0x05 || len(v) != 25+len(id) {
		t.Fatalf("EncodeSlot = %x, want %x", v, want)
	}
	s, err := DecodeSlot(v)
	if err != nil || s.Fingerprint != fp || s.Bucket != b || string(s.Identity) != id {
		t.Fatalf("DecodeSlot(%x) = %+v, %v", v, s, err)
	}
	// Tokens and times are rounded to micro-units, as in the text form.
	s, err = DecodeSlot(EncodeSlot(nil, fp, Bucket{Tokens: 1.00000049, LastRefill: 5.0000005}, id))
	if err != nil || s.Bucket != (Bucket{Tokens: 1, LastRefill: 5.000001}) {
		t.Errorf("rounding: %+v, %v", s.Bucket, err)
	}
	// Identities may contain any byte.
	for _, id := range []string{"a:b:c", ":", "\x00\xff|\\#", "[::1]", "\x01", strings.Repeat("x", MaxIdentity)} {
		v := EncodeSlot(nil, 42, Bucket{Tokens: -1.5, LastRefill: 0}, id)
		s, err := DecodeSlot(v)
		if err != nil || s.Fingerprint != 42 || s.Bucket != (Bucket{-1.5, 0}) || string(s.Identity) != id {
			t.Errorf("round trip of identity %q: %+v, %v", id, s, err)
		}
	}
	// A too-long identity is stored in its bounded form.
	long := strings.Repeat("k", 10000)
	v = EncodeSlot(nil, 1, b, long)
	if len(v) != slotHeader+82 {
		t.Errorf("slot value for a 10k identity is %d bytes", len(v))
	}
	if s, err := DecodeSlot(v); err != nil || string(s.Identity) != string(AppendIdentity(nil, long)) {
		t.Errorf("long identity: %q, %v", s.Identity, err)
	}
}

// Values written by earlier versions, in the text form, still decode (so
// buckets survive a plugin upgrade).
func TestDecodeTextSlot(t *testing.T) {
	s, err := DecodeSlot([]byte("3f0c2a9be4d10f57:9.000000:1736940000.250000:10.0.0.1"))
	if err != nil || s.Fingerprint != 0x3f0c2a9be4d10f57 || s.Bucket != (Bucket{9, 1736940000.25}) ||
		string(s.Identity) != "10.0.0.1" {
		t.Fatalf("text slot: %+v, %v", s, err)
	}
}

// appendSlotV1 builds a record in the SlotFormatV1 layout by hand: format
// byte, fingerprint, tokens, last_refill, the 8 spill_until bytes given and
// the identity.
func appendSlotV1(dst []byte, fp uint64, b Bucket, spill uint64, identity string) []byte {
	dst = append(dst, SlotFormatV1)
	dst = binary.LittleEndian.AppendUint64(dst, fp)
	dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(b.Tokens))
	dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(b.LastRefill))
	dst = binary.LittleEndian.AppendUint64(dst, spill)
	return append(dst, identity...)
}

// Records of the version before groups decode to the same slot whatever
// their spill mark holds (a mark, none, or bytes no encoder wrote), and
// re-encode in SlotFormat.
func TestDecodeSlotV1(t *testing.T) {
	b := Bucket{Tokens: -2.5, LastRefill: 1736940000.25}
	want := Slot{Fingerprint: 0x3f0c2a9be4d10f57, Bucket: b, Identity: []byte("10.0.0.1|a:b")}
	for _, spill := range []uint64{
		0, math.Float64bits(1736940012.000001), math.Float64bits(math.NaN()), math.Float64bits(math.Inf(1)),
		math.Float64bits(-1), 0xffffffffffffffff, 0x0102030405060708,
	} {
		v := appendSlotV1(nil, want.Fingerprint, b, spill, string(want.Identity))
		s, err := DecodeSlot(v)
		if err != nil || s.Fingerprint != want.Fingerprint || s.Bucket != want.Bucket ||
			string(s.Identity) != string(want.Identity) || &s.Identity[0] != &v[slotHeaderV1] {
			t.Errorf("V1 record with spill bits %x: %+v, %v; want %+v", spill, s, err, want)
		}
		enc := EncodeSlot(nil, s.Fingerprint, s.Bucket, string(s.Identity))
		if enc[0] != SlotFormat || string(enc[1:slotHeader]) != string(v[1:25]) || string(enc[slotHeader:]) != string(v[slotHeaderV1:]) {
			t.Errorf("V1 record %x re-encoded as %x", v, enc)
		}
	}
	// The V1 layout is as strict as the new one about everything but the
	// mark.
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"short", appendSlotV1(nil, 1, b, 0, "")[:slotHeaderV1-1], ErrSlotFormat},
		{"new layout tagged V1", retag(EncodeSlot(nil, 1, b, "1234567"), SlotFormatV1), ErrSlotFormat},
		{"no identity", appendSlotV1(nil, 1, b, 0, ""), ErrIdentity},
		{"long identity", appendSlotV1(nil, 1, b, 0, strings.Repeat("x", MaxIdentity+1)), ErrIdentity},
		{"NaN tokens", appendSlotV1(nil, 1, Bucket{math.NaN(), 1}, 0, "id"), ErrTokens},
		{"negative time", appendSlotV1(nil, 1, Bucket{1, -1}, 0, "id"), ErrLastRefill},
	} {
		if s, err := DecodeSlot(tc.in); !errors.Is(err, tc.want) || s.Identity != nil || s.Fingerprint != 0 {
			t.Errorf("%s: %+v, %v; want %v", tc.name, s, err, tc.want)
		}
	}
}

func TestDecodeSlotRejects(t *testing.T) {
	good := "00000000000000ff:1.000000:2.000000:id"
	if _, err := DecodeSlot([]byte(good)); err != nil {
		t.Fatalf("good value rejected: %v", err)
	}
	for _, tc := range []struct {
		in   string
		want error
	}{
		{"", ErrSlotFormat},
		{"00000000000000ff", ErrSlotFormat},
		{"00000000000000ff:", ErrSlotFormat},
		{"00000000000000FF:1:2:id", ErrSlotFormat},   // upper-case hex
		{"0000000000000ff:1:2:id", ErrSlotFormat},    // 15 digits
		{"000000000000000ff:1:2:id", ErrSlotFormat},  // 17 digits
		{"00000000000000fg:1:2:id", ErrSlotFormat},   // not hex
		{" 0000000000000ff:1:2:id", ErrSlotFormat},   // space
		{"00000000000000ff:1:2", ErrSlotFormat},      // no identity part
		{"00000000000000ff:1", ErrSlotFormat},        // no last_refill
		{"00000000000000ff:1:2:", ErrIdentity},       // empty identity
		{"00000000000000ff::2:id", ErrTokens},        // empty tokens
		{"00000000000000ff:NaN:2:id", ErrTokens},     // NaN
		{"00000000000000ff:1e3:2:id", ErrTokens},     // exponent
		{"00000000000000ff:1:-1:id", ErrLastRefill},  // negative time
		{"00000000000000ff:1:Inf:id", ErrLastRefill}, // Inf
		{"00000000000000ff:1::id", ErrLastRefill},    // empty time
		{"00000000000000ff:1:2:" + strings.Repeat("x", MaxIdentity+1), ErrIdentity},
		{"1.000000:1700000000.000000", ErrSlotFormat}, // a plain bucket value
	} {
		s, err := DecodeSlot([]byte(tc.in))
		if !errors.Is(err, tc.want) {
			t.Errorf("DecodeSlot(%q) = %+v, %v; want %v", tc.in, s, err, tc.want)
		}
		if err != nil && (s.Fingerprint != 0 || s.Bucket != (Bucket{}) || s.Identity != nil) {
			t.Errorf("DecodeSlot(%q) returned %+v with an error", tc.in, s)
		}
	}
}

func TestAppendIdentity(t *testing.T) {
	short := strings.Repeat("a", MaxIdentity)
	if got := string(AppendIdentity(nil, short)); got != short {
		t.Errorf("identity of %d bytes changed", len(short))
	}
	long := strings.Repeat("b", MaxIdentity+1)
	got := string(AppendIdentity([]byte("x"), long))
	want := "x#" + string(AppendHex16(nil, FNV1a64(long))) + "#" + long[:identityPrefix]
	if got != want {
		t.Errorf("AppendIdentity(long) = %q, want %q", got, want)
	}
	if len(got)-1 != 82 {
		t.Errorf("long identity is %d bytes, want 82", len(got)-1)
	}
	// Different long identities with one prefix differ.
	if string(AppendIdentity(nil, long+"1")) == string(AppendIdentity(nil, long+"2")) {
		t.Error("two long identities with one prefix map to one identity")
	}
}

func TestFNVAndFingerprint(t *testing.T) {
	// FNV-1a 64 reference values.
	for s, want := range map[string]uint64{"": 0xcbf29ce484222325, "a": 0xaf63dc4c8601ec8c, "foobar": 0x85944171f73967e8} {
		if got := FNV1a64(s); got != want {
			t.Errorf("FNV1a64(%q) = %x, want %x", s, got, want)
		}
	}
	// The finalizer is a bijection: distinct FNV values stay distinct, and
	// similar inputs get unrelated fingerprints (every bit flips about half
	// the time across consecutive IPs).
	var flips [64]int
	const n = 10000
	prev := Fingerprint("10.0.0.0")
	for i := 1; i <= n; i++ {
		fp := Fingerprint("10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256))
		for bit := 0; bit < 64; bit++ {
			if (fp^prev)>>bit&1 == 1 {
				flips[bit]++
			}
		}
		prev = fp
	}
	for bit, f := range flips {
		if f < n*4/10 || f > n*6/10 {
			t.Errorf("bit %d flipped %d of %d times between consecutive IPs", bit, f, n)
		}
	}
}

// Group keys: "tb:{rule}:#{group}", parsed back by ParseKey.
func TestSlotKeys(t *testing.T) {
	if k := SlotKey("global-rps", 4711); k != "tb:global-rps:#4711" {
		t.Errorf("SlotKey = %q", k)
	}
	for _, tc := range []struct {
		key       string
		rule      string
		group     int
		composite string
		ok        bool
	}{
		{"tb:r:#0", "r", 0, "", true},
		{"tb:global-rps:#4194303", "global-rps", 4194303, "", true},
		{"tb:r:k1", "r", -1, "k1", true},
		{"tb:r:a:b", "r", -1, "a:b", true},
		{"tb:r:#" + "0123456789abcdef" + "#prefix", "r", -1, "#0123456789abcdef#prefix", true}, // a hashed exact key
		{"tb:r:#01", "r", -1, "#01", true},
		{"tb:r:#", "r", -1, "#", true},
		{"tb:r:", "", -1, "", false},
		{"tb::k", "", -1, "", false},
		{"tb:r", "", -1, "", false},
		{"sluice:cas-epoch", "", -1, "", false},
		{"", "", -1, "", false},
	} {
		rule, group, comp, ok := ParseKey(tc.key)
		if rule != tc.rule || group != tc.group || comp != tc.composite || ok != tc.ok {
			t.Errorf("ParseKey(%q) = %q, %d, %q, %v", tc.key, rule, group, comp, ok)
		}
	}
	if r, s, _, ok := ParseKey(SlotKey("a.b_c", 99)); !ok || r != "a.b_c" || s != 99 {
		t.Errorf("ParseKey(SlotKey) = %q %d %v", r, s, ok)
	}
}

func TestSlotCodecAllocs(t *testing.T) {
	v := EncodeSlot(nil, 0xdeadbeef, Bucket{87.4321, 1736940000.123456}, "10.0.0.1")
	if n := testing.AllocsPerRun(100, func() { _, _ = DecodeSlot(v) }); n != 0 {
		t.Errorf("DecodeSlot allocates %v times per call", n)
	}
	v1 := appendSlotV1(nil, 0xdeadbeef, Bucket{87.4321, 1736940000.123456}, 0, "10.0.0.1")
	if n := testing.AllocsPerRun(100, func() { _, _ = DecodeSlot(v1) }); n != 0 {
		t.Errorf("DecodeSlot of a V1 record allocates %v times per call", n)
	}
	buf := make([]byte, 0, 128)
	if n := testing.AllocsPerRun(100, func() {
		buf = EncodeSlot(buf[:0], 0xdeadbeef, Bucket{87.4321, 1736940000.123456}, "10.0.0.1")
	}); n != 0 {
		t.Errorf("EncodeSlot allocates %v times per call", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = Fingerprint("2001:db8::1") }); n != 0 {
		t.Errorf("Fingerprint allocates %v times per call", n)
	}
}

func BenchmarkEncodeSlot(b *testing.B) {
	buf := make([]byte, 0, 128)
	bk := Bucket{Tokens: 87.4321, LastRefill: 1736940000.123456}
	b.ReportAllocs()
	for b.Loop() {
		buf = EncodeSlot(buf[:0], 0xdeadbeef, bk, "10.0.0.1")
	}
}

func BenchmarkDecodeSlot(b *testing.B) {
	v := EncodeSlot(nil, 0xdeadbeef, Bucket{87.4321, 1736940000.123456}, "10.0.0.1")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeSlot(v); err != nil {
			b.Fatal(err)
		}
	}
}

// retag sets the format byte of v.
func retag(v []byte, format byte) []byte {
	v[0] = format
	return v
}

// Binary values are as strict as text ones.
func TestDecodeBinarySlotRejects(t *testing.T) {
	good := EncodeSlot(nil, 0xff, Bucket{1, 2}, "id")
	set := func(off int, f float64) []byte {
		w := append([]byte(nil), good...)
		binary.LittleEndian.PutUint64(w[off:], math.Float64bits(f))
		return w
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"tag only", []byte{SlotFormat}, ErrSlotFormat},
		{"short", good[:slotHeader-1], ErrSlotFormat},
		{"no identity", good[:slotHeader], ErrIdentity},
		{"long identity", append(append([]byte(nil), good[:slotHeader]...), strings.Repeat("x", MaxIdentity+1)...), ErrIdentity},
		{"NaN tokens", set(9, math.NaN()), ErrTokens},
		{"Inf tokens", set(9, math.Inf(-1)), ErrTokens},
		{"negative time", set(17, -1), ErrLastRefill},
		{"NaN time", set(17, math.NaN()), ErrLastRefill},
	} {
		s, err := DecodeSlot(tc.in)
		if !errors.Is(err, tc.want) || s.Identity != nil || s.Fingerprint != 0 {
			t.Errorf("%s: %+v, %v; want %v", tc.name, s, err, tc.want)
		}
	}
}

// PatchSlotBucket gives, byte for byte, what EncodeSlot gives for the new
// bucket, and leaves records of other formats alone.
func TestPatchSlotBucket(t *testing.T) {
	fp := Fingerprint("10.0.0.1")
	for _, b := range []Bucket{{Tokens: 3.25, LastRefill: 1.7e9}, {Tokens: -2.0000004, LastRefill: 1.7e9 + 0.1234567}, {Tokens: 1e12, LastRefill: 0}} {
		rec := EncodeSlot(nil, fp, Bucket{Tokens: 9, LastRefill: 1}, "10.0.0.1")
		if !PatchSlotBucket(rec, b) {
			t.Fatalf("PatchSlotBucket(%+v) refused a current record", b)
		}
		if want := EncodeSlot(nil, fp, b, "10.0.0.1"); string(rec) != string(want) {
			t.Errorf("patched %x, want %x", rec, want)
		}
	}
	text := []byte("0123456789abcdef:1.000000:2.000000:id")
	v1 := append([]byte{SlotFormatV1}, make([]byte, 32)...)
	for _, rec := range [][]byte{nil, text, append(v1, "id"...), EncodeSlot(nil, fp, Bucket{}, "x")[:slotHeader-1]} {
		before := string(rec)
		if PatchSlotBucket(rec, Bucket{Tokens: 1}) || string(rec) != before {
			t.Errorf("PatchSlotBucket patched %q", before)
		}
	}
}

// Stored is what a record and a window value read back: the simulator
// passes it on as the state of the next request.
func TestStoredIsWhatSharedDataReadsBack(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	for range 1000 {
		b := Bucket{Tokens: rng.Float64()*20 - 5, LastRefill: 1.7e9 + rng.Float64()*1e6}
		s, err := DecodeSlot(EncodeSlot(nil, 7, b, "ip:address=10.0.0.1"))
		if err != nil || s.Bucket != b.Stored() {
			t.Fatalf("bucket %+v: read back %+v (%v), Stored %+v", b, s.Bucket, err, b.Stored())
		}
		w := Window{Start: 1.7e9 + rng.Float64()*1e6, N: 3}
		w.Counts[0], w.Counts[1] = rng.Float64()*10, float64(rng.Intn(5))
		var back Window
		if err := DecodeWindow(EncodeWindow(nil, &w), &back); err != nil || back != w.Stored() {
			t.Fatalf("window %+v: read back %+v (%v), Stored %+v", w, back, err, w.Stored())
		}
		if st := w.Stored(); math.Abs(st.Counts[0]-w.Counts[0]) > 5e-7 || st.Start != roundMicro(w.Start) {
			t.Fatalf("window %+v: Stored %+v is not w rounded to micro-units", w, st)
		}
	}
}
