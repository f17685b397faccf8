package filter

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/sluice-rl/sluice/shared/policy"
)

// A header map as Envoy sends it: pseudo-headers first, names lower-case,
// a repeated header as separate pairs, an empty value.
var envoyLikeMap = [][2]string{
	{":authority", "api.example"}, {":path", "/v1/items?page=2"}, {":method", "GET"}, {":scheme", "https"},
	{"user-agent", "curl/8.5.0"}, {"accept", "*/*"}, {"x-api-key", "k1"}, {"x-tag", "first"},
	{"x-empty", ""}, {"x-tag", "second"},
}

// decodeValid lists the pairs of a map indexPairs accepted (trusting it).
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

// lookup indexes b for names and returns the values found and whether b
// was accepted.
func lookup(b []byte, names ...string) ([]pairSlot, bool) {
	var mask uint64
	for _, n := range names {
		mask |= lengthBit(uint64(len(n)))
	}
	found := make([]pairSlot, len(names))
	ok := indexPairs(b, names, mask, found)
	return found, ok
}

func TestIndexPairsReadsWhatAppendHeaderMapWrites(t *testing.T) {
	for _, m := range [][][2]string{envoyLikeMap, {{"a", "b"}}, {{"", ""}}, {}} {
		b := appendHeaderMap(nil, m)
		names := make([]string, len(m))
		for i, kv := range m {
			names[i] = kv[0]
		}
		found, ok := lookup(b, names...)
		if !ok {
			t.Fatalf("%q: valid map refused", m)
		}
		for i, kv := range m {
			if !found[i].ok || kv[0] != "x-tag" && found[i].v != kv[1] {
				t.Errorf("%q: %q = %+v, want %q", m, kv[0], found[i], kv[1])
			}
		}
	}
	if found, ok := lookup(nil, "x-a"); !ok || found[0].ok {
		t.Fatalf("the host's empty map (no bytes): %+v, %v; want accepted, x-a absent", found, ok)
	}
}

func TestIndexPairsFindsTheFirstOfARepeatedHeader(t *testing.T) {
	names := []string{"x-tag", ":path", "x-empty", "x-absent", "X-Tag", "x-ta",
		"a-name-longer-than-sixty-three-bytes-shares-the-last-length-bit-x"}
	want := []pairSlot{{"first", true}, {"/v1/items?page=2", true}, {"", true}, {}, {}, {}, {"long", true}}
	m := append(slices.Clone(envoyLikeMap), [2]string{names[6], "long"},
		[2]string{"a-name-longer-than-sixty-three-bytes-shares-the-last-length-bit-y", "other"})
	expectLookup(t, m, names, want)
}

// expectLookup checks that indexing m's encoding for names finds want.
func expectLookup(t *testing.T, m [][2]string, names []string, want []pairSlot) {
	t.Helper()
	found, ok := lookup(appendHeaderMap(nil, m), names...)
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
// middle, last byte), also in the map's last pair.
func TestIndexPairsTellsApartNamesOfOneLength(t *testing.T) {
	m := [][2]string{{"x-request-id", "1"}, {"x-request-ix", "2"}, {"y-request-id", "3"},
		{"x-plan", "4"}, {"x-deny", "5"}, {"accept", "6"}, {"x-api-key", "7"}, {"a", ""}}
	names := []string{"x-request-ix", "y-request-id", "x-request-id", "x-deny", "x-plan", "x-plam", "x-api-kez", "b", "a"}
	expectLookup(t, m, names, []pairSlot{{"2", true}, {"3", true}, {"1", true}, {"5", true}, {"4", true}, {}, {}, {}, {"", true}})
}

// A map whose every pair has a wanted name length is still read right, to
// its first match, and checked to its last pair.
func TestIndexPairsWithManyNamesOfAWantedLength(t *testing.T) {
	var m [][2]string
	for i := range 48 {
		m = append(m, [2]string{fmt.Sprintf("x-h%03d", i), strconv.Itoa(i)})
	}
	m = append(m, [2]string{"x-plan", "pro"}, [2]string{"x-h005", "again"})
	expectLookup(t, m, []string{"x-plan", "x-h005", "x-h047", "x-h999"}, []pairSlot{{"pro", true}, {"5", true}, {"47", true}, {}})
	bad := appendHeaderMap(nil, m)
	bad[len(bad)-1] = 'x'
	if _, ok := lookup(bad, "x-plan"); ok {
		t.Error("a map whose last value lacks its NUL was accepted")
	}
}

func TestIndexPairsRefusesMalformedMaps(t *testing.T) {
	valid := appendHeaderMap(nil, [][2]string{{"x-a", "1"}, {"x-b", "22"}})
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
}

func FuzzIndexPairs(f *testing.F) {
	f.Add(appendHeaderMap(nil, envoyLikeMap), "x-tag")
	f.Add(appendHeaderMap(nil, [][2]string{{"", ""}}), "")
	f.Add([]byte{}, "a")
	f.Add([]byte{1, 0, 0, 0, 255, 255, 255, 255, 0, 0, 0, 0}, "a")
	f.Add([]byte{2, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 'a', 0, 'b', 0}, "a")
	f.Fuzz(func(t *testing.T, b []byte, name string) {
		// sibling has name's length and differs in its last byte.
		sibling := []byte(name)
		if len(sibling) > 0 {
			sibling[len(sibling)-1] ^= 1
		}
		found, ok := lookup(b, name, "x-tag", string(sibling)) // never panics, valid or not
		if !ok {
			return
		}
		// What was accepted has lengths that add up (it encodes back to as
		// many bytes; the NULs of pairs never compared are not checked),
		// and the value found is that of the first pair of that name.
		m := decodeValid(b)
		if len(b) > 0 {
			if re := appendHeaderMap(nil, m); len(re) != len(b) {
				t.Fatalf("accepted %x, re-encodes as %x", b, re)
			}
		}
		for k, n := range []string{name, string(sibling)} {
			i := slices.IndexFunc(m, func(kv [2]string) bool { return kv[0] == n })
			if f := found[2*k]; f.ok != (i >= 0) || f.ok && f.v != m[i][1] {
				t.Fatalf("%q = %+v; the map is %q", n, f, m)
			}
		}
	})
}

// The header count that decides a one-call read counts every request
// header a source reads, once per name.
func TestConfigurationCountsTheHeadersItCanRead(t *testing.T) {
	src := func(kind policy.SourceKind, name string) policy.KeySource {
		return policy.KeySource{Kind: kind, Name: name}
	}
	for _, c := range []struct {
		name  string
		hops  int
		srcs  []policy.KeySource
		reads []string
	}{
		{"one header, asked twice in two cases", 0,
			[]policy.KeySource{src(policy.SourceHeader, "X-Api-Key"), src(policy.SourceHeader, "x-api-key")}, []string{"x-api-key"}},
		{"peer address reads no header", 0, []policy.KeySource{src(policy.SourceIP, "address")}, nil},
		{"trusted hops read x-forwarded-for", 1,
			[]policy.KeySource{src(policy.SourceIP, "address"), src(policy.SourceHeader, "x-forwarded-for")}, []string{"x-forwarded-for"}},
		{"path and query share :path", 0,
			[]policy.KeySource{src(policy.SourcePath, ""), src(policy.SourceQuery, "page")}, []string{":path"}},
		{"method, host, claims", 0,
			[]policy.KeySource{src(policy.SourceMethod, ""), src(policy.SourceHost, ""), src(policy.SourceJWT, "sub"), src(policy.SourceJWT, "plan")},
			[]string{":method", ":authority", "authorization"}},
	} {
		cc := &compiledConfig{trustedHops: c.hops}
		for _, s := range c.srcs {
			cc.ref(s)
		}
		if !slices.Equal(cc.readNames, c.reads) {
			t.Errorf("%s: reads %q, want %q", c.name, cc.readNames, c.reads)
		}
	}
}

// Every read goes to the slot of its name in readNames.
func TestConfigurationMapsEachReadToItsSlot(t *testing.T) {
	cc := &compiledConfig{}
	key := cc.ref(policy.KeySource{Kind: policy.SourceHeader, Name: "X-Api-Key"})
	cc.ref(policy.KeySource{Kind: policy.SourceMethod})
	plan := cc.ref(policy.KeySource{Kind: policy.SourceHeader, Name: "x-plan"})
	if !slices.Equal(cc.readNames, []string{"x-api-key", ":method", "x-plan"}) {
		t.Fatalf("readNames %q", cc.readNames)
	}
	if got := cc.headerRead[key.idx]; got != 1 {
		t.Errorf("x-api-key reads slot %d, want 1", got)
	}
	if got := cc.headerRead[plan.idx]; got != 3 {
		t.Errorf("x-plan reads slot %d, want 3", got)
	}
	if cc.fixedRead[fixedMethod] != 2 || cc.fixedRead[fixedPath] != 0 {
		t.Errorf("fixed slots %v, want :method in 2 and :path unread", cc.fixedRead)
	}
	if want := lengthBit(9) | lengthBit(7) | lengthBit(6); cc.readMask != want {
		t.Errorf("readMask %b, want %b", cc.readMask, want)
	}
}

// TestHeadersAreReadWholeOnlyWhileRequestsFindSeveral: the whole map is
// read only after requests that found two or more of their headers
// present, stops being read soon after they find one, and never for a
// configuration reading one header or a request with too many headers.
func TestHeadersAreReadWholeOnlyWhileRequestsFindSeveral(t *testing.T) {
	several := &compiledConfig{readsSeveral: true}
	var rs requestSources
	// requests runs n requests that each found present headers and
	// returns how many of them were read whole.
	requests := func(cfg *compiledConfig, n, present, numHeaders int) (whole int) {
		for range n {
			rs.reset(cfg, numHeaders)
			if rs.whole == wholeUnread {
				whole++
			}
			rs.presentReads = present
		}
		return whole
	}
	if w := requests(several, 1, 2, 10); w != 0 {
		t.Fatalf("the first request was read whole with no history")
	}
	if w := requests(several, 20, 1, 10); w != 0 {
		t.Fatalf("%d of 20 requests finding one header were read whole", w)
	}
	if w := requests(several, 20, 2, 10); w < 15 {
		t.Fatalf("only %d of 20 requests finding two headers were read whole", w)
	}
	if w := requests(several, 1, 2, maxPairsHeaders+1); w != 0 {
		t.Fatalf("a request of %d headers was read whole", maxPairsHeaders+1)
	}
	if w := requests(&compiledConfig{}, 5, 3, 10); w != 0 {
		t.Fatalf("%d requests read whole for a configuration reading one header", w)
	}
	requests(several, 20, 3, 10)
	if w := requests(several, 20, 1, 10); w > 5 {
		t.Fatalf("%d of 20 requests finding one header were still read whole after a mix change", w)
	}
	if w := requests(several, 20, 0, 10); w != 0 {
		t.Fatalf("%d of 20 requests finding no header were read whole", w)
	}
}
