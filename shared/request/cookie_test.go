package request

import (
	"net/http"
	"strings"
	"testing"
)

func TestCookieValue(t *testing.T) {
	for _, tc := range []struct {
		header, name, want string
		ok                 bool
	}{
		{"session=abc", "session", "abc", true},
		{"a=1; session=abc; b=2", "session", "abc", true},
		{"a=1;session=abc", "session", "abc", true},
		{"a=1;\tsession=abc \t", "session", "abc", true},
		{`session="abc def"`, "session", "abc def", true},
		{`session="`, "session", `"`, true},
		{"session=first; session=second", "session", "first", true},
		{"Session=abc", "session", "", false},
		{"xsession=abc; sessionx=def", "session", "", false},
		{"session", "session", "", false},
		{"session=", "session", "", true},
		{"a=b=c", "a", "b=c", true},
		{"session = abc", "session", " abc", true},
		{"", "session", "", false},
		{";;; ;", "session", "", false},
	} {
		got, ok := CookieValue(tc.header, tc.name)
		if got != tc.want || ok != tc.ok {
			t.Errorf("CookieValue(%q, %q) = %q, %v; want %q, %v", tc.header, tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzCookieValue checks the parser never panics, returns a part of the
// header, and agrees with net/http on every cookie net/http accepts.
func FuzzCookieValue(f *testing.F) {
	for _, s := range []string{"a=1; session=abc", `s="q"`, "=; ;=x", "session=a;session=b", "\tx=\"", "s=\xff"} {
		f.Add(s, "session")
	}
	f.Fuzz(func(t *testing.T, header, name string) {
		v, ok := CookieValue(header, name)
		if ok && !strings.Contains(header, v) {
			t.Fatalf("CookieValue(%q, %q) = %q, not part of the header", header, name, v)
		}
		req := http.Request{Header: http.Header{"Cookie": {header}}}
		cs := req.Cookies()
		if len(cs) != pairs(header) {
			return // net/http dropped a pair it finds invalid: the first pair of a name may differ
		}
		for _, c := range cs {
			if c.Name == name {
				if c.Value != "" && v != c.Value {
					t.Fatalf("CookieValue(%q, %q) = %q, %v; net/http reads %q", header, name, v, ok, c.Value)
				}
				return
			}
		}
		if v != "" {
			t.Fatalf("CookieValue(%q, %q) = %q; net/http finds no such cookie", header, name, v)
		}
	})
}

// pairs counts the header's pairs that are not blank.
func pairs(header string) int {
	n := 0
	for _, p := range strings.Split(header, ";") {
		if strings.TrimSpace(p) != "" {
			n++
		}
	}
	return n
}

func BenchmarkCookieValue(b *testing.B) {
	const header = "_ga=GA1.2.1234567.1700000000; theme=dark; lang=en; sid=s-4f1c2a"
	for b.Loop() {
		if _, ok := CookieValue(header, "sid"); !ok {
			b.Fatal("no sid")
		}
	}
}
