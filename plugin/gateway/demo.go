package main

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"time"
)

// startUpstream resolves -upstream. "demo" starts a small echo server on a
// free loopback port, so `make run` needs nothing else.
func (gw *Gateway) startUpstream(upstream string) error {
	if upstream != "demo" {
		u, err := url.Parse(upstream)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("-upstream %q: want an http(s) base URL such as http://127.0.0.1:8081, or \"demo\"", upstream)
		}
		gw.upstream = u
		return nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("starting the demo upstream: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", echo)
	mux.HandleFunc("/v1/chat/completions", chatCompletion)
	gw.demo = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := gw.demo.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			gw.log.Error("demo upstream", "err", err)
		}
	}()
	gw.upstream = &url.URL{Scheme: "http", Host: ln.Addr().String()}
	return nil
}

func (gw *Gateway) stopUpstream() {
	if gw.demo != nil {
		gw.demo.Close()
	}
}

// echo is the demo upstream: it answers with what it received, so you can
// see the headers the plugin added upstream (such as the shadow marker).
func echo(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
	headers := map[string]string{}
	for name, values := range r.Header {
		headers[strings.ToLower(name)] = strings.Join(values, ", ")
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"upstream": "sluice demo echo",
		"method":   r.Method,
		"path":     r.URL.RequestURI(),
		"headers":  headers,
	})
}

// chatCompletion is the demo upstream's stand-in for an LLM API: it
// answers /v1/chat/completions as OpenAI's chat API does, with the tokens
// used in "usage" (the prompt's about one per four bytes of the request
// body), so rules charged from the body ("response_json:usage.total_tokens")
// can be tried without a model. With "stream": true in the request it
// streams server-sent events, usage in the last one, as OpenAI does with
// "stream_options": {"include_usage": true}.
func chatCompletion(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var req struct {
		Stream bool `json:"stream"`
	}
	json.Unmarshal(body, &req) // anything else: a plain answer
	words := []string{"Sluice", " limited", " this", " answer", " by", " its", " tokens", "."}
	prompt := len(body)/4 + 1
	usage := map[string]int{"prompt_tokens": prompt, "completion_tokens": len(words), "total_tokens": prompt + len(words)}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"id": "chatcmpl-demo", "object": "chat.completion", "model": "sluice-demo",
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
				"message": map[string]string{"role": "assistant", "content": strings.Join(words, "")}}},
			"usage": usage,
		})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	flusher, _ := w.(http.Flusher)
	event := func(v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	for _, word := range words {
		event(map[string]any{"id": "chatcmpl-demo", "object": "chat.completion.chunk",
			"choices": []any{map[string]any{"index": 0, "delta": map[string]string{"content": word}}}, "usage": nil})
	}
	event(map[string]any{"id": "chatcmpl-demo", "object": "chat.completion.chunk", "choices": []any{}, "usage": usage})
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// demoConfig is the demo policy (plugin/gateway/demo-config.json): the
// "Try it" examples are printed only when it is in force.
//
//go:embed demo-config.json
var demoConfig []byte

// isDemoConfig reports whether config is the demo policy, with or without a
// telemetry block (`make run` adds one).
func isDemoConfig(config []byte) bool {
	var a, b map[string]any
	if json.Unmarshal(config, &a) != nil || json.Unmarshal(demoConfig, &b) != nil {
		return false
	}
	delete(a, "telemetry")
	return reflect.DeepEqual(a, b)
}

// example is one command of the "Try it" banner: what to paste, what a
// reader sees, and (for the test that runs it) a pattern its output matches.
type example struct {
	cmd, says string
	output    *regexp.Regexp
}

// tryItExamples are the banner's commands against the gateway at u. The
// demo traffic (-demo-traffic) uses other API keys and another client
// address, so it never spends these examples' tokens.
func tryItExamples(u string) []example {
	return []example{
		{"curl -i -H 'x-api-key: k1' " + u + "/hello", "200 with RateLimit headers",
			regexp.MustCompile(`(?is)^HTTP/1\.1 200 .*\bratelimit-policy: `)},
		{"for i in $(seq 7); do curl -s -o /dev/null -w '%{http_code} ' -H 'x-api-key: k2' " + u + "/; done; echo",
			"free tier, burst 5 at 1/s: 200 x5, then 429 (a token comes back each second)",
			regexp.MustCompile(`^(200 ){5}(200 |429 )*429 (200 |429 )*\n$`)},
		{"curl -s -o /dev/null -w '%{http_code} ' -H 'x-api-key: k3' -H 'x-request-weight: 5' " + u + "/; curl -s -D - -o /dev/null -H 'x-api-key: k3' " + u + "/",
			"the first request costs 5 tokens, so the second is a 429 with Retry-After",
			regexp.MustCompile(`(?is)^200 HTTP/1\.1 429 .*\bretry-after: \d+`)},
		{"curl -i -H 'x-api-key: k4' -H 'x-plan: enterprise' " + u + "/", "enterprise tier (burst 200): 200",
			regexp.MustCompile(`(?i)^HTTP/1\.1 200 `)},
		{"for i in $(seq 15); do curl -s -o /dev/null -w '%{http_code} ' " + u + "/ip/x; done; echo",
			"per client address, burst 10 at 1/s: 200 x10, then 429 (a token comes back each second)",
			regexp.MustCompile(`^(200 ){10}(200 |429 )*429 (200 |429 )*\n$`)},
		{"for i in $(seq 4); do curl -s -o /dev/null -w '%{http_code} ' -H 'x-api-key: k5' -d '{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}' " + u + "/v1/chat/completions; done; echo",
			"LLM tokens (50, refilled at 2/s) charged from each answer's usage (20 tokens): 200 x3, the third into debt, then 429",
			regexp.MustCompile(`^200 200 200 429 \n$`)},
	}
}

// printTryIt prints where the gateway runs and, for the demo policy,
// commands a new user can paste to see the limiter work.
func printTryIt(w io.Writer, gw *Gateway, config []byte) {
	u := gw.URL()
	lines := []string{
		"Sluice development gateway is running: " + u,
		"  upstream: " + gw.upstream.String() + "   " + configSource(gw.opts),
		"",
	}
	if isDemoConfig(config) {
		lines = append(lines, "Try it (the demo policy: free tier per x-api-key; enterprise tier with x-plan: enterprise; /ip/ limited per client address;"+
			" /v1/chat/completions, an OpenAI-like demo API, limited by the tokens its answers report):")
		for _, e := range tryItExamples(u) {
			lines = append(lines, "  "+e.cmd, "      # "+e.says)
		}
		lines = append(lines, "")
	}
	lines = append(lines, "Ctrl-C to stop.")
	fmt.Fprintln(w, strings.Join(lines, "\n"))
}

// configSource says where the policy comes from and how to change it live.
func configSource(o Options) string {
	if o.XDS != "" {
		return "policy: from the admin over ECDS at " + o.XDS + " (edit it in the dashboard: applies live, buckets kept)"
	}
	return "config: " + o.ConfigPath + " (edit it: reloads live, buckets kept)"
}
