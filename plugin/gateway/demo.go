package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
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

// printTryIt prints commands a new user can paste to see the limiter work.
func printTryIt(w io.Writer, gw *Gateway) {
	u := gw.URL()
	lines := []string{
		"Sluice development gateway is running: " + u,
		"  upstream: " + gw.upstream.String() + "   " + configSource(gw.opts),
		"",
		"Try it (the demo config: free tier per x-api-key, burst 5 at 1/s; enterprise burst 200; /ip/ limited per client address):",
		"  curl -i -H 'x-api-key: k1' " + u + "/hello                     # allowed: RateLimit headers",
		"  for i in $(seq 7); do curl -s -o /dev/null -w '%{http_code} ' -H 'x-api-key: k2' " + u + "/; done; echo   # 200 x5, then 429",
		"  curl -i -H 'x-api-key: k3' -H 'x-request-weight: 5' " + u + "/    # one request costs 5 tokens",
		"  curl -i -H 'x-api-key: k3' " + u + "/                             # ... so this one is a 429 with Retry-After",
		"  curl -i -H 'x-api-key: k4' -H 'x-plan: enterprise' " + u + "/      # enterprise tier",
		"  for i in $(seq 12); do curl -s -o /dev/null -w '%{http_code} ' " + u + "/ip/x; done; echo   # per-ip: 200 x10, then 429",
		"",
		"Ctrl-C to stop.",
	}
	fmt.Fprintln(w, strings.Join(lines, "\n"))
}

// configSource says where the policy comes from and how to change it live.
func configSource(o Options) string {
	if o.XDS != "" {
		return "policy: from the admin over ECDS at " + o.XDS + " (edit it in the dashboard: applies live, buckets kept)"
	}
	return "config: " + o.ConfigPath + " (edit it: reloads live, buckets kept)"
}
