package headermap

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"unsafe"
)

// A header map as Envoy sends it: pseudo-headers first, names lower-case,
// a repeated header as separate pairs, an empty value.
var envoyLikeMap = [][2]string{
	{":authority", "api.example"}, {":path", "/v1/items?page=2"}, {":method", "GET"}, {":scheme", "https"},
	{"user-agent", "curl/8.5.0"}, {"accept", "*/*"}, {"x-api-key", "k1"}, {"x-tag", "first"},
	{"x-empty", ""}, {"x-tag", "second"},
}

// Append writes the proxy-wasm map encoding (as in proxy-wasm-cpp-host's
// exports: count, the lengths, then NUL-terminated keys and values).
func TestAppendWritesTheProxyWasmEncoding(t *testing.T) {
	le := func(n uint32) string { return string(binary.LittleEndian.AppendUint32(nil, n)) }
	got := Append([]byte("junk")[:0], [][2]string{{"retry-after", "13"}, {"a", ""}})
	want := le(2) + le(11) + le(2) + le(1) + le(0) + "retry-after\x0013\x00" + "a\x00\x00"
	if string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := Append(nil, nil); string(got) != le(0) {
		t.Errorf("empty map: %q", got)
	}
}

// slot is what Index found for a name, read back through Value.
type slot struct {
	v  string
	ok bool
}

// lookup indexes b for names (distinct, as Index wants them) and returns
// the values found and whether b was accepted.
func lookup(b []byte, names ...string) ([]slot, bool) {
	if len(slices.Compact(slices.Sorted(slices.Values(names)))) != len(names) {
		panic(fmt.Sprintf("lookup %q: names repeat", names))
	}
	found := make([]uint64, len(names))
	n := Index(b, NewNames(names...), found)
	if n < 0 {
		return nil, false
	}
	out := make([]slot, len(names))
	for i, s := range found {
		v, ok := Value(b, s)
		out[i] = slot{string(v), ok}
		if ok {
			n--
		}
	}
	if n != 0 {
		panic(fmt.Sprintf("Index counted %d more names than it found", n))
	}
	return out, true
}

// decodeValid lists the pairs of a map Index accepted (trusting it).
func decodeValid(b []byte) [][2]string {
	if len(b) == 0 {
		return nil
	}
	n := int(binary.LittleEndian.Uint32(b))
	out := make([][2]string, n)
	data := 4 + 8*n
	for i := range out {
		ns, vs := int(binary.LittleEndian.Uint32(b[4+8*i:])), int(binary.LittleEndian.Uint32(b[8+8*i:]))
		out[i] = [2]string{string(b[data : data+ns]), string(b[data+ns+1 : data+ns+1+vs])}
		data += ns + vs + 2
	}
	return out
}

func TestIndexReadsWhatAppendWrites(t *testing.T) {
	for _, m := range [][][2]string{envoyLikeMap, {{"a", "b"}}, {{"", ""}}, {}} {
		b := Append(nil, m)
		var names []string
		for _, kv := range m {
			if !slices.Contains(names, kv[0]) {
				names = append(names, kv[0])
			}
		}
		found, ok := lookup(b, names...)
		if !ok {
			t.Fatalf("%q: valid map refused", m)
		}
		for i, name := range names {
			first := m[slices.IndexFunc(m, func(kv [2]string) bool { return kv[0] == name })][1]
			if !found[i].ok || found[i].v != first {
				t.Errorf("%q: %q = %+v, want %q", m, name, found[i], first)
			}
		}
	}
	if found, ok := lookup(nil, "x-a"); !ok || found[0].ok {
		t.Fatalf("the host's empty map (no bytes): %+v, %v; want accepted, x-a absent", found, ok)
	}
}

func TestIndexFindsTheFirstOfARepeatedHeader(t *testing.T) {
	long := "a-name-longer-than-sixty-three-bytes-shares-the-last-length-bit-x"
	names := []string{"x-tag", ":path", "x-empty", "x-absent", "X-Tag", "x-ta", long}
	want := []slot{{"first", true}, {"/v1/items?page=2", true}, {"", true}, {}, {}, {}, {"long", true}}
	m := append(slices.Clone(envoyLikeMap), [2]string{long, "long"},
		[2]string{"a-name-longer-than-sixty-three-bytes-shares-the-last-length-bit-y", "other"})
	expectLookup(t, m, names, want)
}

// expectLookup checks that indexing m's encoding for names finds want.
func expectLookup(t *testing.T, m [][2]string, names []string, want []slot) {
	t.Helper()
	found, ok := lookup(Append(nil, m), names...)
	if !ok {
		t.Fatal("valid map refused")
	}
	for i := range names {
		if found[i] != want[i] {
			t.Errorf("%q = %+v, want %+v", names[i], found[i], want[i])
		}
	}
}

// Names of one length are told apart wherever they differ (first byte,
// middle, last byte, within or after the first 8 bytes), also in the map's
// last pair; lengths equal mod 64 share a mask bit and are still told apart.
func TestIndexTellsApartNamesOfOneLength(t *testing.T) {
	m := [][2]string{{"x-request-id", "1"}, {"x-request-ix", "2"}, {"y-request-id", "3"},
		{"x-plan", "4"}, {"x-deny", "5"}, {"accept", "6"}, {"x-api-key", "7"}, {"x-api-kez", "8"},
		{"x-abcdefg", "9"}, {"x-abcdefh", "10"}, {"y" + string(make([]byte, 69)), "11"}, {"a", ""}}
	names := []string{"x-request-ix", "y-request-id", "x-request-id", "x-deny", "x-plan", "x-plam",
		"x-api-key", "x-abcdefh", "b", "a", "abcdef"}
	expectLookup(t, m, names, []slot{{"2", true}, {"3", true}, {"1", true}, {"5", true}, {"4", true}, {},
		{"7", true}, {"10", true}, {}, {"", true}, {}})
}

// A map whose every pair has a wanted name length is still read right, to
// its first match, and every pair of a wanted name is checked, a repeated
// one too.
func TestIndexWithManyNamesOfAWantedLength(t *testing.T) {
	var m [][2]string
	for i := range 48 {
		m = append(m, [2]string{fmt.Sprintf("x-h%03d", i), strconv.Itoa(i)})
	}
	m = append(m, [2]string{"x-plan", "pro"}, [2]string{"x-h005", "again"})
	expectLookup(t, m, []string{"x-plan", "x-h005", "x-h047", "x-h999"}, []slot{{"pro", true}, {"5", true}, {"47", true}, {}})
	bad := Append(nil, m)
	bad[len(bad)-1] = 'x'
	if _, ok := lookup(bad, "x-plan", "x-h005"); ok {
		t.Error("a map whose last value lacks its NUL was accepted")
	}
}

func TestIndexRefusesMalformedMaps(t *testing.T) {
	valid := Append(nil, [][2]string{{"x-a", "1"}, {"x-b", "22"}})
	mutate := func(f func(b []byte) []byte) []byte { return f(slices.Clone(valid)) }
	for name, b := range map[string][]byte{
		"shorter than the count": {1, 0},
		"count beyond the data":  mutate(func(b []byte) []byte { binary.LittleEndian.PutUint32(b, 3); return b }),
		"huge count":             mutate(func(b []byte) []byte { binary.LittleEndian.PutUint32(b, 0xffffffff); return b }),
		"name length too long":   mutate(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[4:], 40); return b }),
		"value length huge":      mutate(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[8:], 0xfffffff0); return b }),
		"name without its NUL":   mutate(func(b []byte) []byte { b[20+3] = 'x'; return b }),
		"value without its NUL":  mutate(func(b []byte) []byte { b[20+3+1+1] = 'x'; return b }),
		"truncated":              valid[:len(valid)-1],
		"trailing bytes":         append(slices.Clone(valid), 0),
		"zero pairs, more bytes": {0, 0, 0, 0, 0},
	} {
		if _, ok := lookup(b, "x-a", "x-b"); ok {
			t.Errorf("%s: accepted %x", name, b)
		}
	}
	if Index(valid, NewNames("x-a", "x-b"), make([]uint64, 1)) >= 0 {
		t.Error("accepted a found shorter than names")
	}
}

// Index clears the slots of names it does not find, and only those.
func TestIndexClearsTheSlotsOfItsNames(t *testing.T) {
	found := []uint64{7, 7, 7}
	names := []string{"x-a", "x-absent"}
	if n := Index(Append(nil, [][2]string{{"x-a", "1"}}), NewNames(names...), found); n != 1 {
		t.Fatalf("found %d names, want 1", n)
	}
	if v, ok := Value(Append(nil, [][2]string{{"x-a", "1"}}), found[0]); !ok || string(v) != "1" || found[1] != 0 || found[2] != 7 {
		t.Errorf("found = %v, want x-a's slot, 0, then 7 untouched", found)
	}
	if ValueLen(found[0]) != 1 || ValueLen(found[1]) != 0 {
		t.Errorf("value lengths %d and %d, want 1 and 0", ValueLen(found[0]), ValueLen(found[1]))
	}
}

// index_wasm.s reads Names and its entries at fixed offsets.
func TestNamesHaveTheLayoutTheAssemblyReads(t *testing.T) {
	var s Names
	var e nameEntry
	for _, c := range []struct {
		what      string
		got, want uintptr
	}{
		{"Names.entries", unsafe.Offsetof(s.entries), 0},
		{"Names.lengths", unsafe.Offsetof(s.lengths), 24},
		{"nameEntry.word", unsafe.Offsetof(e.word), 0},
		{"nameEntry.name", unsafe.Offsetof(e.name), 8},
		{"nameEntry size", unsafe.Sizeof(e), 32},
	} {
		if c.got != c.want {
			t.Errorf("%s at %d, index_wasm.s reads it at %d", c.what, c.got, c.want)
		}
	}
}

// No names: nothing is compared, and the map is still checked.
func TestIndexWithoutNames(t *testing.T) {
	b := Append(nil, envoyLikeMap)
	if n := Index(b, NewNames(), nil); n != 0 {
		t.Errorf("no names: %d, want 0", n)
	}
	if n := Index(b[:len(b)-1], NewNames(), nil); n != -1 {
		t.Errorf("no names, a truncated map: %d, want -1", n)
	}
}

// In the filter's module Index is WebAssembly; it must agree with indexGo
// on every map, valid or not: random maps of random names, whole or with
// one byte changed or cut.
func TestIndexAgreesWithIndexGo(t *testing.T) {
	if runtime.GOARCH != "wasm" {
		t.Skip("Index is indexGo outside WebAssembly; make test runs this under wazero")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	// Names of every length class the assembly compares differently (1,
	// 2-3, 4-7, 8, 9-15, 16, longer), pairs of them differing in one byte.
	pool := []string{"", "a", "b", "ab", "ac", "x-a", "x-b", "x-ab", "x-ac", "x-plan", "x-deny", "accept", "cookie",
		"x-abcdef", "x-abcdeg", "y-abcdef", "x-api-key", "x-api-kez", "authorization", "x-request-id", ":path",
		"x-abcdefgh", "x-abcdefgi", "x-abcdefghijklmn", "x-abcdefghijklmo", "x-abcdefghijklmnop", "x-bbcdefghijklmnop",
		string(make([]byte, 64))}
	for iter := range 20000 {
		var m [][2]string
		for range rng.IntN(20) {
			m = append(m, [2]string{pool[rng.IntN(len(pool))], strconv.Itoa(rng.IntN(1000))})
		}
		b := Append(nil, m)
		switch rng.IntN(3) {
		case 1:
			if len(b) > 0 {
				b[rng.IntN(len(b))] ^= byte(1 + rng.IntN(255))
			}
		case 2:
			b = b[:rng.IntN(len(b)+1)]
		}
		var names []string
		for _, n := range pool {
			if rng.IntN(3) == 0 {
				names = append(names, n)
			}
		}
		set := NewNames(names...)
		got, want := make([]uint64, len(names)), make([]uint64, len(names))
		gn, wn := Index(b, set, got), indexGo(b, set, want)
		if gn != wn || wn >= 0 && !slices.Equal(got, want) {
			t.Fatalf("iteration %d: %x for %q: Index %d %v, indexGo %d %v", iter, b, names, gn, got, wn, want)
		}
	}
}

func FuzzIndex(f *testing.F) {
	f.Add(Append(nil, envoyLikeMap), "x-tag")
	f.Add(Append(nil, [][2]string{{"", ""}}), "")
	f.Add([]byte{}, "a")
	f.Add([]byte{1, 0, 0, 0, 255, 255, 255, 255, 0, 0, 0, 0}, "a")
	f.Add([]byte{2, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 'a', 0, 'b', 0}, "a")
	f.Fuzz(func(t *testing.T, b []byte, name string) {
		// sibling has name's length and differs in its last byte.
		sibling := []byte(name)
		if len(sibling) > 0 {
			sibling[len(sibling)-1] ^= 1
		}
		var names []string // distinct, as Index wants them
		for _, n := range []string{name, "x-tag", string(sibling)} {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
		found, ok := lookup(b, names...) // never panics, valid or not
		if !ok {
			return
		}
		// What was accepted has lengths that add up (it encodes back to as
		// many bytes; the NULs of pairs of other names are not checked),
		// and the value found is that of the first pair of that name.
		m := decodeValid(b)
		if len(b) > 0 {
			if re := Append(nil, m); len(re) != len(b) {
				t.Fatalf("accepted %x, re-encodes as %x", b, re)
			}
		}
		for k, n := range names {
			i := slices.IndexFunc(m, func(kv [2]string) bool { return kv[0] == n })
			if f := found[k]; f.ok != (i >= 0) || f.ok && f.v != m[i][1] {
				t.Fatalf("%q = %+v; the map is %q", n, f, m)
			}
		}
	})
}
