package scenario

// Costs read from the response body ("cost_source": "response_json:<paths>"):
// the token counts LLM APIs report in a JSON answer or in the last event of
// a streamed one, summed over several paths, charged when the body ends;
// default_cost when the body reports none, cannot be read, or never ends.
// The RateLimit fields go out with the response headers, before the body,
// so each charge is seen in the next request's fields (the clock does not
// move, nothing refills). The body reaches the client unchanged.

import (
	"bytes"
	"strings"
	"testing"
	"time"

	telfmt "github.com/sluice-rl/sluice/shared/telemetry"
)

func init() {
	register(
		Case{Name: "ResponseCostFromTheJSONBody", Run: responseCostFromJSONBody},
		Case{Name: "ResponseCostFromStreamedEventsSummingPaths", Run: responseCostFromEvents},
		Case{Name: "TelemetryCountsResponseCosts", Run: telemetryCountsResponseCosts},
	)
}

// llmAnswer is a request of key k to path whose upstream answers with
// body in chunks, of content type ct.
func llmAnswer(path, k, ct string, chunks ...string) Request {
	r := req(":path", path, "x-api-key", k)
	r.ResponseHeaders = []Header{{":status", "200"}, {"content-type", ct}}
	for _, c := range chunks {
		r.ResponseBody = append(r.ResponseBody, []byte(c))
	}
	return r
}

// cutEvery cuts s into chunks of n bytes: keys, numbers and event lines
// fall across chunks.
func cutEvery(s string, n int) []string {
	var out []string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	return append(out, s)
}

const llmRules = `{"rules": [
  {"name": "chat", "match": {"path_prefix": "/v1/chat"}, "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
   "algorithm_config": {"tokens_per_second": 0.000001, "burst": 1000, "cost_source": "response_json:usage.total_tokens",
                        "default_cost": 10, "max_debt": 500}},
  {"name": "messages", "match": {"path_prefix": "/v1/messages"}, "limit_keys": ["header:x-api-key"], "algorithm": "quota",
   "algorithm_config": {"limit": 1000, "period": "day", "cost_source": "response_json:usage.input_tokens|message.usage.input_tokens+usage.output_tokens",
                        "default_cost": 7}}]}`

func responseCostFromJSONBody(t *testing.T, start Starter) {
	h := startConfig(t, start, llmRules)
	const chat, ct = "/v1/chat/completions", "application/json"
	completion := `{"id":"c1","choices":[{"message":{"content":"the \"usage\": {\"total_tokens\": 1}"}}],` +
		`"usage":{"prompt_tokens":20,"completion_tokens":100,"total_tokens":120}}`
	steps := []struct {
		what      string
		r         Request
		remaining string // before this request's charge
	}{
		{"a completion, cut inside keys and numbers", llmAnswer(chat, "k", ct, cutEvery(completion, 7)...), "1000"},
		{"no usage in the body: default_cost", llmAnswer(chat, "k", ct, `{"error":{"message":"overloaded"}}`), "880"},
		{"usage that is not a number: default_cost", llmAnswer(chat, "k", ct, `{"usage":{"total_tokens":"120"}}`), "870"},
		{"a body that is not JSON: default_cost", llmAnswer(chat, "k", "text/html", `<html>502</html>`), "860"},
		{"no body at all: default_cost, with the headers", llmAnswer(chat, "k", ct), "840"},
		{"a last empty chunk", llmAnswer(chat, "k", ct, `{"usage":{"total_tokens":45}}`, ""), "840"},
		{"after all that", llmAnswer(chat, "k", ct, `{"usage":{"total_tokens":0}}`), "795"},
	}
	for _, s := range steps {
		res := do(t, h, s.r)
		if res.Rejected {
			t.Fatalf("%s: rejected", s.what)
		}
		if field := header(res.ResponseHeaders, "ratelimit"); !strings.HasPrefix(field, `"chat";r=`+s.remaining+";") {
			t.Fatalf("%s: RateLimit %q, want r=%s", s.what, field, s.remaining)
		}
		if want := bytes.Join(s.r.ResponseBody, nil); len(want) > 0 && !bytes.Equal(res.ResponseBody, want) {
			t.Fatalf("%s: the client got %q, the upstream sent %q", s.what, res.ResponseBody, want)
		}
	}

	// A compressed body is not read: default_cost, with the headers (whose
	// RateLimit field shows it), and a log line says why.
	gz := llmAnswer(chat, "k", ct, "\x1f\x8b\x08\x00binary")
	gz.ResponseHeaders = append(gz.ResponseHeaders, Header{"content-encoding", "gzip"})
	admittedLeaving(t, h, "a gzip body", gz, "785")
	if logsContaining(h, "gzip-encoded") == 0 {
		t.Fatalf("no log line says the gzip body was not read: %q", h.Logs())
	}
	// Trailers end the body: the charge is made with them.
	tr := llmAnswer(chat, "k", ct, `{"usage":{"total_tokens":`, `5}}`)
	tr.ResponseTrailers = []Header{{"grpc-status", "0"}}
	admittedLeaving(t, h, "a body followed by trailers", tr, "785")
	// A stream reset before its body ended: default_cost, even though the
	// usage came in the first chunk (the response never completed).
	reset := llmAnswer(chat, "k", ct, `{"usage":{"total_tokens":1}}`, ` `)
	reset.ResetAfterBodyChunks = 1
	do(t, h, reset)
	// A reported cost beyond the debt limit is clamped at -max_debt.
	admittedLeaving(t, h, "after the reset", llmAnswer(chat, "k", ct, `{"usage":{"total_tokens":1e12}}`), "770")
	res := do(t, h, llmAnswer(chat, "k", ct, `{}`))
	if !res.Rejected || res.Status != 429 {
		t.Fatalf("in debt: rejected %v status %d", res.Rejected, res.Status)
	}
	if field := header(res.ResponseHeaders, "ratelimit"); !strings.HasPrefix(field, `"chat";r=0;`) {
		t.Fatalf("in debt: RateLimit %q, want r=0", field)
	}
	if res.ResponseBody != nil {
		t.Fatalf("a rejected request's client got the upstream body %q", res.ResponseBody)
	}
	wantMetrics(t, h, map[string]uint64{
		"sluice.rule.chat.response_cost_charged": 11,
		"sluice.rule.chat.response_cost_default": 6, // no usage, a string, HTML, no body, gzip, reset
		"sluice.rule.chat.response_cost_invalid": 1,
		"sluice.rule.chat.response_cost_clamped": 1,
		"sluice.rule.chat.response_cost_failed":  0,
	})
	// Another key has its own bucket.
	admittedLeaving(t, h, "another key", llmAnswer(chat, "other", ct, `{}`), "1000")
	noRecoveredPanics(t, h)
}

// anthropicStream is a streamed message: the input tokens in its first
// event, the output tokens in its message_delta, CRLF line ends.
func anthropicStream(in, out string) string {
	return strings.ReplaceAll("event: message_start\n"+
		`data: {"type":"message_start","message":{"id":"m1","usage":{"input_tokens":`+in+`,"output_tokens":1}}}`+"\n\n"+
		": ping\n\n"+
		"event: content_block_delta\n"+
		`data: {"type":"content_block_delta","delta":{"type":"text_delta","text":"{\"usage\": 5}"}}`+"\n\n"+
		"event: message_delta\n"+
		`data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":`+out+`}}`+"\n\n"+
		"event: message_stop\n"+`data: {"type":"message_stop"}`+"\n\n", "\n", "\r\n")
}

func responseCostFromEvents(t *testing.T, start Starter) {
	h := startConfig(t, start, llmRules)
	const messages, sse = "/v1/messages", "text/event-stream"
	// An OpenAI stream: usage null in every chunk but the last.
	openAI := `data: {"choices":[{"delta":{"content":"Hel"}}],"usage":null}` + "\n\n" +
		`data: {"choices":[{"delta":{"content":"lo"}}],"usage":null}` + "\n\n" +
		`data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}` + "\n\n" +
		"data: [DONE]\n\n"
	admittedLeaving(t, h, "an OpenAI stream", llmAnswer("/v1/chat", "k", sse, cutEvery(openAI, 5)...), "1000")
	admittedLeaving(t, h, "after the OpenAI stream", llmAnswer("/v1/chat", "k", sse, ": no events\n\n"), "989")

	// An Anthropic stream, its two numbers summed, cut into one-byte
	// chunks; what reaches the client is what the upstream sent.
	stream := anthropicStream("25", "15")
	r := llmAnswer(messages, "k", sse, cutEvery(stream, 1)...)
	res := do(t, h, r)
	if res.Rejected || string(res.ResponseBody) != stream {
		t.Fatalf("the stream: rejected %v, the client got %q", res.Rejected, res.ResponseBody)
	}
	admittedLeaving(t, h, "after the stream", llmAnswer(messages, "k", sse, anthropicStream("960", "0")), "960")
	// 1000 used: the quota refuses until the next day.
	if res := do(t, h, llmAnswer(messages, "k", sse)); !res.Rejected {
		t.Fatal("admitted with the day's quota used up")
	}
	// A stream that carries only its first event, then ends: the input
	// tokens count, the missing output tokens count 0.
	admittedLeaving(t, h, "another key", llmAnswer(messages, "k2", sse, strings.SplitAfter(anthropicStream("30", "0"), "\r\n\r\n")[0]), "1000")
	admittedLeaving(t, h, "after a stream without its end", llmAnswer(messages, "k2", sse, "data: {}\n\n"), "970")
	wantMetrics(t, h, map[string]uint64{
		"sluice.rule.messages.response_cost_charged": 4,
		"sluice.rule.messages.response_cost_default": 1, // the last, whose event has no usage
		"sluice.rule.chat.response_cost_charged":     2,
	})
	noRecoveredPanics(t, h)
}

// telemetryCountsResponseCosts: reports carry a response-charged rule's
// charges, those of default_cost and the invalid reports, cumulative, as
// its metrics count them.
func telemetryCountsResponseCosts(t *testing.T, start Starter) {
	h := mustStart(t, start, Options{Clusters: []string{"sluice_admin"},
		Config: []byte(`{"telemetry": {"cluster": "sluice_admin", "token": "t", "interval_ms": 1000}, ` + llmRules[1:])})
	const chat, ct = "/v1/chat/completions", "application/json"
	for _, body := range []string{`{"usage":{"total_tokens":5}}`, `{"usage":{"total_tokens":"5"}}`, `{}`, `{"usage":{"total_tokens":1}}`} {
		if res := do(t, h, llmAnswer(chat, "k", ct, body)); res.Rejected {
			t.Fatalf("%s: rejected", body)
		}
	}
	calls := reportsByVM(t, h, time.Second)
	r := decodeReport(t, calls[0], "sluice_admin", "/api/v1/telemetry", "t")
	got := sumCounts([]*telfmt.Report{r})["chat"]
	want := telfmt.RuleCounters{Rule: "chat", Allowed: 4, ResponseCharged: 4, ResponseDefault: 2, ResponseInvalid: 1}
	if got != want {
		t.Errorf("report: %+v, want %+v", got, want)
	}
	wantMetrics(t, h, map[string]uint64{"sluice.rule.chat.response_cost_charged": 4,
		"sluice.rule.chat.response_cost_default": 2, "sluice.rule.chat.response_cost_invalid": 1})
	noRecoveredPanics(t, h)
}
