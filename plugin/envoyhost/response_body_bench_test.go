package envoyhost_test

import (
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/plugin/bench"
	"github.com/sluice-rl/sluice/plugin/scenario"
)

// BenchmarkEnvoyHostResponseBody: an LLM answer's usage read from its body
// ("response_json:usage.total_tokens") on a whole stream (request,
// response headers, every body chunk, log), against the empty plugin, which
// the host calls for every chunk too, and (x-base) against the same rule
// charged from a response header instead. The stream is an OpenAI chat
// completion of 200 events, one data frame each (38 KB); "json" one
// answer of 16 KiB in one frame. "bytes" charges the stream its size
// ("response_bytes"), counted without reading it.
func BenchmarkEnvoyHostResponseBody(b *testing.B) {
	const tokens = `"burst": 1e12, "cost_source": "response_json:usage.total_tokens"}`
	body := strings.Replace(benchConfig, `"burst": 1e12}`, tokens, 1)
	header := strings.Replace(benchConfig, `"burst": 1e12}`, `"burst": 1e12, "cost_source": "response_header:x-tokens-used"}`, 1)
	size := strings.Replace(benchConfig, `"burst": 1e12}`, `"burst": 1e12, "cost_source": "response_bytes"}`, 1)
	answer := func(ct string, frames ...[]byte) scenario.Request {
		r := hdr("x-api-key", "k")
		r.ResponseHeaders = []scenario.Header{{":status", "200"}, {"content-type", ct}, {"x-tokens-used", "212"}}
		r.ResponseBody = frames
		return r
	}
	benchStreams(b, []streamCase{
		{"stream=200-events", body, answer("text/event-stream", bench.OpenAIStream(200)...), false, header},
		{"json=16KiB", body, answer("application/json", bench.ChatCompletion(16<<10)), false, header},
		{"bytes-stream=200-events", size, answer("text/event-stream", bench.OpenAIStream(200)...), false, header},
	})
}
