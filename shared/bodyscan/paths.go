// Package bodyscan reads numbers out of a response body as it streams
// past: the token counts an LLM API reports in "usage", for example. It
// never holds the body: a Scanner keeps a few hundred bytes of state
// whatever the body's size, and takes the body in chunks cut anywhere.
//
// Three body formats are read:
//
//   - JSON: one document, or several one after another (NDJSON, as Ollama
//     streams), separated by whitespace.
//   - Server-sent events (text/event-stream, as OpenAI and Anthropic
//     stream): the data lines of each event form one JSON document; events
//     whose data is not JSON ("[DONE]") are skipped.
//
// The numbers are found by path: object keys from the top-level object,
// joined by dots ("usage.total_tokens"). Several paths may be summed
// ("usage.input_tokens+usage.output_tokens"). A path read more than once
// (in every streamed chunk, say) counts with its last value.
package bodyscan

import (
	"strconv"
	"strings"
)

// Limits of a path list. They bound a Scanner's state.
const (
	MaxPaths    = 4  // paths summed
	MaxSegments = 8  // keys in one path
	MaxKeyLen   = 64 // bytes in one key
)

// Paths are parsed paths: each a list of object keys, outermost first.
type Paths [][]string

// ParsePaths parses "a.b" or "a.b+c.d". It returns the paths, or a
// message saying what is wrong ("" when nothing is).
func ParsePaths(s string) (Paths, string) {
	if s == "" {
		return nil, `needs a path to a number in the response body, such as "usage.total_tokens"`
	}
	parts := strings.Split(s, "+")
	if len(parts) > MaxPaths {
		return nil, "sums " + strconv.Itoa(len(parts)) + " paths; at most " + strconv.Itoa(MaxPaths) + " may be summed"
	}
	paths := make(Paths, 0, len(parts))
	for _, part := range parts {
		keys := strings.Split(part, ".")
		if len(keys) > MaxSegments {
			return nil, "path " + strconv.Quote(part) + " has " + strconv.Itoa(len(keys)) + " keys; at most " + strconv.Itoa(MaxSegments)
		}
		for _, k := range keys {
			if msg := checkKey(k); msg != "" {
				return nil, "path " + strconv.Quote(part) + ": " + msg
			}
		}
		paths = append(paths, keys)
	}
	return paths, ""
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

// String returns the paths in configuration syntax.
func (ps Paths) String() string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte('+')
		}
		b.WriteString(strings.Join(p, "."))
	}
	return b.String()
}
