package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

const llmTokensConfig = `{"rules": [{"name": "llm", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
  "algorithm_config": {"tokens_per_second": 0.000001, "burst": 1000, "cost_source": "response_json:usage.total_tokens"}}]}`

// chat posts a chat request to the gateway and returns the response and
// its body.
func chat(t *testing.T, url, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("X-Api-Key", "k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// The demo upstream answers /v1/chat/completions like OpenAI's chat API,
// plain or streamed, and a rule charged from the body takes the usage it
// reports through the gateway.
func TestDemoUpstreamAnswersLikeAnLLMAndTheRuleChargesItsUsage(t *testing.T) {
	gw, _, _ := startGateway(t, "demo", llmTokensConfig)
	prompt := `{"model": "demo", "messages": [{"role": "user", "content": "hello"}]}`
	resp, body := chat(t, gw.URL(), prompt)
	var answer struct {
		Usage struct {
			Total int `json:"total_tokens"`
		} `json:"usage"`
	}
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &answer) != nil || answer.Usage.Total == 0 {
		t.Fatalf("status %d, body %q: want a chat completion with usage", resp.StatusCode, body)
	}
	if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, `"llm";r=1000;`) {
		t.Errorf("first answer: RateLimit %q", got)
	}
	streamed := `{"model": "demo", "stream": true, "messages": [{"role": "user", "content": "hello"}]}`
	resp, body = chat(t, gw.URL(), streamed)
	if resp.Header.Get("Content-Type") != "text/event-stream" || !strings.Contains(body, `"usage":{"completion_tokens":8,`) ||
		!strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Fatalf("the stream: %s %q", resp.Header.Get("Content-Type"), body)
	}
	want := 1000 - answer.Usage.Total
	if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, `"llm";r=`+strconv.Itoa(want)+";") {
		t.Errorf("after the first answer: RateLimit %q, want r=%d", got, want)
	}
	streamTokens := len(streamed)/4 + 1 + 8
	resp, _ = chat(t, gw.URL(), prompt)
	if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, `"llm";r=`+strconv.Itoa(want-streamTokens)+";") {
		t.Errorf("after the stream: RateLimit %q, want r=%d", got, want-streamTokens)
	}
}
