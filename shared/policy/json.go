package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// This file turns the raw bytes into a small ordered JSON tree. Decoding
// through json.Decoder's token stream (instead of into structs) keeps the
// field order for error messages, sees duplicate and unknown keys at every
// level, and reports syntax errors with their byte offset.

type jkind uint8

const (
	jNull jkind = iota
	jBool
	jNumber
	jString
	jArray
	jObject
)

func (k jkind) String() string {
	switch k {
	case jNull:
		return "null"
	case jBool:
		return "a boolean"
	case jNumber:
		return "a number"
	case jString:
		return "a string"
	case jArray:
		return "an array"
	}
	return "an object"
}

type jvalue struct {
	kind jkind
	b    bool
	s    string // string value, or a number's literal text
	arr  []*jvalue
	obj  []jmember
}

type jmember struct {
	key string
	val *jvalue
}

// maxDepth bounds nesting; a real configuration is about six levels deep.
const maxDepth = 64

var errTooDeep = errors.New("too deep")

// decodeJSON parses data into a tree. On failure it returns a single
// FieldError (path "") that locates the problem.
func decodeJSON(data []byte) (*jvalue, *FieldError) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &FieldError{Message: "empty configuration; expected a JSON object such as {\"rules\": [...]}"}
	}
	// Validate the whole input first: the scanner behind Unmarshal reports
	// absolute offsets (the Decoder's token stream does not) and rejects
	// trailing data.
	if !json.Valid(data) {
		var raw json.RawMessage
		return nil, syntaxError(data, json.Unmarshal(data, &raw))
	}
	// encoding/json accepts bytes that are not UTF-8 inside strings and
	// reads them as U+FFFD, so such a configuration would be enforced with
	// other values than the ones written, and Envoy cannot carry it at all
	// (a protobuf string, as the admin pushes it, must be UTF-8).
	if !utf8.Valid(data) {
		off := invalidUTF8At(data)
		return nil, &FieldError{Message: "invalid JSON at " + location(data, off) + ": byte 0x" +
			strconv.FormatUint(uint64(data[off]), 16) + " is not UTF-8; save the configuration as UTF-8"}
	}
	r := &reader{data: data, src: string(data)}
	v, err := r.value(0)
	if err != nil {
		if errors.Is(err, errTooDeep) {
			return nil, &FieldError{Message: "invalid configuration at " + location(data, r.pos) +
				": nested more than " + strconv.Itoa(maxDepth) + " levels deep"}
		}
		return nil, &FieldError{Message: "invalid JSON at " + location(data, r.pos) + ": " + err.Error()} // unreachable: the input was validated
	}
	return v, nil
}

// reader builds the tree from input json.Unmarshal has validated, so it
// only has to recognize well-formed JSON: one pass, no token interfaces.
// (A configuration with 10,000 overrides is parsed on every worker VM.)
type reader struct {
	data []byte
	src  string // data as one string: plain strings and numbers are views of it
	pos  int
	slab []jvalue // values are allocated in blocks
}

func (r *reader) alloc(v jvalue) *jvalue {
	if len(r.slab) == 0 {
		r.slab = make([]jvalue, 256)
	}
	p := &r.slab[0]
	r.slab = r.slab[1:]
	*p = v
	return p
}

var errMalformed = errors.New("malformed JSON")

func (r *reader) space() {
	for r.pos < len(r.data) {
		switch r.data[r.pos] {
		case ' ', '\t', '\n', '\r':
			r.pos++
		default:
			return
		}
	}
}

func (r *reader) value(depth int) (*jvalue, error) {
	if depth > maxDepth {
		return nil, errTooDeep
	}
	r.space()
	if r.pos >= len(r.data) {
		return nil, errMalformed
	}
	switch c := r.data[r.pos]; {
	case c == '{':
		r.pos++
		v := r.alloc(jvalue{kind: jObject})
		for {
			r.space()
			if r.pos < len(r.data) && r.data[r.pos] == '}' {
				r.pos++
				return v, nil
			}
			if r.pos < len(r.data) && r.data[r.pos] == ',' {
				r.pos++
				r.space()
			}
			key, err := r.str()
			if err != nil {
				return nil, err
			}
			r.space()
			if r.pos >= len(r.data) || r.data[r.pos] != ':' {
				return nil, errMalformed
			}
			r.pos++
			val, err := r.value(depth + 1)
			if err != nil {
				return nil, err
			}
			v.obj = append(v.obj, jmember{key: key, val: val})
		}
	case c == '[':
		r.pos++
		v := r.alloc(jvalue{kind: jArray})
		for {
			r.space()
			if r.pos < len(r.data) && r.data[r.pos] == ']' {
				r.pos++
				return v, nil
			}
			if r.pos < len(r.data) && r.data[r.pos] == ',' {
				r.pos++
			}
			val, err := r.value(depth + 1)
			if err != nil {
				return nil, err
			}
			v.arr = append(v.arr, val)
		}
	case c == '"':
		s, err := r.str()
		return r.alloc(jvalue{kind: jString, s: s}), err
	case c == 't' || c == 'f' || c == 'n':
		word := "null"
		switch c {
		case 't':
			word = "true"
		case 'f':
			word = "false"
		}
		if !bytes.HasPrefix(r.data[r.pos:], []byte(word)) {
			return nil, errMalformed
		}
		r.pos += len(word)
		if c == 'n' {
			return r.alloc(jvalue{kind: jNull}), nil
		}
		return r.alloc(jvalue{kind: jBool, b: c == 't'}), nil
	default: // a number
		start := r.pos
		for r.pos < len(r.data) && strings.IndexByte("+-.0123456789eE", r.data[r.pos]) >= 0 {
			r.pos++
		}
		if r.pos == start {
			return nil, errMalformed
		}
		return r.alloc(jvalue{kind: jNumber, s: r.src[start:r.pos]}), nil
	}
}

// invalidUTF8At is the offset of the first byte of data that does not
// start a valid UTF-8 sequence.
func invalidUTF8At(data []byte) int {
	for off := 0; off < len(data); {
		r, size := utf8.DecodeRune(data[off:])
		if r == utf8.RuneError && size == 1 {
			return off
		}
		off += size
	}
	return len(data)
}

// str reads a string; escapes are left to encoding/json, as the token
// stream did. (The input is valid UTF-8: decodeJSON checked it.)
func (r *reader) str() (string, error) {
	if r.pos >= len(r.data) || r.data[r.pos] != '"' {
		return "", errMalformed
	}
	start, escaped := r.pos, false
	for r.pos++; r.pos < len(r.data); r.pos++ {
		switch r.data[r.pos] {
		case '\\':
			escaped = true
			r.pos++
		case '"':
			r.pos++
			if !escaped {
				return r.src[start+1 : r.pos-1], nil
			}
			var s string
			if err := json.Unmarshal(r.data[start:r.pos], &s); err != nil {
				return "", err
			}
			return s, nil
		}
	}
	return "", errMalformed
}

func syntaxError(data []byte, err error) *FieldError {
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		return &FieldError{Message: "invalid JSON: " + err.Error()}
	}
	// Offset counts the bytes read, including the offending one.
	off, msg := int(se.Offset)-1, se.Error()
	if off >= len(data) || strings.HasPrefix(msg, "unexpected end") {
		off, msg = len(data), "unexpected end of input (an unclosed object, array or string?)"
	}
	if strings.Contains(msg, "after top-level value") {
		msg += "; the configuration must be a single JSON object"
	}
	off = max(off, 0)
	return &FieldError{Message: "invalid JSON at " + location(data, off) + ": " + msg}
}

// location renders a byte offset as "byte offset N (line L, column C)".
// Lines and columns count from 1; columns count bytes.
func location(data []byte, off int) string {
	line, col := 1, 1
	for i := 0; i < off && i < len(data); i++ {
		if data[i] == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return "byte offset " + strconv.Itoa(off) + " (line " + strconv.Itoa(line) + ", column " + strconv.Itoa(col) + ")"
}
