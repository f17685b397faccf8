package bodyscan

import (
	"bytes"
	"strings"
	"unsafe"
)

// Format is how a body is laid out.
type Format uint8

const (
	// JSON is one JSON document or several, one after another.
	JSON Format = iota
	// EventStream is server-sent events whose data lines are JSON.
	EventStream
)

// FormatOf returns the format of a body with this Content-Type:
// EventStream for text/event-stream, JSON for anything else (a body that
// is not JSON yields nothing).
func FormatOf(contentType string) Format {
	mt, _, _ := strings.Cut(contentType, ";")
	if strings.EqualFold(strings.TrimSpace(mt), "text/event-stream") {
		return EventStream
	}
	return JSON
}

// Readable reports whether a body with this Content-Encoding can be
// scanned: none, or identity. A compressed body cannot.
func Readable(contentEncoding string) bool {
	return contentEncoding == "" || strings.EqualFold(contentEncoding, "identity")
}

// Outcome is what a scanned body reported.
type Outcome uint8

const (
	// Found: some term's path held a number >= 0, and no term's counting
	// path held anything else; the cost is the sum of the terms found.
	Found Outcome = iota
	// NotFound: no path of any term was in the body.
	NotFound
	// Invalid: the path that counts for a term last held something that
	// is not a cost: a negative number, a string, true or false, an
	// object or an array.
	Invalid
)

// Event-stream line states.
const (
	lineStart uint8 = iota // at the start of a line
	lineField              // reading the field name
	lineSpace              // after "data:", where one space is dropped
	lineData               // in a data line's value: JSON
	lineSkip               // in a line that is not data, up to its end
)

// A Scanner finds the numbers at its paths in a body written to it in
// chunks. The zero Scanner finds nothing; Reset readies it for a body. It
// never keeps the body's bytes, so memory does not grow with the body.
type Scanner struct {
	t      tokenizer
	format Format

	// Event stream: the line being read.
	line     uint8
	cr       bool // the last byte was '\r' (a '\n' after it ends no line)
	fieldLen int  // bytes of the field name so far
	field    [4]byte
	data     bool // the event has data lines
	// The event's data, held until the event ends so that an event that
	// cannot hold a path (most of a stream: a few words each) is never
	// tokenized: in wasm, bytes.Index on the event costs a fraction of
	// reading it byte by byte. An event longer than maxEvent is tokenized
	// as it comes instead (streaming).
	event     []byte
	streaming bool
	anchors   [MaxPaths]int // anchorOf each path's last key
	terms     Paths         // how the paths are summed
}

// maxEvent bounds the event data a Scanner holds.
const maxEvent = 8 << 10

// Reset readies s for a new body of format f whose costs are at paths.
func (s *Scanner) Reset(paths Paths, f Format) {
	if len(paths.list) > MaxPaths { // not from ParsePaths: find nothing
		paths = Paths{}
	}
	s.terms = paths
	s.t.paths = paths.list
	s.t.status, s.t.value = [MaxPaths]uint8{}, [MaxPaths]float64{}
	s.t.reset()
	s.format, s.line, s.cr, s.fieldLen, s.data = f, lineStart, false, 0, false
	s.event, s.streaming = s.event[:0], false
	for i, p := range paths.list {
		s.anchors[i] = anchorOf(p[len(p)-1])
	}
}

// Write reads the next chunk of the body.
func (s *Scanner) Write(b []byte) {
	switch {
	case s.format == JSON:
		s.t.feed(b)
	case s.line == lineStart && !s.data && endsEvent(b) && !s.mayHoldAPath(b):
		// Whole events, none of which can hold a path (the usual chunk of
		// a stream): skipped with one search, not read line by line.
		s.cr = false
	default:
		s.events(b)
	}
}

// endsEvent reports whether b ends with a blank line: the end of an event.
func endsEvent(b []byte) bool {
	n := len(b)
	return n >= 2 && (b[n-1] == '\n' && (b[n-2] == '\n' || n >= 3 && b[n-2] == '\r' && b[n-3] == '\n') ||
		b[n-1] == '\r' && b[n-2] == '\r')
}

// Close ends the body: a number or event at its very end counts.
func (s *Scanner) Close() {
	if s.format == EventStream && s.data {
		s.endEvent() // the body ended without the event's blank line
		return
	}
	s.t.end()
}

// Result returns what the body reported and, when Found, the cost: the
// sum over the terms of the last value of the first of their paths the
// body carried (+Inf when a number is too large for a float64; the caller
// bounds it).
func (s *Scanner) Result() (float64, Outcome) {
	sum, found := 0.0, false
	for i := range s.terms.terms {
		from, to := s.terms.term(i)
		for p := from; p < to; p++ {
			switch s.t.status[p] {
			case notFound:
				continue // the next alternative
			case foundOther:
				return 0, Invalid
			}
			sum, found = sum+s.t.value[p], true
			break
		}
	}
	if !found {
		return 0, NotFound
	}
	return sum, Found
}

// events reads event-stream bytes: each data line's value goes to the
// tokenizer, a blank line ends the event (and its JSON document).
func (s *Scanner) events(b []byte) {
	for i := 0; i < len(b); {
		c := b[i]
		if c == '\n' && s.cr { // the second byte of a CRLF
			s.cr = false
			i++
			continue
		}
		s.cr = false
		if c == '\r' || c == '\n' {
			s.cr = c == '\r'
			s.endLine()
			i++
			continue
		}
		switch s.line {
		case lineStart, lineField:
			s.fieldByte(c)
			i++
		case lineSpace:
			s.line = lineData
			if c == ' ' {
				i++
			}
		case lineData:
			j := i + lineEnd(b[i:])
			s.eventData(b[i:j])
			i = j
		default: // lineSkip
			i += lineEnd(b[i:])
		}
	}
}

// fieldByte reads a byte of a line's field name; at ':' the value starts.
func (s *Scanner) fieldByte(c byte) {
	if c == ':' {
		if s.line == lineStart { // a comment line
			s.line = lineSkip
			return
		}
		s.line = lineSkip
		if s.isData() {
			s.line = lineSpace
			s.data = true
		}
		return
	}
	s.line = lineField
	if s.fieldLen < len(s.field) {
		s.field[s.fieldLen] = c
	}
	s.fieldLen++
}

func (s *Scanner) isData() bool {
	return s.fieldLen == 4 && string(s.field[:]) == "data"
}

// endLine ends a line: a blank one ends the event; the end of a data line
// is a newline in the event's data (whitespace to JSON).
func (s *Scanner) endLine() {
	switch {
	case s.line == lineStart:
		s.endEvent()
	case s.line == lineData || s.line == lineSpace || s.line == lineField && s.isData():
		s.data = true
		s.eventData(newline)
	}
	s.line, s.fieldLen = lineStart, 0
}

var newline = []byte{'\n'}

// endEvent ends an event: its data was one JSON document; the next event
// starts another, so an event that is not JSON ("[DONE]") costs nothing to
// the events after it.
func (s *Scanner) endEvent() {
	if s.data {
		if !s.streaming && s.mayHoldAPath(s.event) {
			s.t.feed(s.event)
		}
		s.t.end()
	}
	s.t.reset()
	s.data, s.event, s.streaming = false, s.event[:0], false
}

// eventData takes data of the current event: held, or tokenized once the
// event is too long to hold.
func (s *Scanner) eventData(b []byte) {
	switch {
	case s.streaming:
		s.t.feed(b)
	case len(s.event)+len(b) <= maxEvent:
		s.event = append(s.event, b...)
	default:
		s.streaming = true
		s.t.feed(s.event)
		s.t.feed(b)
	}
}

// mayHoldAPath reports whether event data b has, for some path, its last
// key in quotes: data without it cannot hold the path, as keys are
// compared as written.
func (s *Scanner) mayHoldAPath(b []byte) bool {
	for i, p := range s.t.paths {
		if hasQuoted(b, p[len(p)-1], s.anchors[i]) {
			return true
		}
	}
	return false
}

// hasQuoted reports whether b contains key between double quotes. It
// looks for the key's rarest byte (anchor, see anchorOf) with
// bytes.IndexByte, a word-at-a-time memchr in wasm, and compares around
// each: fewer false starts than strings.Index's search for the first
// byte, whose fallback hashes the text byte by byte.
func hasQuoted(b []byte, key string, anchor int) bool {
	c := key[anchor]
	for from := anchor + 1; from+len(key)-anchor <= len(b)+1; {
		i := bytes.IndexByte(b[from:], c)
		if i < 0 {
			return false
		}
		at := from + i - anchor // where the key would start, after its quote
		from += i + 1
		if end := at + len(key); end < len(b) && b[at-1] == '"' && b[end] == '"' &&
			unsafe.String(&b[at], len(key)) == key {
			return true
		}
	}
	return false
}

// anchorOf returns the index of key's rarest byte in JSON text, by a
// rough guess: '_' and other punctuation, then digits and capitals, then
// uncommon letters; the earliest of the rarest.
func anchorOf(key string) int {
	best, bestRank := 0, 5
	for i := 0; i < len(key); i++ {
		if r := byteRank(key[i]); r < bestRank {
			best, bestRank = i, r
		}
	}
	return best
}

func byteRank(c byte) int {
	switch {
	case c >= 'a' && c <= 'z' && strings.IndexByte("jqxzkvbwyfgp", c) >= 0:
		return 3
	case c >= 'a' && c <= 'z':
		return 4
	case c >= 'A' && c <= 'Z' || c >= '0' && c <= '9':
		return 2
	case c == '-' || c == '.':
		return 1
	}
	return 0
}

// lineEnd returns the index of the first '\n' or '\r' in b, or len(b).
func lineEnd(b []byte) int {
	n := bytes.IndexByte(b, '\n')
	if n < 0 {
		n = len(b)
	}
	if r := bytes.IndexByte(b[:n], '\r'); r >= 0 {
		return r
	}
	return n
}
