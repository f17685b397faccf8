package scenario

// The examples of docs/llm.md, read from the page and run as it says they
// behave.

import (
	"strings"
	"testing"
	"time"
)

func init() {
	register(
		Case{Name: "LLMGuideOpenAIMinuteAndDayBudgets", Run: llmGuideOpenAI},
		Case{Name: "LLMGuideProvidersReportUsageInTheirOwnPlaces", Run: llmGuideProviders},
		Case{Name: "LLMGuideBudgetsPerModelAndVerifiedUser", Run: llmGuidePerModel},
	)
}

// LLMGuide is the page whose examples these cases run; LLMGuideExamples
// are their names.
const LLMGuide = "docs/llm.md"

var LLMGuideExamples = []string{"llm-openai", "llm-providers", "llm-per-model"}

// usedTokens is an OpenAI chat completion of key k that used n tokens.
func usedTokens(k string, n string) Request {
	return llmAnswer("/v1/chat/completions", k, "application/json",
		`{"id":"c","object":"chat.completion","choices":[{"message":{"content":"…"}}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":`+n+`}}`)
}

func llmGuideOpenAI(t *testing.T, start Starter) {
	h := startDocExample(t, start, LLMGuide, "llm-openai", noon)
	// 100,000 tokens a minute: two answers of 60,000 take the key into
	// debt (20,000), paid back at 1666.67 a second: 12 s.
	admittedLeaving(t, h, "the first call", usedTokens("k", "60000"), "100000")
	admittedLeaving(t, h, "a call with 40,000 left", usedTokens("k", "60000"), "40000")
	res := wantRefusedInDebt(t, h, "20,000 tokens in debt", usedTokens("k", "1"), 12, 13)
	// The daily quota counted both answers too: 2,000,000 - 120,000.
	h.Advance(13 * time.Second)
	res = do(t, h, usedTokens("k", "0"))
	if res.Rejected || !strings.Contains(header(res.ResponseHeaders, "ratelimit"), `"tpm";r=1`) {
		t.Fatalf("after the debt was paid: rejected %v, RateLimit %q", res.Rejected, header(res.ResponseHeaders, "ratelimit"))
	}
	// A stream without usage costs default_cost (1,000) in both.
	stream := llmAnswer("/v1/chat/completions", "k2", "text/event-stream",
		`data: {"choices":[{"delta":{"content":"Hi"}}]}`+"\n\n", "data: [DONE]\n\n")
	admittedLeaving(t, h, "a stream without usage", stream, "100000")
	admittedLeaving(t, h, "after it", usedTokens("k2", "0"), "99000")
	noRecoveredPanics(t, h)
}

func llmGuideProviders(t *testing.T, start Starter) {
	h := startDocExample(t, start, LLMGuide, "llm-providers", noon)
	// Anthropic, plain: input 100 + output 400.
	anthropic := llmAnswer("/anthropic/v1/messages", "k", "application/json",
		`{"id":"m","type":"message","content":[{"type":"text","text":"…"}],"usage":{"input_tokens":100,"output_tokens":400}}`)
	admittedLeaving(t, h, "an Anthropic answer", anthropic, "30000")
	// Anthropic, streamed: input 25 in the first event, output 15 at the end.
	admittedLeaving(t, h, "an Anthropic stream", llmAnswer("/anthropic/v1/messages", "k", "text/event-stream",
		cutEvery(anthropicStream("25", "15"), 7)...), "29500")
	// A newer stream whose message_delta repeats the input tokens: counted once.
	newer := strings.Replace(anthropicStream("25", "15"), `"usage":{"output_tokens":15}`, `"usage":{"input_tokens":25,"output_tokens":15}`, 1)
	if newer == anthropicStream("25", "15") {
		t.Fatal("the newer stream is the old one")
	}
	admittedLeaving(t, h, "after the Anthropic stream", llmAnswer("/anthropic/v1/messages", "k", "text/event-stream", newer), "29460")
	admittedLeaving(t, h, "after the newer stream", llmAnswer("/anthropic/v1/messages", "k", "application/json",
		`{"usage":{"input_tokens":0,"output_tokens":0}}`), "29420")
	// Gemini: usageMetadata in every chunk, the last one counts.
	gemini := llmAnswer("/gemini/v1beta/models/m:streamGenerateContent", "k", "text/event-stream",
		`data: {"candidates":[],"usageMetadata":{"promptTokenCount":9,"totalTokenCount":12}}`+"\n\n",
		`data: {"candidates":[],"usageMetadata":{"promptTokenCount":9,"totalTokenCount":70}}`+"\n\n")
	admittedLeaving(t, h, "a Gemini stream", gemini, "30000")
	admittedLeaving(t, h, "after it", llmAnswer("/gemini/x", "k", "application/json", `{"usageMetadata":{"totalTokenCount":0}}`), "29930")
	// Ollama's NDJSON: the last line's counts.
	ollama := llmAnswer("/api/chat", "k", "application/x-ndjson",
		`{"message":{"content":"He"},"done":false}`+"\n", `{"message":{"content":"llo"},"done":false}`+"\n",
		`{"done":true,"prompt_eval_count":26,"eval_count":290}`+"\n")
	admittedLeaving(t, h, "an Ollama stream", ollama, "30000")
	admittedLeaving(t, h, "after it", llmAnswer("/api/chat", "k", "application/x-ndjson", `{"done":true,"prompt_eval_count":0,"eval_count":0}`), "29684")
	noRecoveredPanics(t, h)
}

// modelAnswer is usedTokens for a verified user and the model the body
// asked for, as jwt_authn and json_to_metadata put them in the metadata.
func modelAnswer(user, model, n string) Request {
	r := usedTokens("shared-key", n)
	for name, v := range map[string]string{jwtSub: user, bodyModel: model} {
		if v != "" {
			prop, _ := metadataProperty(name)
			r.Properties[prop] = []byte(v)
		}
	}
	return r
}

func llmGuidePerModel(t *testing.T, start Starter) {
	h := startDocExample(t, start, LLMGuide, "llm-per-model", noon)
	// o1 spends alice's reasoning budget (10,000): 9,000, then 5,000 more
	// with 1,000 left, which takes it 4,000 into debt.
	admittedLeaving(t, h, "alice's first o1 call", modelAnswer("alice", "o1", "9000"), "10000")
	admittedLeaving(t, h, "alice's second o1 call", modelAnswer("alice", "o3", "5000"), "1000")
	wantRejection(t, "alice's third o1 call", do(t, h, modelAnswer("alice", "o1", "1")), 429,
		`{"error":"rate_limited","rule":"reasoning-tokens"...`)
	// Her chat budget and bob's reasoning budget are their own.
	admittedLeaving(t, h, "alice on gpt-4o", modelAnswer("alice", "gpt-4o", "100"), "100000")
	admittedLeaving(t, h, "alice without a model", modelAnswer("alice", "", "100"), "99900")
	admittedLeaving(t, h, "bob on o1", modelAnswer("bob", "o1", "100"), "10000")
	// Without a verified user no rule applies: no RateLimit field.
	if res := do(t, h, modelAnswer("", "o1", "100")); res.Rejected || header(res.ResponseHeaders, "ratelimit") != "" {
		t.Errorf("a request without a verified user: rejected %v, RateLimit %q", res.Rejected, header(res.ResponseHeaders, "ratelimit"))
	}
	noRecoveredPanics(t, h)
}
