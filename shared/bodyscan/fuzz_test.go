package bodyscan

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
)

func addScanSeeds(f *testing.F) {
	for _, c := range scanCases {
		if c.format == JSON {
			f.Add([]byte(c.body), c.paths, uint16(len(c.body)/2))
		}
	}
	f.Add([]byte(`{"a":{"b":1},"a":{"c":2}}`), "a.b", uint16(3))
	f.Add([]byte(`{"a":[{"b":1}],"b":2}`), "b+a.b", uint16(9))
	f.Add([]byte(`{"m":{"u":{"i":3}}} {"u":{"o":5}} {"u":{"i":4,"o":6}}`), "u.i|m.u.i+u.o", uint16(20))
	f.Add([]byte(`{"m":{"u":{"i":3}}} {"u":{"i":"x"}}`), "u.i|m.u.i", uint16(5))
}

// FuzzScannerAgreesWithEncodingJSON: for valid JSON documents, what the
// scanner finds at a path is what encoding/json decodes there, in a JSON
// body and in the same documents sent as server-sent events, wherever the
// body is cut.
func FuzzScannerAgreesWithEncodingJSON(f *testing.F) {
	addScanSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte, pathText string, cut uint16) {
		paths, msg := ParsePaths(pathText)
		if msg != "" {
			return
		}
		docs, ok := decodeDocuments(body)
		if !ok {
			return
		}
		wantCost, want := reference(docs, paths)
		events := asEvents(docs)
		for _, in := range []struct {
			format Format
			body   []byte
		}{{JSON, body}, {EventStream, events}} {
			var s Scanner
			s.Reset(paths, in.format)
			at := min(int(cut), len(in.body))
			s.Write(in.body[:at])
			s.Write(in.body[at:])
			s.Close()
			cost, got := s.Result()
			if got != want || got == Found && cost != wantCost {
				t.Fatalf("format %v, body %q, paths %q: got %v %v, encoding/json says %v %v", in.format, in.body, pathText, cost, got, wantCost, want)
			}
		}
	})
}

// FuzzScannerNeverDependsOnChunks: any bytes, valid or not, in either
// format, read the same in one chunk and cut in two, without a panic.
func FuzzScannerNeverDependsOnChunks(f *testing.F) {
	addScanSeeds(f)
	for _, c := range scanCases {
		if c.format == EventStream {
			f.Add([]byte(c.body), c.paths, uint16(len(c.body)/3))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, pathText string, cut uint16) {
		paths, msg := ParsePaths(pathText)
		if msg != "" {
			return
		}
		for _, format := range []Format{JSON, EventStream} {
			var whole, split Scanner
			whole.Reset(paths, format)
			whole.Write(body)
			whole.Close()
			split.Reset(paths, format)
			at := min(int(cut), len(body))
			split.Write(body[:at])
			split.Write(body[at:])
			split.Close()
			c1, o1 := whole.Result()
			c2, o2 := split.Result()
			if c1 != c2 || o1 != o2 {
				t.Fatalf("format %v, body %q cut at %d: %v %v, whole %v %v", format, body, at, c2, o2, c1, o1)
			}
		}
	})
}

// decodeDocuments splits body into JSON documents, or reports false when
// body is not a sequence of JSON documents the scanner is specified to
// agree on: escapes in keys (compared as written), duplicate keys, nesting
// deeper than followed.
func decodeDocuments(body []byte) ([]json.RawMessage, bool) {
	if bytes.IndexByte(body, '\\') >= 0 {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var docs []json.RawMessage
	for {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			return docs, true
		}
		if err != nil || !plainKeys(raw) {
			return nil, false
		}
		docs = append(docs, raw)
	}
}

// plainKeys reports whether no object of doc repeats a key and doc nests
// at most maxDepth deep.
func plainKeys(doc []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(doc))
	type frame struct {
		keys     map[string]bool
		expectKV bool // an object, at a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return true
		}
		if err != nil || len(stack) > maxDepth {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{':
				stack = append(stack, &frame{keys: map[string]bool{}, expectKV: true})
			case '[':
				stack = append(stack, &frame{})
			default:
				stack = stack[:len(stack)-1]
				if len(stack) > 0 && stack[len(stack)-1].keys != nil {
					stack[len(stack)-1].expectKV = true
				}
			}
			continue
		}
		if top != nil && top.keys != nil {
			if top.expectKV {
				k := tok.(string)
				if top.keys[k] {
					return false
				}
				top.keys[k] = true
			}
			top.expectKV = !top.expectKV
		}
	}
}

// reference finds the paths in docs with encoding/json: the last
// document holding a path (not null) gives its value, and each term counts
// its first alternative found.
func reference(docs []json.RawMessage, ps Paths) (float64, Outcome) {
	paths := ps.list
	status := make([]uint8, len(paths))
	value := make([]float64, len(paths))
	for _, raw := range docs {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var doc any
		if dec.Decode(&doc) != nil {
			panic("a decoded document does not decode again")
		}
		for p, path := range paths {
			v, ok := lookup(doc, path)
			if !ok {
				continue
			}
			status[p] = foundOther
			if n, isNum := v.(json.Number); isNum && len(n) <= maxNumber {
				if c, err := n.Float64(); c >= 0 && (err == nil || math.IsInf(c, 1)) {
					status[p], value[p] = foundCost, c
				}
			}
		}
	}
	sum, found := 0.0, false
	for i := range ps.terms {
		from, to := ps.term(i)
		p := from
		for p < to && status[p] == notFound {
			p++
		}
		switch {
		case p == to:
		case status[p] == foundOther:
			return 0, Invalid
		default:
			sum, found = sum+value[p], true
		}
	}
	if !found {
		return 0, NotFound
	}
	return sum, Found
}

func lookup(doc any, path []string) (any, bool) {
	v := doc
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, v != nil
}

// asEvents sends each document as one server-sent event.
func asEvents(docs []json.RawMessage) []byte {
	var b bytes.Buffer
	for _, d := range docs {
		text := strings.ReplaceAll(string(d), "\r", "\n")
		for _, line := range strings.Split(text, "\n") {
			b.WriteString("data: " + line + "\n")
		}
		b.WriteString("\n")
	}
	return b.Bytes()
}
