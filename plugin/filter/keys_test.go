package filter

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluice-rl/sluice/shared/state"
)

// Native unit tests of the pure parsing helpers. The same code paths run in
// the wasm tests (filter_test.go); these pin the edge cases cheaply.

func TestStripPort(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"10.0.0.1:5555", "10.0.0.1"},
		{"10.0.0.1", "10.0.0.1"},
		{"[::1]:5555", "::1"},
		{"[2001:db8::1]:443", "2001:db8::1"},
		{"[2001:db8::1]", "2001:db8::1"},
		{"2001:db8::1", "2001:db8::1"}, // bare IPv6: unchanged
		{" 10.0.0.1:1 ", "10.0.0.1"},
		{"[broken", "[broken"},
		{"", ""},
		{"/var/run/sock", "/var/run/sock"},
	} {
		if got := stripPort(c.in); got != c.want {
			t.Errorf("stripPort(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestXFFClient(t *testing.T) {
	for _, c := range []struct {
		xff  string
		hops int
		want string
		ok   bool
	}{
		{"1.1.1.1", 1, "1.1.1.1", true},
		{"6.6.6.6, 1.1.1.1", 1, "1.1.1.1", true},
		{"6.6.6.6, 1.1.1.1, 2.2.2.2", 2, "1.1.1.1", true},
		{"6.6.6.6,1.1.1.1,2.2.2.2", 3, "6.6.6.6", true},
		{"1.1.1.1, 2.2.2.2", 3, "", false}, // too few entries
		{"1.1.1.1", 0, "", false},
		{"1.1.1.1:80, [::1]:8080", 1, "::1", true},
		{"1.1.1.1, , 2.2.2.2", 2, "", false}, // empty entry
		{"", 1, "", false},
		{",,,", 2, "", false},
	} {
		got, ok := xffClient(c.xff, c.hops)
		if got != c.want || ok != c.ok {
			t.Errorf("xffClient(%q, %d) = %q, %v; want %q, %v", c.xff, c.hops, got, ok, c.want, c.ok)
		}
	}
}

func TestPathAndQuery(t *testing.T) {
	if got := pathOnly("/a/b?x=1#f"); got != "/a/b" {
		t.Errorf("pathOnly = %q", got)
	}
	if got := pathOnly("/a#f?x"); got != "/a" {
		t.Errorf("pathOnly = %q", got)
	}
	for _, c := range []struct {
		path, name, want string
		ok               bool
	}{
		{"/x?a=1&b=2", "b", "2", true},
		{"/x?a=1&a=2", "a", "1", true}, // first occurrence
		{"/x?tenant=acme%20corp", "tenant", "acme corp", true},
		{"/x?tenant=a+b", "tenant", "a b", true},
		{"/x?t%65nant=z", "tenant", "z", true}, // encoded name
		{"/x?flag", "flag", "", true},
		{"/x?a=%zz%4", "a", "%zz%4", true}, // invalid escapes kept
		{"/x?a=1#b=2", "b", "", false},
		{"/x", "a", "", false},
		{"/x?", "a", "", false},
	} {
		got, ok := queryParam(c.path, c.name)
		if got != c.want || ok != c.ok {
			t.Errorf("queryParam(%q, %q) = %q, %v; want %q, %v", c.path, c.name, got, ok, c.want, c.ok)
		}
	}
}

func TestLowerASCII(t *testing.T) {
	if got := lowerASCII("API.Example.COM:443"); got != "api.example.com:443" {
		t.Errorf("lowerASCII = %q", got)
	}
	s := "already.lower"
	if got := lowerASCII(s); got != s {
		t.Errorf("lowerASCII = %q", got)
	}
}

func jwt(payload string) string {
	return "Bearer eyJhbGciOiJub25lIn0." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + ".sig"
}

func TestJWTClaims(t *testing.T) {
	var c jwtClaims
	payload := `{"sub":"u1","plan":"enterprise","n":42,"f":-1.5e3,"b":true,"z":null,"o":{"a":[1,{"b":"}"}]},` +
		`"e":"","esc":"a\"b\u00e9\ud83d\ude00\n","k\u0065y":"v","dup":"first","dup":"last", "sp" : "x" }`
	if !parseJWT(jwt(payload), &c) {
		t.Fatal("valid token rejected")
	}
	for name, want := range map[string]string{
		"sub": "u1", "plan": "enterprise", "n": "42", "f": "-1.5e3", "b": "true", "o": `{"a":[1,{"b":"}"}]}`,
		"esc": "a\"b\u00e9\U0001F600\n", "key": "v", "dup": "last", "sp": "x",
	} {
		got, ok := c.claim(name)
		if !ok || got != want {
			t.Errorf("claim %s = %q, %v; want %q", name, got, ok, want)
		}
	}
	for _, name := range []string{"z", "absent", "a"} {
		if got, ok := c.claim(name); ok {
			t.Errorf("claim %s = %q, want missing", name, got)
		}
	}
	// Scheme is case-insensitive; padding tolerated.
	pad := "bearer x." + base64.URLEncoding.EncodeToString([]byte(`{"a":"b"}`)) + ".s"
	if !parseJWT(pad, &c) {
		t.Fatal("padded token rejected")
	}
	if v, _ := c.claim("a"); v != "b" {
		t.Errorf("padded token claim = %q", v)
	}
	enc := func(p string) string { return "Bearer x." + base64.RawURLEncoding.EncodeToString([]byte(p)) + ".s" }
	for _, bad := range []string{
		"", "Basic dXNlcjpwYXNz", "Bearer", "Bearer a.b", "Bearer a.b.c.d",
		"Bearer a.!!!.c", enc("[1,2]"), enc("not json"), enc("null"), enc(""), enc("{"), enc(`{"a":1,}`),
		enc(`{"a":1}x`), enc(`{"a":01}`), enc(`{"a":"\x"}`), enc("{\"a\":\"\x01\"}"), enc(`{"a":tru}`),
		enc(`{"a":[1,2}`), enc(`{a:1}`), enc(`{"a":1 "b":2}`), enc(`{"a":-}`), enc(`{"a":1.}`), enc(`{"a":1e}`),
		enc(strings.Repeat("[", 100) + strings.Repeat("]", 100)),
		enc(`{"a":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`),
		"Bearer x." + strings.Repeat("A", maxJWT) + ".s",
		"Bearer x.\xff\xfe.s",
	} {
		if parseJWT(bad, &c) {
			t.Errorf("parseJWT(%.60q) accepted", bad)
		}
		if _, ok := c.claim("a"); ok {
			t.Errorf("claims left over after rejecting %.60q", bad)
		}
	}
}

// The scanner agrees with encoding/json on what is a valid object and on
// the value of every top-level claim.
func FuzzJWTPayload(f *testing.F) {
	f.Add([]byte(`{"sub":"u","plan":"gold","n":1}`))
	f.Add([]byte(`{"a":"\ud83d\ude00\ud800x","b":[{"c":null}],"a":"2"}`))
	f.Add([]byte(` { } `))
	f.Fuzz(func(t *testing.T, payload []byte) {
		if len(payload) > maxJWT/2 {
			return // rejected by size, not syntax
		}
		var c jwtClaims
		ok := parseJWT("Bearer x."+base64.RawURLEncoding.EncodeToString(payload)+".s", &c)
		var m map[string]json.RawMessage
		jerr := json.Unmarshal(payload, &m)
		if jerr == nil && m == nil {
			jerr = errors.New("null")
		}
		if ok != (jerr == nil) {
			t.Fatalf("parseJWT ok=%v, encoding/json err=%v for %q", ok, jerr, payload)
		}
		if !ok {
			return
		}
		for k, raw := range m {
			if strings.ContainsRune(k, utf8.RuneError) {
				continue // encoding/json replaced invalid UTF-8 in the key
			}
			got, present := c.claim(k)
			var s string
			switch {
			case raw[0] == '"':
				if err := json.Unmarshal(raw, &s); err != nil {
					t.Fatal(err)
				}
				if s == "" {
					continue
				}
				if !present || got != s {
					if strings.ContainsRune(s, utf8.RuneError) {
						continue // invalid UTF-8 is replaced by encoding/json, kept by us
					}
					t.Fatalf("claim %q = %q, %v; encoding/json %q", k, got, present, s)
				}
			case string(raw) == "null":
				if present {
					t.Fatalf("null claim %q present as %q", k, got)
				}
			default:
				if !present || got != string(raw) {
					t.Fatalf("claim %q = %q, %v; want %s", k, got, present, raw)
				}
			}
		}
	})
}

func TestAppendComposite(t *testing.T) {
	key := func(comps ...string) string {
		out, _ := appendComposite(nil, nil, comps)
		return string(out)
	}
	if got := key("abc"); got != "abc" {
		t.Errorf("single = %q", got)
	}
	if got := key("a", "b"); got != "a|b" {
		t.Errorf("pair = %q", got)
	}
	// The separator and escape characters cannot be confused.
	distinct := [][]string{{"a|b"}, {"a", "b"}, {`a\`, "b"}, {`a\|b`}, {"#x"}, {"", "a|b"}, {"a|b", ""}}
	seen := map[string]int{}
	for i, c := range distinct {
		k := key(c...)
		if j, dup := seen[k]; dup {
			t.Errorf("%q and %q give the same key %q", distinct[j], c, k)
		}
		seen[k] = i
		if strings.HasPrefix(k, "#") {
			t.Errorf("verbatim key %q starts with '#'", k)
		}
	}
	// Long keys are hashed, bounded, deterministic and still distinct.
	long1 := strings.Repeat("x", 10000)
	long2 := strings.Repeat("x", 9999) + "y"
	k1, k2 := key(long1), key(long2)
	if len(k1) != 1+16+1+hashedPrefix || !strings.HasPrefix(k1, "#") {
		t.Errorf("hashed key %q has length %d", k1, len(k1))
	}
	if k1 == k2 {
		t.Error("different long keys hash to the same key")
	}
	if k1 != key(long1) {
		t.Error("hashing is not deterministic")
	}
	if got := key(strings.Repeat("z", maxComposite)); len(got) != maxComposite {
		t.Errorf("a key of exactly maxComposite bytes must stay verbatim, got %d bytes", len(got))
	}
	// The state key layout is state.BucketKey's.
	out, _ := appendComposite([]byte("tb:free:"), nil, []string{"k1"})
	if string(out) != state.BucketKey("free", "k1") {
		t.Errorf("key %q != state.BucketKey %q", out, state.BucketKey("free", "k1"))
	}
}

func TestCeilAndWhole(t *testing.T) {
	for _, c := range []struct {
		in   float64
		want int64
	}{{0, 0}, {-1, 0}, {0.1, 1}, {1, 1}, {1.5, 2}, {1e300, 1<<31 - 1}} {
		if got := ceilSeconds(c.in); got != c.want {
			t.Errorf("ceilSeconds(%v) = %d, want %d", c.in, got, c.want)
		}
	}
	for _, c := range []struct {
		in   float64
		want int64
	}{{0, 0}, {-3, 0}, {2.9, 2}, {20, 20}} {
		if got := wholeTokens(c.in); got != c.want {
			t.Errorf("wholeTokens(%v) = %d, want %d", c.in, got, c.want)
		}
	}
}

func TestLogLimiter(t *testing.T) {
	var l logLimiter
	if ok, _ := l.allow(logFailOpen); !ok {
		t.Fatal("first line suppressed")
	}
	for i := 0; i < 5; i++ {
		if ok, _ := l.allow(logFailOpen); ok {
			t.Fatal("repeated line not suppressed")
		}
	}
	if ok, _ := l.allow(logShadow); !ok {
		t.Fatal("kinds must be independent")
	}
	if l.suppressed[logFailOpen] != 5 {
		t.Fatalf("suppressed = %d", l.suppressed[logFailOpen])
	}
}

// appendInt prints exactly what strconv does, on both of its paths.
func TestAppendIntMatchesStrconv(t *testing.T) {
	for _, v := range []int64{0, 1, 9, 10, 99, 100, 65535, 65536, 999999999, 1e9, math.MaxUint32 - 1, math.MaxUint32,
		math.MaxUint32 + 1, -1, -10, math.MinInt64, math.MaxInt64} {
		if got, want := string(appendInt([]byte("x"), v)), "x"+strconv.FormatInt(v, 10); got != want {
			t.Errorf("appendInt(%d) = %q, want %q", v, got, want)
		}
	}
	for i := 0; i < 100000; i++ {
		v := int64(i) * 42949 // spans [0, 2^32)
		if got, want := string(appendInt(nil, v)), strconv.FormatInt(v, 10); got != want {
			t.Fatalf("appendInt(%d) = %q, want %q", v, got, want)
		}
	}
}

// appendHeaderMap writes the proxy-wasm map encoding (as in
// proxy-wasm-cpp-host's exports: count, the lengths, then NUL-terminated
// keys and values). The wasm tests read every 429's headers back through the
// host's decoder as well.
func TestAppendHeaderMap(t *testing.T) {
	le := func(n uint32) string { return string([]byte{byte(n), byte(n >> 8), byte(n >> 16), byte(n >> 24)}) }
	got := appendHeaderMap([]byte("junk")[:0], [][2]string{{"retry-after", "13"}, {"a", ""}})
	want := le(2) + le(11) + le(2) + le(1) + le(0) + "retry-after\x0013\x00" + "a\x00\x00"
	if string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := appendHeaderMap(nil, nil); string(got) != le(0) {
		t.Errorf("empty map: %q", got)
	}
}

// TestRequestSourcesGenerations: a new request makes every cached value
// unread by counting (requestSources.reset), and when the count wraps the
// caches are cleared, so a value stamped four billion requests ago cannot
// pass for this request's.
func TestRequestSourcesGenerations(t *testing.T) {
	cfg := &compiledConfig{headerNames: []string{"x-api-key"}}
	var rs requestSources
	rs.reset(cfg)
	rs.headers[0] = cachedValue{v: "k", state: present, gen: rs.gen}
	rs.ip = cachedValue{v: "10.0.0.1", state: present, gen: rs.gen}
	first := rs.gen
	rs.reset(cfg)
	if rs.gen == first || rs.headers[0].gen == rs.gen || rs.ip.gen == rs.gen {
		t.Fatalf("after reset: gen %d, header gen %d, ip gen %d", rs.gen, rs.headers[0].gen, rs.ip.gen)
	}
	rs.headers[0] = cachedValue{v: "old", state: present, gen: 1}
	rs.gen = math.MaxUint32
	rs.reset(cfg)
	if rs.gen != 1 || rs.headers[0] != (cachedValue{}) {
		t.Fatalf("after the count wrapped: gen %d, header %+v", rs.gen, rs.headers[0])
	}
	other := &compiledConfig{headerNames: []string{"a", "b"}}
	rs.reset(other)
	if len(rs.headers) != 2 || rs.cfg != other {
		t.Fatalf("a new configuration: %d header caches", len(rs.headers))
	}
}

// TestRequestSourcesDropHugeBuffers: the header-value buffer is reused from
// request to request, but not once a request's values made it huge.
func TestRequestSourcesDropHugeBuffers(t *testing.T) {
	cfg := &compiledConfig{}
	var rs requestSources
	rs.reset(cfg)
	rs.vals = append(rs.vals, make([]byte, 1000)...)
	rs.reset(cfg)
	if cap(rs.vals) < 1000 || len(rs.vals) != 0 {
		t.Fatalf("a small buffer was not kept for reuse: len %d cap %d", len(rs.vals), cap(rs.vals))
	}
	rs.vals = append(rs.vals, make([]byte, maxKeptValues+1)...)
	rs.reset(cfg)
	if cap(rs.vals) != 0 {
		t.Fatalf("a %d-byte buffer was kept", cap(rs.vals))
	}
}
