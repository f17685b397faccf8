package request

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluice-rl/sluice/shared/state"
)

// Native unit tests of the pure parsing helpers. The same code paths run in
// the filter's wasm tests (plugin/filter/filter_test.go); these pin the edge cases cheaply.

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
		if got := StripPort(c.in); got != c.want {
			t.Errorf("StripPort(%q) = %q, want %q", c.in, got, c.want)
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
		got, ok := XFFClient(c.xff, c.hops)
		if got != c.want || ok != c.ok {
			t.Errorf("XFFClient(%q, %d) = %q, %v; want %q, %v", c.xff, c.hops, got, ok, c.want, c.ok)
		}
	}
}

func TestPathAndQuery(t *testing.T) {
	if got := PathOnly("/a/b?x=1#f"); got != "/a/b" {
		t.Errorf("PathOnly = %q", got)
	}
	if got := PathOnly("/a#f?x"); got != "/a" {
		t.Errorf("PathOnly = %q", got)
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
		got, ok := QueryParam(c.path, c.name)
		if got != c.want || ok != c.ok {
			t.Errorf("QueryParam(%q, %q) = %q, %v; want %q, %v", c.path, c.name, got, ok, c.want, c.ok)
		}
	}
}

func TestLowerASCII(t *testing.T) {
	if got := LowerASCII("API.Example.COM:443"); got != "api.example.com:443" {
		t.Errorf("LowerASCII = %q", got)
	}
	s := "already.lower"
	if got := LowerASCII(s); got != s {
		t.Errorf("LowerASCII = %q", got)
	}
}

func jwt(payload string) string {
	return "Bearer eyJhbGciOiJub25lIn0." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + ".sig"
}

func TestJWTClaims(t *testing.T) {
	var c Claims
	payload := `{"sub":"u1","plan":"enterprise","n":42,"f":-1.5e3,"b":true,"z":null,"o":{"a":[1,{"b":"}"}]},` +
		`"e":"","esc":"a\"b\u00e9\ud83d\ude00\n","k\u0065y":"v","dup":"first","dup":"last", "sp" : "x" }`
	if !ParseJWT(jwt(payload), &c) {
		t.Fatal("valid token rejected")
	}
	for name, want := range map[string]string{
		"sub": "u1", "plan": "enterprise", "n": "42", "f": "-1.5e3", "b": "true", "o": `{"a":[1,{"b":"}"}]}`,
		"esc": "a\"b\u00e9\U0001F600\n", "key": "v", "dup": "last", "sp": "x",
	} {
		got, ok := c.Claim(name)
		if !ok || got != want {
			t.Errorf("claim %s = %q, %v; want %q", name, got, ok, want)
		}
	}
	for _, name := range []string{"z", "absent", "a"} {
		if got, ok := c.Claim(name); ok {
			t.Errorf("claim %s = %q, want missing", name, got)
		}
	}
	// Scheme is case-insensitive; padding tolerated.
	pad := "bearer x." + base64.URLEncoding.EncodeToString([]byte(`{"a":"b"}`)) + ".s"
	if !ParseJWT(pad, &c) {
		t.Fatal("padded token rejected")
	}
	if v, _ := c.Claim("a"); v != "b" {
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
		"Bearer x." + strings.Repeat("A", MaxJWT) + ".s",
		"Bearer x.\xff\xfe.s",
	} {
		if ParseJWT(bad, &c) {
			t.Errorf("ParseJWT(%.60q) accepted", bad)
		}
		if _, ok := c.Claim("a"); ok {
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
		if len(payload) > MaxJWT/2 {
			return // rejected by size, not syntax
		}
		var c Claims
		ok := ParseJWT("Bearer x."+base64.RawURLEncoding.EncodeToString(payload)+".s", &c)
		var m map[string]json.RawMessage
		jerr := json.Unmarshal(payload, &m)
		if jerr == nil && m == nil {
			jerr = errors.New("null")
		}
		if ok != (jerr == nil) {
			t.Fatalf("ParseJWT ok=%v, encoding/json err=%v for %q", ok, jerr, payload)
		}
		if !ok {
			return
		}
		for k, raw := range m {
			if strings.ContainsRune(k, utf8.RuneError) {
				continue // encoding/json replaced invalid UTF-8 in the key
			}
			got, present := c.Claim(k)
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
		out, _ := AppendComposite(nil, nil, comps)
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
	if len(k1) != 1+16+1+HashedPrefix || !strings.HasPrefix(k1, "#") {
		t.Errorf("hashed key %q has length %d", k1, len(k1))
	}
	if k1 == k2 {
		t.Error("different long keys hash to the same key")
	}
	if k1 != key(long1) {
		t.Error("hashing is not deterministic")
	}
	if got := key(strings.Repeat("z", MaxComposite)); len(got) != MaxComposite {
		t.Errorf("a key of exactly MaxComposite bytes must stay verbatim, got %d bytes", len(got))
	}
	// The state key layout is state.BucketKey's.
	out, _ := AppendComposite([]byte("tb:free:"), nil, []string{"k1"})
	if string(out) != state.BucketKey("free", "k1") {
		t.Errorf("key %q != state.BucketKey %q", out, state.BucketKey("free", "k1"))
	}
}
