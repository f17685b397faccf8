// Package policyedit is the structured policy editor's model: it reads a
// policy document as ordered JSON, lists its policies and rules in words,
// and adds, duplicates, moves, deletes and rewrites rules. Every member it
// does not edit — unknown fields, fields of newer filter versions, a
// match operator it has no form for — is carried through as the raw JSON
// it was, so a structured edit never loses what the JSON view holds.
package policyedit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Member is one member of a JSON object, its value kept as raw JSON.
type Member struct {
	Key   string
	Value json.RawMessage
}

// Object is a JSON object with its members in document order.
type Object []Member

// ParseObject reads one JSON object, keeping member order and raw values.
func ParseObject(raw []byte) (Object, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	var o Object
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, _ := kt.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		o = append(o, Member{Key: k, Value: v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("unexpected data after the JSON object")
	}
	return o, nil
}

// Get returns a member's raw value.
func (o Object) Get(key string) (json.RawMessage, bool) {
	for _, m := range o {
		if m.Key == key {
			return m.Value, true
		}
	}
	return nil, false
}

// String returns a member's string value ("" when absent or not a string).
func (o Object) String(key string) string {
	v, ok := o.Get(key)
	if !ok {
		return ""
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return ""
	}
	return s
}

// Set replaces a member's value in place, or appends the member.
func (o *Object) Set(key string, v any) {
	raw, err := json.Marshal(v)
	if err != nil {
		return
	}
	if r, ok := v.(json.RawMessage); ok {
		raw = r
	}
	for i := range *o {
		if (*o)[i].Key == key {
			(*o)[i].Value = raw
			return
		}
	}
	*o = append(*o, Member{Key: key, Value: raw})
}

// Delete removes a member.
func (o *Object) Delete(key string) {
	out := (*o)[:0]
	for _, m := range *o {
		if m.Key != key {
			out = append(out, m)
		}
	}
	*o = out
}

// MarshalJSON writes the members in order.
func (o Object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.Key)
		b.Write(k)
		b.WriteByte(':')
		v := m.Value
		if len(v) == 0 {
			v = json.RawMessage("null")
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// Pretty indents a JSON document two spaces, as the JSON view shows it.
func Pretty(raw []byte) string {
	var b bytes.Buffer
	if json.Indent(&b, raw, "", "  ") != nil {
		return string(raw)
	}
	return b.String() + "\n"
}
