// Package bodyscan reads numbers out of a response body as it streams
// past: the token counts an LLM API reports in "usage", for example. It
// never holds the body: a Scanner keeps a few hundred bytes of state (and
// of server-sent events the current event, up to 8 KiB) whatever the
// body's size, and takes the body in chunks cut anywhere.
//
// Two body formats are read:
//
//   - JSON: one document, or several one after another (NDJSON, as Ollama
//     streams), separated by whitespace.
//   - Server-sent events (text/event-stream, as OpenAI and Anthropic
//     stream): the data lines of each event form one JSON document; events
//     whose data is not JSON ("[DONE]") are skipped.
//
// The numbers are found by path: object keys from the top-level object,
// joined by dots ("usage.total_tokens"). A path read more than once (in
// every streamed chunk, say) counts with its last value. Terms joined by
// "+" are summed ("usage.input_tokens+usage.output_tokens"); a term may
// list alternatives joined by "|", of which the first the body carries
// counts ("usage.input_tokens|message.usage.input_tokens": a streamed
// answer that reports its input tokens in two places counts them once).
package bodyscan

import (
	"strconv"
	"strings"
)

// Limits of a path expression. They bound a Scanner's state.
const (
	MaxTerms    = 4  // terms summed
	MaxPaths    = 8  // paths in all, alternatives included
	MaxSegments = 8  // keys in one path
	MaxKeyLen   = 64 // bytes in one key
)

// Paths is a parsed path expression: terms summed, each one or more
// alternative paths, each a list of object keys, outermost first.
type Paths struct {
	list  [][]string // every path, term after term
	terms []int      // the index in list where each term starts
}

// ParsePaths parses "a.b", "a.b+c.d" or "a.b|c.d+e". It returns the paths,
// or a message saying what is wrong ("" when nothing is).
func ParsePaths(s string) (Paths, string) {
	var ps Paths
	if s == "" {
		return ps, `needs a path to a number in the response body, such as "usage.total_tokens"`
	}
	terms := strings.Split(s, "+")
	if len(terms) > MaxTerms {
		return ps, "sums " + strconv.Itoa(len(terms)) + " terms; at most " + strconv.Itoa(MaxTerms) + " may be summed"
	}
	for _, term := range terms {
		ps.terms = append(ps.terms, len(ps.list))
		for _, part := range strings.Split(term, "|") {
			keys := strings.Split(part, ".")
			if len(keys) > MaxSegments {
				return Paths{}, "path " + strconv.Quote(part) + " has " + strconv.Itoa(len(keys)) + " keys; at most " + strconv.Itoa(MaxSegments)
			}
			for _, k := range keys {
				if msg := checkKey(k); msg != "" {
					return Paths{}, "path " + strconv.Quote(part) + ": " + msg
				}
			}
			ps.list = append(ps.list, keys)
		}
	}
	if len(ps.list) > MaxPaths {
		return Paths{}, "has " + strconv.Itoa(len(ps.list)) + " paths; at most " + strconv.Itoa(MaxPaths) + " in all"
	}
	return ps, ""
}

// checkKey returns what is wrong with one key of a path, or "".
func checkKey(k string) string {
	switch {
	case k == "":
		return `has an empty key; write keys joined by single dots, such as "usage.total_tokens"`
	case len(k) > MaxKeyLen:
		return "has a key longer than " + strconv.Itoa(MaxKeyLen) + " bytes"
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
			return "key " + strconv.Quote(k) + " contains " + strconv.QuoteRune(rune(c)) + "; keys are printable ASCII without spaces, quotes or backslashes"
		}
	}
	return ""
}

// term returns the paths of term i: indices [from, to) of list.
func (ps Paths) term(i int) (from, to int) {
	to = len(ps.list)
	if i+1 < len(ps.terms) {
		to = ps.terms[i+1]
	}
	return ps.terms[i], to
}

// String returns the paths in configuration syntax.
func (ps Paths) String() string {
	var b strings.Builder
	for i := range ps.terms {
		if i > 0 {
			b.WriteByte('+')
		}
		from, to := ps.term(i)
		for j := from; j < to; j++ {
			if j > from {
				b.WriteByte('|')
			}
			b.WriteString(strings.Join(ps.list[j], "."))
		}
	}
	return b.String()
}
