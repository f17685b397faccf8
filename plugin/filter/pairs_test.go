package filter

import (
	"encoding/binary"
	"slices"
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

// decodeValid lists the pairs of a map validPairs accepted (trusting it).
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

func TestValidPairsAcceptsWhatAppendHeaderMapWrites(t *testing.T) {
	for _, m := range [][][2]string{envoyLikeMap, {{"a", "b"}}, {{"", ""}}, {}} {
		b := appendHeaderMap(nil, m)
		if !validPairs(b) {
			t.Fatalf("%q: valid map refused", m)
		}
		for _, kv := range m {
			v, ok := pairValue(b, kv[0])
			if !ok || kv[0] != "x-tag" && v != kv[1] {
				t.Errorf("%q: pairValue(%q) = %q, %v; want %q", m, kv[0], v, ok, kv[1])
			}
		}
	}
	if !validPairs(nil) {
		t.Fatal("the host's empty map (no bytes) refused")
	}
	if v, ok := pairValue(nil, "x-a"); ok {
		t.Fatalf("a header found in the empty map: %q", v)
	}
}

func TestPairValueIsTheFirstOfARepeatedHeader(t *testing.T) {
	b := appendHeaderMap(nil, envoyLikeMap)
	for _, c := range []struct {
		name, want string
		ok         bool
	}{
		{"x-tag", "first", true},
		{":path", "/v1/items?page=2", true},
		{"x-empty", "", true},
		{"x-absent", "", false},
		{"X-Tag", "", false}, // names arrive lower-case, like the filter's
		{"x-ta", "", false},
	} {
		if v, ok := pairValue(b, c.name); v != c.want || ok != c.ok {
			t.Errorf("pairValue(%q) = %q, %v; want %q, %v", c.name, v, ok, c.want, c.ok)
		}
	}
}

func TestValidPairsRefusesMalformedMaps(t *testing.T) {
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
		if validPairs(b) {
			t.Errorf("%s: accepted %x", name, b)
		}
		pairValue(b, "x-b") // never panics, whatever it answers
	}
}

func FuzzValidPairs(f *testing.F) {
	f.Add(appendHeaderMap(nil, envoyLikeMap), "x-tag")
	f.Add(appendHeaderMap(nil, [][2]string{{"", ""}}), "")
	f.Add([]byte{}, "a")
	f.Add([]byte{1, 0, 0, 0, 255, 255, 255, 255, 0, 0, 0, 0}, "a")
	f.Add([]byte{2, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 'a', 0, 'b', 0}, "a")
	f.Fuzz(func(t *testing.T, b []byte, name string) {
		v, ok := pairValue(b, name) // never panics, valid or not
		if !validPairs(b) {
			return
		}
		// What was accepted encodes back to exactly the same bytes, and
		// a lookup finds the first pair of that name.
		m := decodeValid(b)
		if len(b) > 0 {
			if re := appendHeaderMap(nil, m); !slices.Equal(re, b) {
				t.Fatalf("accepted %x, re-encodes as %x", b, re)
			}
		}
		i := slices.IndexFunc(m, func(kv [2]string) bool { return kv[0] == name })
		if ok != (i >= 0) || ok && v != m[i][1] {
			t.Fatalf("pairValue(%q) = %q, %v; the map is %q", name, v, ok, m)
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
