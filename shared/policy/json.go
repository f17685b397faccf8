package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
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
	var raw json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, syntaxError(data, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := readValue(dec, 0)
	if err != nil {
		if errors.Is(err, errTooDeep) {
			return nil, &FieldError{Message: "invalid configuration at " + location(data, int(dec.InputOffset())) +
				": nested more than " + strconv.Itoa(maxDepth) + " levels deep"}
		}
		return nil, syntaxError(data, err) // unreachable: the input was validated
	}
	return v, nil
}

func readValue(dec *json.Decoder, depth int) (*jvalue, error) {
	if depth > maxDepth {
		return nil, errTooDeep
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			v := &jvalue{kind: jObject}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, ok := kt.(string)
				if !ok { // unreachable: the decoder only yields strings as keys
					return nil, errors.New("object key is not a string")
				}
				val, err := readValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				v.obj = append(v.obj, jmember{key: key, val: val})
			}
			if _, err := dec.Token(); err != nil { // '}'
				return nil, err
			}
			return v, nil
		case '[':
			v := &jvalue{kind: jArray}
			for dec.More() {
				val, err := readValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				v.arr = append(v.arr, val)
			}
			if _, err := dec.Token(); err != nil { // ']'
				return nil, err
			}
			return v, nil
		}
		return nil, errors.New("unexpected " + strconv.QuoteRune(rune(t)))
	case string:
		return &jvalue{kind: jString, s: t}, nil
	case json.Number:
		return &jvalue{kind: jNumber, s: string(t)}, nil
	case bool:
		return &jvalue{kind: jBool, b: t}, nil
	case nil:
		return &jvalue{kind: jNull}, nil
	}
	return nil, errors.New("unexpected JSON token")
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
