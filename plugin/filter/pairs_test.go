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

func TestAppendPairsDecodesWhatAppendHeaderMapWrites(t *testing.T) {
	for _, m := range [][][2]string{envoyLikeMap, {{"a", "b"}}, {{"", ""}}, {}} {
		b := appendHeaderMap(nil, m)
		got, ok := appendPairs(nil, b)
		if !ok {
			t.Fatalf("%q: valid map refused", m)
		}
		if len(got) != len(m) {
			t.Fatalf("%q: %d pairs, want %d", m, len(got), len(m))
		}
		for i, p := range got {
			if p.name != m[i][0] || p.value != m[i][1] {
				t.Errorf("pair %d = %q: %q, want %q: %q", i, p.name, p.value, m[i][0], m[i][1])
			}
		}
	}
	if got, ok := appendPairs(nil, nil); !ok || len(got) != 0 {
		t.Fatalf("the host's empty map (no bytes) = %v, %v; want no pairs", got, ok)
	}
}

func TestPairValueIsTheFirstOfARepeatedHeader(t *testing.T) {
	pairs, ok := appendPairs(nil, appendHeaderMap(nil, envoyLikeMap))
	if !ok {
		t.Fatal("valid map refused")
	}
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
		if v, ok := pairValue(pairs, c.name); v != c.want || ok != c.ok {
			t.Errorf("pairValue(%q) = %q, %v; want %q, %v", c.name, v, ok, c.want, c.ok)
		}
	}
}

func TestAppendPairsRefusesMalformedMaps(t *testing.T) {
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
		got, ok := appendPairs([]headerPair{{"keep", "me"}}, b)
		if ok {
			t.Errorf("%s: accepted %v", name, got)
		}
		if len(got) != 1 || got[0].name != "keep" {
			t.Errorf("%s: dst changed to %v", name, got)
		}
	}
}

func FuzzAppendPairs(f *testing.F) {
	f.Add(appendHeaderMap(nil, envoyLikeMap))
	f.Add(appendHeaderMap(nil, [][2]string{{"", ""}}))
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0, 0, 255, 255, 255, 255, 0, 0, 0, 0})
	f.Add([]byte{2, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 'a', 0, 'b', 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		pairs, ok := appendPairs(nil, b)
		if !ok {
			if len(pairs) != 0 {
				t.Fatalf("refused map left %d pairs", len(pairs))
			}
			return
		}
		// Whatever was accepted encodes back to exactly the same bytes.
		m := make([][2]string, len(pairs))
		for i, p := range pairs {
			m[i] = [2]string{p.name, p.value}
		}
		if len(b) == 0 {
			if len(m) != 0 {
				t.Fatal("pairs from no bytes")
			}
			return
		}
		if re := appendHeaderMap(nil, m); !slices.Equal(re, b) {
			t.Fatalf("accepted %x, re-encodes as %x", b, re)
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
