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
	gw.demo = &http.Server{Handler: http.HandlerFunc(echo), ReadHeaderTimeout: 5 * time.Second}
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
		lines = append(lines, "Try it (the demo policy: free tier per x-api-key; enterprise tier with x-plan: enterprise; /ip/ limited per client address):")
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
