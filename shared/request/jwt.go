package request

import (
	"encoding/base64"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// JWT claims for jwt:<claim> sources.
//
// The bearer token's payload is base64url-decoded once per request and its
// top-level object is scanned once by a small JSON scanner that records where
// each member's key and value are; claims are then looked up without
// decoding anything else. encoding/json (reflection, a map per request) cost
// about 25 us per request inside wasm; this costs well under one.
//
// The signature is NOT verified: put Envoy's jwt_authn filter in front of
// Sluice when claims decide limits.

// maxJSONDepth bounds nesting inside claim values.
const maxJSONDepth = 64

// Claims is the scanned payload of one token.
type Claims struct {
	payload string   // the decoded payload: a view of buf
	members []member // top-level members in document order
	// buf holds the decoded payload, reused from request to request: the
	// claims (views of it) are only used while their request is decided.
	buf []byte
}

type member struct {
	key        string // raw key text between the quotes (escapes not decoded)
	keyEscaped bool   // key contains a backslash
	val        string // raw value text
}

// ParseJWT decodes the payload of the bearer token in an Authorization
// header value ("Bearer <header>.<payload>.<signature>", scheme
// case-insensitive) and scans its top-level object into c (reusing c's
// slice). Anything malformed (other scheme, not three segments, bad
// base64url, not a JSON object, invalid JSON, a token over MaxJWT bytes)
// reports false.
func ParseJWT(authz string, c *Claims) bool {
	c.payload, c.members = "", c.members[:0]
	authz = strings.TrimSpace(authz)
	if len(authz) < 7 || !strings.EqualFold(authz[:7], "bearer ") {
		return false
	}
	tok := strings.TrimSpace(authz[7:])
	if len(tok) > MaxJWT {
		return false
	}
	// Exactly three segments. One pass of IndexByte (assembly in wasm),
	// not strings.Count (a Go byte loop, half a microsecond on a 130-byte
	// token there).
	d1 := strings.IndexByte(tok, '.')
	if d1 < 0 {
		return false
	}
	rest := tok[d1+1:]
	d2 := strings.IndexByte(rest, '.')
	if d2 < 0 || strings.IndexByte(rest[d2+1:], '.') >= 0 {
		return false
	}
	seg := strings.TrimRight(rest[:d2], "=") // tolerate padding
	if n := base64.RawURLEncoding.DecodedLen(len(seg)); cap(c.buf) < n {
		c.buf = make([]byte, n)
	}
	// Decode only reads src: a view of seg, not a copy.
	n, err := base64.RawURLEncoding.Decode(c.buf[:cap(c.buf)], unsafe.Slice(unsafe.StringData(seg), len(seg)))
	if err != nil || n == 0 {
		return false
	}
	// buf is not modified until the next request's token: view it as a
	// string so claim values are substrings, not copies.
	c.payload = unsafe.String(&c.buf[0], n)
	if !scanObject(c) {
		c.payload, c.members = "", c.members[:0]
		return false
	}
	return true
}

// Claim returns a claim rendered as a key or match value: a string claim is
// its decoded text; numbers and booleans are their JSON text ("42",
// "true"); objects and arrays are their raw JSON text; null or an absent
// claim is missing. With duplicate keys the last one wins (as with
// encoding/json).
func (c *Claims) Claim(name string) (string, bool) {
	for i := len(c.members) - 1; i >= 0; i-- {
		m := &c.members[i]
		k := m.key
		if m.keyEscaped {
			k = unquoteJSON(k)
		}
		if k != name {
			continue
		}
		switch v := m.val; {
		case v == "null":
			return "", false
		case v[0] == '"':
			return unquoteJSON(v[1 : len(v)-1]), true
		default:
			return v, true
		}
	}
	return "", false
}

// scanObject scans c.payload, which must be exactly one JSON object
// (surrounding whitespace allowed), recording its members.
func scanObject(c *Claims) bool {
	s := c.payload
	i := skipWS(s, 0)
	if i >= len(s) || s[i] != '{' {
		return false
	}
	i = skipWS(s, i+1)
	if i < len(s) && s[i] == '}' {
		return skipWS(s, i+1) == len(s)
	}
	for {
		if i >= len(s) || s[i] != '"' {
			return false
		}
		kEnd, esc := skipString(s, i)
		if kEnd < 0 {
			return false
		}
		key := s[i+1 : kEnd-1]
		i = skipWS(s, kEnd)
		if i >= len(s) || s[i] != ':' {
			return false
		}
		i = skipWS(s, i+1)
		vEnd := skipValue(s, i, 0)
		if vEnd < 0 {
			return false
		}
		c.members = append(c.members, member{key: key, keyEscaped: esc, val: s[i:vEnd]})
		i = skipWS(s, vEnd)
		if i >= len(s) {
			return false
		}
		switch s[i] {
		case ',':
			i = skipWS(s, i+1)
		case '}':
			return skipWS(s, i+1) == len(s)
		default:
			return false
		}
	}
}

func skipWS(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the index just past the JSON value starting at s[i], or
// -1 if there is no valid value there.
func skipValue(s string, i, depth int) int {
	if i >= len(s) || depth > maxJSONDepth {
		return -1
	}
	switch c := s[i]; {
	case c == '"':
		end, _ := skipString(s, i)
		return end
	case c == '{' || c == '[':
		closing := byte('}')
		if c == '[' {
			closing = ']'
		}
		i = skipWS(s, i+1)
		if i < len(s) && s[i] == closing {
			return i + 1
		}
		for {
			if c == '{' {
				if i >= len(s) || s[i] != '"' {
					return -1
				}
				if i, _ = skipString(s, i); i < 0 {
					return -1
				}
				if i = skipWS(s, i); i >= len(s) || s[i] != ':' {
					return -1
				}
				i = skipWS(s, i+1)
			}
			if i = skipValue(s, i, depth+1); i < 0 {
				return -1
			}
			if i = skipWS(s, i); i >= len(s) {
				return -1
			}
			if s[i] == closing {
				return i + 1
			}
			if s[i] != ',' {
				return -1
			}
			i = skipWS(s, i+1)
		}
	case c == '-' || c >= '0' && c <= '9':
		return skipNumber(s, i)
	case strings.HasPrefix(s[i:], "true"):
		return i + 4
	case strings.HasPrefix(s[i:], "false"):
		return i + 5
	case strings.HasPrefix(s[i:], "null"):
		return i + 4
	}
	return -1
}

// skipString returns the index just past the string starting at s[i] (a
// '"'), and whether it contains escapes; -1 if it is invalid (unterminated,
// a control character, a bad escape).
func skipString(s string, i int) (int, bool) {
	esc := false
	for i++; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return i + 1, esc
		case c < 0x20:
			return -1, false
		case c == '\\':
			esc = true
			if i+1 >= len(s) {
				return -1, false
			}
			switch s[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if i+5 >= len(s) || !isHex(s[i+2]) || !isHex(s[i+3]) || !isHex(s[i+4]) || !isHex(s[i+5]) {
					return -1, false
				}
				i += 5
			default:
				return -1, false
			}
		}
	}
	return -1, false
}

// skipNumber returns the index past a JSON number at s[i], or -1.
func skipNumber(s string, i int) int {
	if s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	default:
		return -1
	}
	if i < len(s) && s[i] == '.' {
		i++
		start := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == start {
			return -1
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		start := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == start {
			return -1
		}
	}
	return i
}

// unquoteJSON decodes the escapes of a JSON string body already validated
// by skipString. Invalid surrogates become U+FFFD, as with encoding/json.
func unquoteJSON(s string) string {
	if strings.IndexByte(s, '\\') < 0 {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 >= len(s) {
			b = append(b, c)
			continue
		}
		i++
		switch s[i] {
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			if i+4 >= len(s) {
				return string(b)
			}
			r := hex4(s[i+1 : i+5])
			i += 4
			if utf16.IsSurrogate(r) {
				r2 := utf8.RuneError
				if i+6 < len(s) && s[i+1] == '\\' && s[i+2] == 'u' {
					r2 = hex4(s[i+3 : i+7])
				}
				if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
					i += 6
					r = d
				} else {
					r = utf8.RuneError
				}
			}
			b = utf8.AppendRune(b, r)
		default: // '"', '\\', '/'
			b = append(b, s[i])
		}
	}
	return string(b)
}

func hex4(s string) rune {
	var r rune
	for i := 0; i < 4; i++ {
		r = r<<4 | rune(unhex(s[i]))
	}
	return r
}

// Reset forgets the last token's claims (they are views of buffers the
// Claims owns) and keeps the buffers for the next one.
func (c *Claims) Reset() {
	c.payload = ""
	c.members = c.members[:0]
}
