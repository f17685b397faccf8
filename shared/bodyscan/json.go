package bodyscan

import (
	"bytes"
	"errors"
	"math"
	"strconv"
)

// maxDepth bounds the nesting the tokenizer follows; a document nested
// deeper is given up (the values found before it stand).
const maxDepth = 256

// maxNumber bounds the bytes of a number the tokenizer keeps; a longer
// number at a path is not a cost.
const maxNumber = 40

// Tokenizer states: what the next significant byte may be, or the token
// being read.
const (
	stValue       uint8 = iota // a value (top level, after ':' or ',' in an array)
	stArrayFirst               // a value or ']'
	stObjectFirst              // a key or '}'
	stKey                      // a key (after ',' in an object)
	stColon                    // ':'
	stAfterValue               // ',' or the closing bracket; at top level another value
	stString                   // inside a string (a key when isKey)
	stNumber                   // inside a number
	stLiteral                  // inside true, false or null
	stError                    // not JSON: nothing more is read until reset
)

// What a path held, last.
const (
	notFound   uint8 = iota
	foundCost        // a number >= 0
	foundOther       // something else: a string, true, a negative number, an object...
)

// tokenizer is a streaming JSON tokenizer that follows the object keys of
// the enclosing containers against the scanner's paths and records the
// scalar values found at the end of a path (status, value). It keeps a fixed
// amount of state: one bit per open container, the key being read, the
// number being read.
type tokenizer struct {
	paths [][]string // every path (Paths.list)
	// What was found at each path, the last value read winning.
	status [MaxPaths]uint8 // notFound, foundCost, foundOther
	value  [MaxPaths]float64

	state uint8
	depth int                     // open containers
	kinds [maxDepth / 64]uint64   // bit d: container d+1 is an object
	live  [MaxSegments + 1]uint16 // live[d]: paths whose keys match every enclosing key of container d

	keyMatch uint16 // paths whose key at this object's depth is the current key
	pending  uint16 // paths that end at the value being read

	isKey, escaped, keyBad bool
	keyLen                 int
	key                    [MaxKeyLen]byte
	numLen                 int
	num                    [maxNumber]byte
	litLen                 int
	lit                    [5]byte
}

// reset starts a new document (or several, one after another).
func (t *tokenizer) reset() {
	t.state, t.depth, t.keyMatch, t.pending = stValue, 0, 0, 0
	if len(t.paths) > 0 {
		t.live[0] = 1<<len(t.paths) - 1
	}
}

func (t *tokenizer) inObject() bool {
	d := t.depth - 1
	return d >= 0 && t.kinds[d/64]&(1<<(d%64)) != 0
}

// feed reads the next bytes of the document.
func (t *tokenizer) feed(b []byte) {
	for i := 0; i < len(b); {
		switch t.state {
		case stError:
			return
		case stString:
			i = t.readString(b, i)
			continue
		case stNumber:
			c := b[i]
			if c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' {
				if t.numLen < maxNumber {
					t.num[t.numLen] = c
				}
				t.numLen++
				i++
				continue
			}
			t.endNumber()
			continue // c is read in the state after the value
		case stLiteral:
			if c := b[i]; c >= 'a' && c <= 'z' {
				if t.litLen < len(t.lit) {
					t.lit[t.litLen] = c
				}
				t.litLen++
				i++
				continue
			}
			t.endLiteral()
			continue
		}
		c := b[i]
		i++
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			continue
		}
		t.punct(c)
	}
}

// punct reads one significant byte outside a token.
func (t *tokenizer) punct(c byte) {
	switch t.state {
	case stValue, stArrayFirst:
		if c == ']' && t.state == stArrayFirst {
			t.pop(false)
			return
		}
		t.beginValue(c)
	case stObjectFirst, stKey:
		switch {
		case c == '"':
			t.beginKey()
		case c == '}' && t.state == stObjectFirst:
			t.pop(true)
		default:
			t.state = stError
		}
	case stColon:
		if c != ':' {
			t.state = stError
			return
		}
		t.state = stValue
	case stAfterValue:
		switch {
		case t.depth == 0: // another document (NDJSON)
			t.beginValue(c)
		case c == ',' && t.inObject():
			t.state = stKey
		case c == ',':
			t.state = stValue
		case c == '}' || c == ']':
			t.pop(c == '}')
		default:
			t.state = stError
		}
	}
}

// beginValue starts the value whose first byte is c.
func (t *tokenizer) beginValue(c byte) {
	t.pending, t.isKey = 0, false
	next := t.live[0] // the paths an object value continues: at top level, all
	if t.depth > 0 {
		next = 0
	}
	if t.inObject() {
		d := t.depth
		for p := range t.paths {
			if t.keyMatch&(1<<p) == 0 {
				continue
			}
			if len(t.paths[p]) == d {
				t.pending |= 1 << p
			} else {
				next |= 1 << p
			}
		}
	}
	switch {
	case c == '"':
		t.state, t.escaped, t.keyBad = stString, false, true
	case c == '-' || c >= '0' && c <= '9':
		t.state, t.num[0], t.numLen = stNumber, c, 1
	case c >= 'a' && c <= 'z':
		t.state, t.lit[0], t.litLen = stLiteral, c, 1
	case c == '{' || c == '[':
		t.invalid() // a path ending at a container is not a number
		if c == '[' {
			next = 0 // paths do not index arrays
		}
		t.push(c == '{', next)
	default:
		t.state = stError
	}
}

func (t *tokenizer) beginKey() {
	t.state, t.isKey, t.escaped, t.keyLen = stString, true, false, 0
	// A key nothing can match is skipped like any string.
	t.keyBad = t.depth > MaxSegments || t.live[t.depth] == 0
}

// readString reads string bytes from b[i:] and returns where it stopped.
func (t *tokenizer) readString(b []byte, i int) int {
	if t.escaped { // the escaped byte was cut from its backslash
		t.escaped, t.keyBad = false, true
		i++
	}
	if t.keyBad {
		return t.skipString(b, i)
	}
	for i < len(b) {
		c := b[i]
		i++
		switch {
		case c == '\\': // keys are compared as written: an escaped key matches nothing
			t.keyBad = true
			i--
			return t.skipString(b, i)
		case c == '"':
			t.endString()
			return i
		case t.keyLen == MaxKeyLen:
			t.keyBad = true
			return t.skipString(b, i)
		}
		t.key[t.keyLen] = c
		t.keyLen++
	}
	return i
}

// skipString skips string bytes from b[i:] up to the closing quote, with
// bytes.IndexByte: in wasm a word-at-a-time memchr, several times faster
// than a loop over the bytes.
func (t *tokenizer) skipString(b []byte, i int) int {
	for i < len(b) {
		rest := b[i:]
		q := bytes.IndexByte(rest, '"')
		if q < 0 {
			q = len(rest)
		}
		if bs := bytes.IndexByte(rest[:q], '\\'); bs >= 0 {
			i += bs + 2 // the backslash and the byte it escapes
			if i > len(b) {
				t.escaped = true // that byte is in the next chunk
				return len(b)
			}
			continue
		}
		if q == len(rest) {
			return len(b)
		}
		t.endString()
		return i + q + 1
	}
	return i
}

func (t *tokenizer) endString() {
	if !t.isKey {
		t.invalid() // a string is not a cost
		t.state = stAfterValue
		return
	}
	t.keyMatch = 0
	if !t.keyBad {
		key := t.key[:t.keyLen]
		seg := t.depth - 1
		for p := range t.paths {
			if t.live[t.depth]&(1<<p) != 0 && t.paths[p][seg] == string(key) {
				t.keyMatch |= 1 << p
			}
		}
	}
	t.state = stColon
}

func (t *tokenizer) endNumber() {
	t.state = stAfterValue
	if t.pending == 0 {
		return
	}
	v, ok := 0.0, t.numLen <= maxNumber
	if ok {
		v, ok = parseCost(t.num[:t.numLen])
	}
	t.report(v, ok)
}

func (t *tokenizer) endLiteral() {
	t.state = stAfterValue
	switch string(t.lit[:min(t.litLen, len(t.lit))]) {
	case "null": // no value: as if the key were absent
		if t.litLen == 4 {
			return
		}
	case "true":
		if t.litLen == 4 {
			t.invalid()
			return
		}
	case "false":
		if t.litLen == 5 {
			t.invalid()
			return
		}
	}
	t.state = stError
}

// invalid reports the pending paths as holding something not a cost.
func (t *tokenizer) invalid() { t.report(0, false) }

func (t *tokenizer) report(v float64, ok bool) {
	for p := range t.paths {
		if t.pending&(1<<p) != 0 {
			t.status[p], t.value[p] = foundCost, v
			if !ok {
				t.status[p] = foundOther
			}
		}
	}
	t.pending = 0
}

// push opens a container whose keys continue the paths in live.
func (t *tokenizer) push(object bool, live uint16) {
	d := t.depth
	if d == maxDepth {
		t.state = stError
		return
	}
	bit := uint64(1) << (d % 64)
	if object {
		t.kinds[d/64] |= bit
		t.state = stObjectFirst
	} else {
		t.kinds[d/64] &^= bit
		t.state = stArrayFirst
	}
	t.depth++
	if t.depth <= MaxSegments {
		t.live[t.depth] = live
	}
}

// pop closes the innermost container, an object or an array.
func (t *tokenizer) pop(object bool) {
	if t.depth == 0 || t.inObject() != object {
		t.state = stError
		return
	}
	t.depth--
	t.keyMatch = 0 // the enclosing object's next key sets it again
	t.state = stAfterValue
}

// end ends the document: a number at its very end is complete.
func (t *tokenizer) end() {
	switch t.state {
	case stNumber:
		t.endNumber()
	case stLiteral:
		t.endLiteral()
	}
}

// parseCost reads a number that is a cost: >= 0, +Inf when too large for a
// float64.
func parseCost(b []byte) (float64, bool) {
	v, err := strconv.ParseFloat(string(b), 64)
	if err != nil && !(errors.Is(err, strconv.ErrRange) && math.IsInf(v, 1)) || !(v >= 0) {
		return 0, false
	}
	return v, true
}
