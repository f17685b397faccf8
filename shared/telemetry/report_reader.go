package telemetry

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The JSON reader of reports (input already checked by json.Valid).

func (p *parser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// peek returns the first byte of the next value (0 at the end).
func (p *parser) peek() byte {
	p.ws()
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

func kindName(c byte) string {
	switch c {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	case 0:
		return "nothing"
	}
	return "a number"
}

// skip consumes one value.
func (p *parser) skip() {
	switch p.peek() {
	case 0:
	case '"':
		p.skipString()
	case '{', '[':
		depth := 0
		for p.i < len(p.b) {
			switch p.b[p.i] {
			case '"':
				p.skipString()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					p.i++
					return
				}
			}
			p.i++
		}
	default:
		for p.i < len(p.b) && !isDelim(p.b[p.i]) {
			p.i++
		}
	}
}

func isDelim(c byte) bool {
	switch c {
	case ',', '}', ']', ':', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}

// skipString consumes a string; p.i is at its opening quote.
func (p *parser) skipString() {
	p.scanString()
}

// scanString consumes a string and returns its raw content (between the
// quotes), whether it has escapes and whether it has non-ASCII bytes.
func (p *parser) scanString() (raw []byte, escaped, nonASCII bool) {
	start := p.i + 1
	p.i++
	for p.i < len(p.b) {
		switch c := p.b[p.i]; {
		case c == '\\':
			escaped = true
			p.i += 2
			continue
		case c == '"':
			p.i++
			return p.b[start : p.i-1], escaped, nonASCII
		case c >= 0x80:
			nonASCII = true
		}
		p.i++
	}
	return nil, escaped, nonASCII // unreachable on valid JSON
}

// rawBytes consumes a string and returns its value as bytes: a view of the
// input when it has no escapes and is valid UTF-8, else decoded exactly as
// encoding/json decodes it (invalid bytes become U+FFFD).
func (p *parser) rawBytes() []byte {
	start := p.i
	raw, escaped, nonASCII := p.scanString()
	if !escaped && (!nonASCII || utf8.Valid(raw)) {
		return raw
	}
	var s string
	json.Unmarshal(p.b[start:min(p.i, len(p.b))], &s)
	return []byte(s)
}

// rawString consumes a string and returns its value.
func (p *parser) rawString() string { return string(p.rawBytes()) }

// object consumes an object, calling field with each member's name; field
// must consume the member's value.
func (p *parser) object(field func(key []byte)) {
	p.ws()
	p.i++ // '{'
	if p.peek() == '}' {
		p.i++
		return
	}
	for p.i < len(p.b) {
		if p.peek() != '"' {
			return // unreachable on valid JSON
		}
		key := p.rawBytes()
		if p.peek() == ':' {
			p.i++
		}
		before := p.i
		field(key)
		if p.i == before { // defensive: always make progress
			p.skip()
		}
		switch p.peek() {
		case ',':
			p.i++
		case '}':
			p.i++
			return
		default:
			return // unreachable on valid JSON
		}
	}
}

// array consumes an array of at most max elements, calling elem for each
// (which must consume it); elements beyond max are skipped with one error.
// null reads as an empty array.
func (p *parser) array(l loc, max int, elem func(i int)) {
	if p.peek() == 'n' { // null: an empty array (what Go encodes a nil slice as)
		p.skip()
		return
	}
	if c := p.peek(); c != '[' {
		p.errorf(l, "must be an array, got ", kindName(c))
		p.skip()
		return
	}
	p.i++
	if p.peek() == ']' {
		p.i++
		return
	}
	for n := 0; p.i < len(p.b); n++ {
		before := p.i
		if n < max {
			elem(n)
		} else {
			if n == max {
				p.errorf(l, "has more than ", strconv.Itoa(max), " entries")
			}
			p.skip()
		}
		if p.i == before {
			p.skip()
		}
		switch p.peek() {
		case ',':
			p.i++
		case ']':
			p.i++
			return
		default:
			return // unreachable on valid JSON
		}
	}
}

// name reads a string that repeats across the report (a rule name): one
// string per distinct value.
func (p *parser) name(l loc) (string, bool) {
	if c := p.peek(); c != '"' {
		p.errorf(l, "must be a string, got ", kindName(c))
		p.skip()
		return "", false
	}
	b := p.rawBytes()
	if s, ok := p.names[string(b)]; ok {
		return s, true
	}
	if p.names == nil {
		p.names = make(map[string]string, 8)
	}
	s := string(b)
	if len(p.names) < 2*MaxReportRules {
		p.names[s] = s
	}
	return s, true
}

func (p *parser) str(l loc) (string, bool) {
	if c := p.peek(); c != '"' {
		p.errorf(l, "must be a string, got ", kindName(c))
		p.skip()
		return "", false
	}
	return p.rawString(), true
}

// number consumes a number token and returns it; false (with an error) if
// the value is not a number.
func (p *parser) number(l loc, want string) (string, bool) {
	c := p.peek()
	if c != '-' && (c < '0' || c > '9') {
		p.errorf(l, "must be ", want, ", got ", kindName(c))
		p.skip()
		return "", false
	}
	start := p.i
	for p.i < len(p.b) && !isDelim(p.b[p.i]) {
		p.i++
	}
	return string(p.b[start:p.i]), true
}

func (p *parser) uint64(l loc) (uint64, bool) { return p.uintUpTo(l, math.MaxUint64, "") }

// uintUpTo reads a whole number from 0 to max; note follows max in the
// message of a number above it.
func (p *parser) uintUpTo(l loc, max uint64, note string) (uint64, bool) {
	tok, ok := p.number(l, "a whole number")
	if !ok {
		return 0, false
	}
	if strings.ContainsAny(tok, ".eE") {
		p.errorf(l, "must be a whole number, got ", tok)
		return 0, false
	}
	if strings.HasPrefix(tok, "-") {
		p.errorf(l, tok, " is negative; counters start at 0")
		return 0, false
	}
	v, err := strconv.ParseUint(tok, 10, 64)
	if err != nil || v > max {
		p.errorf(l, tok, " is too large (the maximum is ", strconv.FormatUint(max, 10), note, ")")
		return 0, false
	}
	return v, true
}

func (p *parser) int64(l loc) (int64, bool) {
	tok, ok := p.number(l, "a whole number")
	if !ok {
		return 0, false
	}
	if strings.ContainsAny(tok, ".eE") {
		p.errorf(l, "must be a whole number, got ", tok)
		return 0, false
	}
	v, err := strconv.ParseInt(tok, 10, 64)
	if err != nil {
		p.errorf(l, tok, " is out of range")
		return 0, false
	}
	return v, true
}

func (p *parser) float(l loc) (float64, bool) {
	tok, ok := p.number(l, "a number")
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseFloat(tok, 64)
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		p.errorf(l, tok, " is out of range")
		return 0, false
	}
	return v, true
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// quote quotes s for a message, shortened to 80 bytes.
func quote(s string) string {
	if len(s) > 80 {
		cut := 80
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return strconv.Quote(s)
}
