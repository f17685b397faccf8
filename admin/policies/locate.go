package policies

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluice-rl/sluice/shared/policy"
)

// Position is a place in a JSON document. Line and Column count from 1;
// Column counts characters (runes).
type Position struct {
	Offset int // byte offset
	Line   int
	Column int
}

// Locator finds the position of policy.FieldError paths in one JSON
// document, so that an editor can show each problem next to the offending
// line. Paths use shared/policy's syntax: rules[0].algorithm_config.burst,
// rules[0].match["jwt:plan"].
type Locator struct {
	doc   []byte
	paths map[string][]int // path -> byte offsets of its occurrences (key, or array element)
}

// NewLocator indexes doc. Malformed JSON is indexed up to the first error.
func NewLocator(doc []byte) *Locator {
	l := &Locator{doc: doc, paths: map[string][]int{}}
	s := &jsonScanner{doc: doc, paths: l.paths}
	s.skipSpace()
	if s.pos < len(doc) {
		s.paths[""] = append(s.paths[""], s.pos)
	}
	s.value("", 0)
	return l
}

var lineColRe = regexp.MustCompile(`\(line (\d+), column (\d+)\)`)

// Locate returns the position of a problem: the field at its path; for a
// missing field, the nearest enclosing field that exists; for malformed
// JSON, the line and column named in the message. ok is false when nothing
// in the document matches.
func (l *Locator) Locate(e policy.FieldError) (Position, bool) {
	if e.Path == "" {
		if m := lineColRe.FindStringSubmatch(e.Message); m != nil {
			line, _ := strconv.Atoi(m[1])
			col, _ := strconv.Atoi(m[2])
			return Position{Offset: -1, Line: line, Column: col}, line > 0
		}
	}
	pick := func(offs []int) int {
		if strings.HasPrefix(e.Message, "duplicate field") && len(offs) > 1 {
			return offs[len(offs)-1]
		}
		return offs[0]
	}
	ends := pathSegmentEnds(e.Path)
	for k := len(ends); k >= 0; k-- {
		prefix := ""
		if k > 0 {
			prefix = e.Path[:ends[k-1]]
		}
		if offs := l.paths[prefix]; len(offs) > 0 {
			return l.position(pick(offs)), true
		}
	}
	return Position{}, false
}

func (l *Locator) position(off int) Position {
	line, lineStart := 1, 0
	for i := 0; i < off && i < len(l.doc); i++ {
		if l.doc[i] == '\n' {
			line++
			lineStart = i + 1
		}
	}
	return Position{Offset: off, Line: line, Column: utf8.RuneCount(l.doc[lineStart:min(off, len(l.doc))]) + 1}
}

// pathSegmentEnds returns the end offset of each segment of a path:
// "a.b[0][\"x.y\"]" has segments ending after "a", ".b", "[0]", "[\"x.y\"]".
func pathSegmentEnds(p string) []int {
	var ends []int
	i := 0
	for i < len(p) {
		switch p[i] {
		case '[':
			j := i + 1
			if j < len(p) && p[j] == '"' {
				j++
				for j < len(p) && p[j] != '"' {
					if p[j] == '\\' {
						j++
					}
					j++
				}
				j++ // closing quote
				for j < len(p) && p[j] == '.' {
					j++ // "..." of a shortened key
				}
			}
			for j < len(p) && p[j] != ']' {
				j++
			}
			i = min(j+1, len(p))
		default:
			if p[i] == '.' {
				i++
			}
			for i < len(p) && p[i] != '.' && p[i] != '[' {
				i++
			}
		}
		ends = append(ends, i)
	}
	return ends
}

// jsonScanner is a tolerant recursive-descent JSON reader that records where
// each path starts. It stops at the first syntax error.
type jsonScanner struct {
	doc   []byte
	pos   int
	paths map[string][]int
	bad   bool
}

const maxScanDepth = 128

func (s *jsonScanner) skipSpace() {
	for s.pos < len(s.doc) {
		switch s.doc[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

func (s *jsonScanner) value(path string, depth int) {
	if s.bad || depth > maxScanDepth {
		s.bad = true
		return
	}
	s.skipSpace()
	if s.pos >= len(s.doc) {
		s.bad = true
		return
	}
	switch s.doc[s.pos] {
	case '{':
		s.pos++
		s.skipSpace()
		if s.pos < len(s.doc) && s.doc[s.pos] == '}' {
			s.pos++
			return
		}
		for !s.bad {
			s.skipSpace()
			keyStart := s.pos
			key, ok := s.str()
			if !ok {
				s.bad = true
				return
			}
			child := policy.JoinPath(path, key)
			s.paths[child] = append(s.paths[child], keyStart)
			s.skipSpace()
			if s.pos >= len(s.doc) || s.doc[s.pos] != ':' {
				s.bad = true
				return
			}
			s.pos++
			s.value(child, depth+1)
			s.skipSpace()
			if s.pos < len(s.doc) && s.doc[s.pos] == ',' {
				s.pos++
				continue
			}
			if s.pos < len(s.doc) && s.doc[s.pos] == '}' {
				s.pos++
				return
			}
			s.bad = true
		}
	case '[':
		s.pos++
		s.skipSpace()
		if s.pos < len(s.doc) && s.doc[s.pos] == ']' {
			s.pos++
			return
		}
		for i := 0; !s.bad; i++ {
			s.skipSpace()
			child := path + "[" + strconv.Itoa(i) + "]"
			s.paths[child] = append(s.paths[child], s.pos)
			s.value(child, depth+1)
			s.skipSpace()
			if s.pos < len(s.doc) && s.doc[s.pos] == ',' {
				s.pos++
				continue
			}
			if s.pos < len(s.doc) && s.doc[s.pos] == ']' {
				s.pos++
				return
			}
			s.bad = true
		}
	case '"':
		if _, ok := s.str(); !ok {
			s.bad = true
		}
	default:
		// Number, true, false, null: skip to a delimiter.
		start := s.pos
		for s.pos < len(s.doc) && strings.IndexByte(",}] \t\r\n", s.doc[s.pos]) < 0 {
			s.pos++
		}
		if s.pos == start {
			s.bad = true
		}
	}
}

// str reads a JSON string at pos and returns its decoded value.
func (s *jsonScanner) str() (string, bool) {
	if s.pos >= len(s.doc) || s.doc[s.pos] != '"' {
		return "", false
	}
	start := s.pos
	s.pos++
	for s.pos < len(s.doc) {
		switch s.doc[s.pos] {
		case '\\':
			s.pos += 2
			continue
		case '"':
			s.pos++
			var v string
			if err := json.Unmarshal(s.doc[start:s.pos], &v); err != nil {
				return "", false
			}
			return v, true
		}
		s.pos++
	}
	return "", false
}
