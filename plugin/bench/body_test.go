package bench

import (
	"testing"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
)

// llmTokensConfig is one token bucket per API key charged as costSource
// says, which never refuses in a benchmark.
func llmTokensConfig(costSource string) string {
	return `{"rules": [{"name": "llm", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	  "algorithm_config": {"tokens_per_second": 1e9, "burst": 1e9, "cost_source": "` + costSource + `"}}]}`
}

// BenchmarkResponseBodyCost is the cost of reading an LLM answer's usage
// from its body ("response_json:usage.total_tokens") on a whole stream:
// request, response headers, every body chunk, log. "vs-empty" is against
// the empty plugin, which the host calls for every chunk too; "vs-header"
// against the same plugin charging from a response header instead, in one
// interleaved run, so its x-floor is the body scan's own factor. The
// stream is an OpenAI chat completion of 200 events (one data frame each,
// 38 KB); "json" is one answer of 16 KiB in one frame.
func BenchmarkResponseBodyCost(b *testing.B) {
	stream := llmRequest("text/event-stream", OpenAIStream(200)...)
	answer := llmRequest("application/json", ChatCompletion(16<<10))
	body := llmTokensConfig("response_json:usage.total_tokens")
	for _, c := range []struct {
		name string
		req  *wasmhost.Request
	}{{"stream=200-events", stream}, {"json=16KiB", answer}} {
		b.Run("vs-empty/"+c.name, func(b *testing.B) {
			Run(b, Case{Wasm: pluginWasm(b), Floor: floorWasm(b), Config: body, Request: same(c.req), Rejected: &no})
		})
		b.Run("vs-header/"+c.name, func(b *testing.B) {
			Run(b, Case{Wasm: pluginWasm(b), Floor: pluginWasm(b), Config: body, FloorConfig: llmTokensConfig("response_header:x-tokens-used"),
				Request: same(c.req), Rejected: &no})
		})
	}
}

// llmRequest is a request answered with a body of content type ct in
// frames.
func llmRequest(ct string, frames ...[]byte) *wasmhost.Request {
	r := Headers("x-api-key", "k1")
	r.ResponseHeaders = []wasmhost.Header{{":status", "200"}, {"content-type", ct}, {"x-tokens-used", "212"}}
	r.ResponseBody = frames
	return r
}
