package bodyscan

import (
	"math"
	"strings"
	"testing"
)

type scanCase struct {
	name    string
	paths   string
	format  Format
	body    string
	cost    float64
	outcome Outcome
}

var scanCases = []scanCase{
	{"OpenAI chat completion", "usage.total_tokens", JSON,
		`{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hi \"there\" {usage: 1}"}}],
		  "usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}}`, 21, Found},
	{"usage before the choices", "usage.total_tokens", JSON,
		`{"usage": {"total_tokens": 7}, "choices": [{"usage": {"total_tokens": 1000}}]}`, 7, Found},
	{"OpenAI stream with usage in its last chunk", "usage.total_tokens", EventStream,
		"data: {\"choices\":[{\"delta\":{\"content\":\"He\"}}],\"usage\":null}\n\n" +
			"data: {\"choices\":[{\"delta\":{\"content\":\"llo\"}}],\"usage\":null}\n\n" +
			"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7}}\n\n" +
			"data: [DONE]\n\n", 7, Found},
	{"Anthropic stream: input tokens at the start, output tokens at the end", "usage.input_tokens+usage.output_tokens", EventStream,
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n" +
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"Hello\"}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n" +
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", 15, Found},
	{"Anthropic stream read at its nested start", "message.usage.input_tokens+usage.output_tokens", EventStream,
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n", 40, Found},
	{"Gemini", "usageMetadata.totalTokenCount", JSON,
		`{"candidates":[{"content":{"parts":[{"text":"hi"}]}}],"usageMetadata":{"promptTokenCount":4,"candidatesTokenCount":3,"totalTokenCount":7}}`, 7, Found},
	{"Ollama NDJSON stream", "prompt_eval_count+eval_count", JSON,
		"{\"response\":\"He\",\"done\":false}\n{\"response\":\"llo\",\"done\":false}\n{\"done\":true,\"prompt_eval_count\":26,\"eval_count\":290}\n", 316, Found},
	{"the last value of a path wins", "n", JSON, `{"n":1} {"n":2} {"n":3}`, 3, Found},
	{"a path only some documents carry keeps its last value", "n", JSON, `{"n":4} {"m":2}`, 4, Found},
	{"CRLF events, comments and several data lines", "usage.total_tokens", EventStream,
		": keep-alive\r\n\r\nid: 1\r\ndata: {\"usage\":\r\ndata: {\"total_tokens\": 12}}\r\n\r\n", 12, Found},
	{"data without a space after the colon", "n", EventStream, "data:{\"n\":5}\n\n", 5, Found},
	{"an event longer than a scanner holds", "usage.total_tokens", EventStream,
		"data: {\"content\":\"" + strings.Repeat("x", 9000) + "\",\n" + "data: \"usage\":{\"total_tokens\":8}}\n\n" +
			"data: {\"usage\":{\"total_tokens\":\"" + strings.Repeat("y", 9000) + "\"}}\n\n", 0, Invalid},
	{"a long event after a long one", "usage.total_tokens", EventStream,
		"data: {\"content\":\"" + strings.Repeat("x", 9000) + "\"}\n\n" +
			"data: {\"content\":\"" + strings.Repeat("x", 9000) + "\", \"usage\":{\"total_tokens\":8}}\n\n", 8, Found},
	{"the key only inside a string", "usage.total_tokens", EventStream,
		"data: {\"content\":\"\\\"total_tokens\\\": 5\"}\n\n", 0, NotFound},
	{"an event at the end of the body without its blank line", "n", EventStream, "data: {\"n\":1}\n\ndata: {\"n\":9}", 9, Found},
	{"a number at the very end of the body", "n", EventStream, "data: {\"n\":1}\n\ndata: {\"n\":9", 9, Found},
	{"a broken event does not hide the next", "n", EventStream, "data: {\"n\": tru\n\ndata: {\"n\": 3}\n\n", 3, Found},
	{"an event that is not JSON ends with its blank line", "n", EventStream, "data: [DONE]\n: ping\n\ndata: {\"n\": 3}\n\n", 3, Found},
	{"decimal and exponent", "a+b", JSON, `{"a": 1.5, "b": 2e1}`, 21.5, Found},
	{"zero", "n", JSON, `{"n": 0}`, 0, Found},
	{"a huge number", "n", JSON, `{"n": 1e300}`, 1e300, Found},
	{"a number too large for a float", "n", JSON, `{"n": 1e999}`, math.Inf(1), Found},
	{"an exponent that is not a number", "n", JSON, `{"n": 1e}`, 0, Invalid},
	{"a path the body lacks counts 0 beside one it has", "a+b", JSON, `{"b": 4}`, 4, Found},
	{"Anthropic stream whose delta repeats the input tokens", "usage.input_tokens|message.usage.input_tokens+usage.output_tokens", EventStream,
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"input_tokens\":25,\"output_tokens\":15}}\n\n", 40, Found},
	{"the first alternative the body carries counts", "a|b", JSON, `{"b": 4} {"a": 7}`, 7, Found},
	{"the second alternative when the first is absent", "a|b+c", JSON, `{"b": 4, "c": 1}`, 5, Found},
	{"an alternative not counted may hold anything", "a|b", JSON, `{"a": 2, "b": "x"}`, 2, Found},
	{"the counted alternative holding something else", "a|b", JSON, `{"a": "x", "b": 2}`, 0, Invalid},

	{"no usage", "usage.total_tokens", JSON, `{"choices":[]}`, 0, NotFound},
	{"an empty body", "n", JSON, ``, 0, NotFound},
	{"null is absent", "usage.total_tokens", JSON, `{"usage": {"total_tokens": null}}`, 0, NotFound},
	{"paths do not look into arrays", "usage.total_tokens", JSON, `{"usage": [{"total_tokens": 5}]}`, 0, NotFound},
	{"a key of the same name deeper down is another path", "total_tokens", JSON, `{"usage": {"total_tokens": 5}}`, 0, NotFound},
	{"an escaped key is not compared", "usage", JSON, `{"us\u0061ge": 5}`, 0, NotFound},
	{"a key longer than any path key", "n", JSON, `{"` + strings.Repeat("n", 100) + `": 5}`, 0, NotFound},
	{"not JSON", "n", JSON, `<html>502 Bad Gateway</html>`, 0, NotFound},
	{"only [DONE]", "n", EventStream, "data: [DONE]\n\n", 0, NotFound},
	{"a field that is not data", "n", EventStream, "event: {\"n\": 5}\ndatum: {\"n\": 5}\n\n", 0, NotFound},
	{"values after broken JSON are not read", "n", JSON, `{"m": [}, "n": 5}`, 0, NotFound},
	{"nesting deeper than followed", "n", JSON, strings.Repeat("[", 300) + strings.Repeat("]", 300) + ` {"n": 5}`, 0, NotFound},

	{"a string", "usage.total_tokens", JSON, `{"usage": {"total_tokens": "21"}}`, 0, Invalid},
	{"a negative number", "n", JSON, `{"n": -3}`, 0, Invalid},
	{"true", "n", JSON, `{"n": true}`, 0, Invalid},
	{"an object where a number belongs", "usage", JSON, `{"usage": {"total_tokens": 21}}`, 0, Invalid},
	{"an array where a number belongs", "n", JSON, `{"n": [1]}`, 0, Invalid},
	{"a number too long to read", "n", JSON, `{"n": 1` + strings.Repeat("0", 50) + `}`, 0, Invalid},
	{"an invalid path beside a valid one", "a+b", JSON, `{"a": 1, "b": "x"}`, 0, Invalid},
	{"a later number mends an invalid value", "n", JSON, `{"n": "x"} {"n": 2}`, 2, Found},
}

// scan runs body through a scanner, cut into chunks at the given offsets.
func scan(t *testing.T, c scanCase, cuts ...int) (float64, Outcome) {
	t.Helper()
	paths, msg := ParsePaths(c.paths)
	if msg != "" {
		t.Fatalf("ParsePaths(%q): %s", c.paths, msg)
	}
	var s Scanner
	s.Reset(paths, c.format)
	prev := 0
	for _, cut := range cuts {
		s.Write([]byte(c.body[prev:cut]))
		prev = cut
	}
	s.Write([]byte(c.body[prev:]))
	s.Close()
	return s.Result()
}

func TestScannerFindsTheCostsLLMAPIsReport(t *testing.T) {
	for _, c := range scanCases {
		t.Run(c.name, func(t *testing.T) {
			cost, outcome := scan(t, c)
			if outcome != c.outcome || cost != c.cost {
				t.Fatalf("got cost %v outcome %v, want %v %v", cost, outcome, c.cost, c.outcome)
			}
		})
	}
}

// The upstream's body arrives in chunks cut anywhere: in a key, a number,
// an escape, between CR and LF.
func TestScannerReadsTheSameWhereverTheBodyIsCut(t *testing.T) {
	for _, c := range scanCases {
		t.Run(c.name, func(t *testing.T) {
			wantCost, want := scan(t, c)
			for cut := 0; cut <= len(c.body); cut++ {
				if cost, got := scan(t, c, cut); got != want || cost != wantCost {
					t.Fatalf("cut at %d: got %v %v, want %v %v", cut, cost, got, wantCost, want)
				}
			}
			var lines []int // a chunk per line, as a proxy may pass events on
			for i := 0; i < len(c.body); i++ {
				if c.body[i] == '\n' {
					lines = append(lines, i+1)
				}
			}
			if cost, got := scan(t, c, lines...); got != want || cost != wantCost {
				t.Fatalf("a chunk per line: got %v %v, want %v %v", cost, got, wantCost, want)
			}
			cuts := make([]int, len(c.body))
			for i := range cuts {
				cuts[i] = i
			}
			if cost, got := scan(t, c, cuts...); got != want || cost != wantCost {
				t.Fatalf("one byte at a time: got %v %v, want %v %v", cost, got, wantCost, want)
			}
		})
	}
}

func TestScannerResetForgetsTheLastBody(t *testing.T) {
	paths, _ := ParsePaths("n")
	var s Scanner
	s.Reset(paths, JSON)
	s.Write([]byte(`{"n": 5} {"n": [`))
	s.Reset(paths, JSON)
	s.Write([]byte(`{"n": 6}`))
	s.Close()
	if cost, out := s.Result(); out != Found || cost != 6 {
		t.Fatalf("after Reset: %v %v, want 6 Found", cost, out)
	}
	s.Reset(paths, EventStream)
	s.Close()
	if _, out := s.Result(); out != NotFound {
		t.Fatalf("an empty body after Reset: %v, want NotFound", out)
	}
}

func TestZeroScannerFindsNothing(t *testing.T) {
	var s Scanner
	s.Write([]byte(`{"n": 5}`))
	s.Close()
	if _, out := s.Result(); out != NotFound {
		t.Fatalf("zero Scanner: %v, want NotFound", out)
	}
}

func TestFormatOfContentType(t *testing.T) {
	for ct, want := range map[string]Format{
		"text/event-stream":                EventStream,
		"Text/Event-Stream; charset=utf-8": EventStream,
		" text/event-stream ":              EventStream,
		"application/json":                 JSON,
		"application/x-ndjson":             JSON,
		"":                                 JSON,
		"text/event-streamx":               JSON,
	} {
		if got := FormatOf(ct); got != want {
			t.Errorf("FormatOf(%q) = %v, want %v", ct, got, want)
		}
	}
}

func TestParsePaths(t *testing.T) {
	for in, want := range map[string]string{
		"usage.total_tokens":                     "",
		"usage.input_tokens+usage.output_tokens": "",
		"a+b+c+d":                                "",
		"a.b.c.d.e.f.g.h":                        "",
		"a|b+c|d|e+f|g+h":                        "",
		"a|b|c|d|e|f|g|h|i":                      "has 9 paths; at most 8 in all",
		"a|":                                     `path "": has an empty key; write keys joined by single dots, such as "usage.total_tokens"`,
		"":                                       `needs a path to a number in the response body, such as "usage.total_tokens"`,
		"a+b+c+d+e":                              "sums 5 terms; at most 4 may be summed",
		"a.b.c.d.e.f.g.h.i":                      `path "a.b.c.d.e.f.g.h.i" has 9 keys; at most 8`,
		"usage..total":                           `path "usage..total": has an empty key; write keys joined by single dots, such as "usage.total_tokens"`,
		"a+":                                     `path "": has an empty key; write keys joined by single dots, such as "usage.total_tokens"`,
		"total tokens":                           `path "total tokens": key "total tokens" contains ' '; keys are printable ASCII without spaces, quotes or backslashes`,
		`a"b`:                                    `path "a\"b": key "a\"b" contains '"'; keys are printable ASCII without spaces, quotes or backslashes`,
		strings.Repeat("k", 65):                  `path "` + strings.Repeat("k", 65) + `": has a key longer than 64 bytes`,
	} {
		paths, msg := ParsePaths(in)
		if msg != want {
			t.Errorf("ParsePaths(%q): message %q, want %q", in, msg, want)
			continue
		}
		if msg == "" && paths.String() != in {
			t.Errorf("ParsePaths(%q).String() = %q", in, paths.String())
		}
	}
}

// A chunk of whole events none of which can hold a path is skipped
// unread; one that ends an event begun in an earlier chunk is not.
func TestScannerSkipsOnlyChunksOfWholeEvents(t *testing.T) {
	paths, _ := ParsePaths("n")
	for _, chunks := range [][]string{
		{"data: [DONE]\n", ": ping\n\n", "data: {\"n\": 3}\n\n"},
		{"data: {\"n\":", " 5}\n", "\n\n", "data: {\"n\": 3}\n\n"},
		{"data: {\"n\": 9}\n\n", "data: {\"m\": 1}\n\n", "event: x\r\r", "data: {\"n\": 3}\r\n\r\n"},
	} {
		var s Scanner
		s.Reset(paths, EventStream)
		for _, c := range chunks {
			s.Write([]byte(c))
		}
		s.Close()
		if cost, out := s.Result(); out != Found || cost != 3 {
			t.Errorf("chunks %q: %v %v, want 3 Found", chunks, cost, out)
		}
	}
}

func TestHasQuotedFindsOnlyTheKeyBetweenQuotes(t *testing.T) {
	for _, c := range []struct {
		text, key string
		want      bool
	}{
		{`"total_tokens"`, "total_tokens", true},
		{`{"a":1,"total_tokens":5}`, "total_tokens", true},
		{`"total_tokens`, "total_tokens", false},
		{`total_tokens"`, "total_tokens", false},
		{`"prompt_tokens","completion_tokens"`, "total_tokens", false},
		{`\"total_tokens\"`, "total_tokens", false},
		{`"xtotal_tokens" "total_tokensx" "total_tokens"`, "total_tokens", true},
		{`"n"`, "n", true},
		{`n"n`, "n", false},
		{``, "n", false},
		{`"eval_count"`, "eval_count", true},
	} {
		if got := hasQuoted([]byte(c.text), c.key, anchorOf(c.key)); got != c.want {
			t.Errorf("hasQuoted(%q, %q) = %v, want %v", c.text, c.key, got, c.want)
		}
	}
}

func TestReadableOnlyWithoutContentEncoding(t *testing.T) {
	for enc, want := range map[string]bool{"": true, "identity": true, "Identity": true, "gzip": false, "br": false, "gzip, identity": false} {
		if got := Readable(enc); got != want {
			t.Errorf("Readable(%q) = %v, want %v", enc, got, want)
		}
	}
}
