package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/poll"
	"github.com/sluice-rl/sluice/plugin/wasmhost"
	"github.com/sluice-rl/sluice/plugin/wasmhost/wasmtest"
)

const enforceConfig = `{"rules": [{"name": "per-ip", "limit_keys": ["ip:address"],
  "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 3}}]}`

const shadowConfig = `{"mode": "shadow", "rules": [{"name": "per-ip", "limit_keys": ["ip:address"],
  "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 3}}]}`

// upstream counts the requests that reach it and echoes the shadow marker.
type upstream struct {
	hits   atomic.Int64
	shadow atomic.Value // last x-sluice-shadow header seen
	srv    *httptest.Server
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.shadow.Store("")
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		u.shadow.Store(r.Header.Get("X-Sluice-Shadow"))
		w.Header().Set("X-Upstream", "yes")
		io.WriteString(w, "hello from upstream")
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// logBuffer collects the gateway's log for a test to read.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startGateway(t *testing.T, upstreamURL, config string) (*Gateway, string, *logBuffer) {
	t.Helper()
	return startGatewayWith(t, "./plugin", upstreamURL, config)
}

// startGatewayWith starts a gateway running the module built from pkg
// ("./plugin", or a test module).
func startGatewayWith(t *testing.T, pkg, upstreamURL, config string) (*Gateway, string, *logBuffer) {
	t.Helper()
	dir := t.TempDir()
	wasmPath := filepath.Join(dir, "ratelimit.wasm")
	if err := os.WriteFile(wasmPath, wasmtest.Build(t, pkg), 0o644); err != nil {
		t.Fatal(err)
	}
	configPath := filepath.Join(dir, "config.json")
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	gw, err := Start(context.Background(), Options{
		Listen:         "127.0.0.1:0",
		Upstream:       upstreamURL,
		ConfigPath:     configPath,
		WasmPath:       wasmPath,
		VMs:            2,
		ReloadInterval: 20 * time.Millisecond,
	}, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := gw.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return gw, configPath, logs
}

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	return getWith(t, url)
}

// getWith sends a GET with the given header name/value pairs.
func getWith(t *testing.T, url string, headers ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func TestGatewayProxiesThenRejectsWith429(t *testing.T) {
	up := newUpstream(t)
	gw, _, _ := startGateway(t, up.srv.URL, enforceConfig)

	for i := 0; i < 3; i++ {
		resp, body := get(t, gw.URL()+"/x?i="+strconv.Itoa(i))
		if resp.StatusCode != 200 || body != "hello from upstream" || resp.Header.Get("X-Upstream") != "yes" {
			t.Fatalf("request %d: got %d %q, want the upstream's 200", i, resp.StatusCode, body)
		}
		if got, want := resp.Header.Get("RateLimit"), `"per-ip";r=`+strconv.Itoa(2-i)+`;`; !strings.HasPrefix(got, want) {
			t.Errorf("request %d: RateLimit %q, want it to start %s", i, got, want)
		}
	}
	resp, body := get(t, gw.URL()+"/x")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("4th request: status %d, want 429", resp.StatusCode)
	}
	if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("Retry-After %q, want whole seconds >= 1", resp.Header.Get("Retry-After"))
	}
	var payload map[string]any
	if err := json.Unmarshal([]byte(body), &payload); err != nil {
		t.Errorf("429 body %q is not JSON: %v", body, err)
	}
	if got := up.hits.Load(); got != 3 {
		t.Errorf("upstream saw %d requests, want 3 (the 429 must not be proxied)", got)
	}
}

func TestGatewayReloadKeepsBuckets(t *testing.T) {
	up := newUpstream(t)
	gw, configPath, logs := startGateway(t, up.srv.URL, enforceConfig)
	for i := 0; i < 3; i++ {
		get(t, gw.URL())
	}
	if resp, _ := get(t, gw.URL()); resp.StatusCode != 429 {
		t.Fatalf("bucket not empty after the burst: status %d", resp.StatusCode)
	}

	// Shadow mode lets the request through and marks it upstream: proof the
	// new configuration is in force.
	writeConfig(t, configPath, shadowConfig)
	poll.Until(t, "shadow config to apply", func() bool {
		resp, _ := get(t, gw.URL())
		return resp.StatusCode == 200
	})
	if got := up.shadow.Load().(string); !strings.Contains(got, "per-ip") {
		t.Errorf("upstream shadow marker %q, want it to name rule per-ip", got)
	}

	// Back to enforce: the bucket is still empty (not reset to a full burst).
	writeConfig(t, configPath, enforceConfig)
	poll.Until(t, "enforce config to apply", func() bool {
		resp, _ := get(t, gw.URL())
		return resp.StatusCode == 429
	})
	for i := 0; i < 3; i++ {
		if resp, _ := get(t, gw.URL()); resp.StatusCode != 429 {
			t.Fatalf("after reload request %d got %d: the reload reset the bucket", i, resp.StatusCode)
		}
	}

	// A configuration the plugin rejects is seen, refused with the
	// plugin's reason, and leaves the old one in force.
	writeConfig(t, configPath, `{"rules": [{"name": "per-ip", "algorithm": "nope"}]}`)
	// The watcher may first see the file half written (refused as empty):
	// wait for the refusal of the whole file, which names the algorithm.
	poll.Until(t, "the gateway to log the refused configuration naming the bad algorithm", func() bool {
		l := logs.String()
		return strings.Contains(l, "plugin rejected the new configuration") && strings.Contains(l, "nope")
	})
	if resp, _ := get(t, gw.URL()); resp.StatusCode != 429 {
		t.Fatalf("after a rejected config: status %d, want the old config's 429", resp.StatusCode)
	}
}

func TestParseOptionsErrorsNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-vms", "0"}, "-vms"},
		{[]string{"-reload-interval", "-1s"}, "-reload-interval"},
		{[]string{"stray"}, "unexpected argument"},
		{[]string{"-demo-traffic", "5000"}, "-demo-traffic"},
	} {
		_, err := parseOptions(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseOptions(%v) = %v, want an error naming %q", tc.args, err, tc.want)
		}
	}
	t.Setenv("SLUICE_VMS", "many")
	if _, err := parseOptions(nil); err == nil || !strings.Contains(err.Error(), "SLUICE_VMS") {
		t.Errorf("bad SLUICE_VMS: got %v, want an error naming it", err)
	}
}

func TestStartRejectsBadUpstream(t *testing.T) {
	_, err := Start(context.Background(), Options{Upstream: "ftp://x", WasmPath: os.DevNull, ConfigPath: os.DevNull},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "-upstream") {
		t.Fatalf("got %v, want an error naming -upstream", err)
	}
}

func writeConfig(t *testing.T, path, config string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestPluginLogLinesKeepTheirLevel(t *testing.T) {
	var out logBuffer
	f := pluginLog(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})))
	for _, e := range []wasmhost.LogEntry{
		{VM: 0, Level: wasmhost.LogLevelTrace, Message: "t"},
		{VM: 0, Level: wasmhost.LogLevelInfo, Message: "i"},
		{VM: 1, Level: wasmhost.LogLevelWarn, Message: "w\n"},
		{VM: 1, Level: wasmhost.LogLevelCritical, Message: "c"},
	} {
		f(e)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{"level=DEBUG msg=t from=plugin vm=0", "level=INFO msg=i from=plugin vm=0", "level=WARN msg=w from=plugin vm=1", "level=ERROR msg=c from=plugin vm=1"}
	if len(lines) != len(want) {
		t.Fatalf("log:\n%s", out.String())
	}
	for i, w := range want {
		if !strings.HasSuffix(lines[i], w) {
			t.Errorf("line %d %q, want it to end with %q", i, lines[i], w)
		}
	}
}

// TestGatewayChargesCostsReportedByTheUpstream: a token bucket charged from
// the upstream's x-tokens-used header and a daily quota charged from its
// trailer go into debt after the responses and then refuse with 429.
func TestGatewayChargesCostsReportedByTheUpstream(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Tenant") != "" {
			w.Header().Set("Trailer", "X-Tokens-Used")
			io.WriteString(w, "streamed answer")
			w.Header().Set("X-Tokens-Used", "700")
			return
		}
		w.Header().Set("X-Tokens-Used", "60")
		io.WriteString(w, "answer")
	}))
	t.Cleanup(up.Close)
	gw, _, _ := startGateway(t, up.URL, `{"policies": [
	  {"name": "a", "rules": [{"name": "tokens", "limit_keys": ["header:x-user"], "algorithm": "token_bucket",
	    "algorithm_config": {"rps": 0.001, "burst": 100, "cost_source": "response_header:x-tokens-used"}}]},
	  {"name": "b", "rules": [{"name": "daily", "limit_keys": ["header:x-tenant"], "algorithm": "quota",
	    "algorithm_config": {"limit": 1000, "period": "day", "time_zone": "Europe/Berlin", "cost_source": "response_trailer:x-tokens-used"}}]}]}`)

	for i, want := range []string{"40", "0"} { // 100 - 60, then 40 - 60 = -20
		resp, body := getWith(t, gw.URL()+"/chat", "X-User", "u1")
		if resp.StatusCode != 200 || body != "answer" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
		if got := resp.Header.Get("RateLimit"); !strings.Contains(got, ";r="+want+";") {
			t.Errorf("request %d: RateLimit %q after the charge, want r=%s", i, got, want)
		}
	}
	if resp, _ := getWith(t, gw.URL()+"/chat", "X-User", "u1"); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("in debt: status %d, want 429", resp.StatusCode)
	}

	for i := 0; i < 2; i++ { // 700, then 1400 (debt 400 of the default 1000)
		resp, body := getWith(t, gw.URL()+"/stream", "X-Tenant", "t1")
		if resp.StatusCode != 200 || body != "streamed answer" || resp.Trailer.Get("X-Tokens-Used") != "700" {
			t.Fatalf("trailer request %d: %d %q, trailer %q", i, resp.StatusCode, body, resp.Trailer.Get("X-Tokens-Used"))
		}
	}
	resp, _ := getWith(t, gw.URL()+"/stream", "X-Tenant", "t1")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("X-RateLimit-Reason") != "quota_exceeded" {
		t.Fatalf("over the daily quota: status %d reason %q", resp.StatusCode, resp.Header.Get("X-RateLimit-Reason"))
	}
}

// Every request goes to the upstream cluster envoy.yaml names, so a rule
// on "cluster" applies through the gateway as through Envoy.
func TestGatewayRequestsGoToTheUpstreamCluster(t *testing.T) {
	up := newUpstream(t)
	gw, _, _ := startGateway(t, up.srv.URL, `{"rules": [{"name": "backend", "match": {"cluster": "`+UpstreamCluster+`"},
	  "limit_keys": ["cluster"], "algorithm": "fixed_window", "algorithm_config": {"limit": 2, "window_seconds": 3600}}]}`)
	for i := range 2 {
		if resp, _ := get(t, gw.URL()+"/x"); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d, want 200", i, resp.StatusCode)
		}
	}
	if resp, body := get(t, gw.URL()+"/y"); resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, `"rule":"backend"`) {
		t.Fatalf("third request to the cluster: %d %s, want the cluster rule's 429", resp.StatusCode, body)
	}
}

func TestGatewayNumbersEachConnection(t *testing.T) {
	up := newUpstream(t)
	gw, _, _ := startGateway(t, up.srv.URL, `{"rules": [{"name": "per-connection", "limit_keys": ["connection"],
	  "algorithm": "fixed_window", "algorithm_config": {"limit": 2, "window_seconds": 3600}}]}`)
	// A client keeps its connection alive: its requests share a bucket.
	status := func(c *http.Client) int {
		t.Helper()
		resp, err := c.Get(gw.URL() + "/x")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	first := &http.Client{Transport: &http.Transport{}}
	for i := range 2 {
		if got := status(first); got != 200 {
			t.Fatalf("request %d on the first connection: %d, want 200", i+1, got)
		}
	}
	if got := status(first); got != http.StatusTooManyRequests {
		t.Fatalf("third request on the first connection: %d, want 429", got)
	}
	// Another connection from the same address has a bucket of its own.
	second := &http.Client{Transport: &http.Transport{}}
	if got := status(second); got != 200 {
		t.Fatalf("a second connection: %d, want 200", got)
	}
}
