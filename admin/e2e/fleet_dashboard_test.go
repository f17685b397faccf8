package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/admin/fleet"
	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/plugin/wasmhost/wasmtest"
)

// The policy of the simulated fleet: two global rules, local share when
// the rate limit service is unreachable.
const fleetDashPolicy = `{
  "fleet": {"cluster": "sluice_rls", "on_backend_down": "local_share"},
  "policies": [{"name": "api", "rules": [
    {"name": "api-global", "scope": "global", "limit_keys": ["header:x-api-key"],
     "algorithm": "token_bucket", "algorithm_config": {"tokens_per_second": 200, "burst": 400}},
    {"name": "tenant-global", "scope": "global", "limit_keys": ["header:x-tenant"],
     "algorithm": "token_bucket", "algorithm_config": {"tokens_per_second": 50, "burst": 100}}]}]
}`

var fleetDashRules = []string{"api-global", "tenant-global"}

// TestBrowserFleetDashboardLive: the admin serves the RLS (real Redis) and
// receives telemetry reports with the plugins' fleet view (simulated: the
// wire formats of docs/fleet.md and docs/telemetry.md). Three nodes lease
// from the RLS over gRPC; two report their fleet view. A real Chromium
// shows the Global rules section merging both, and when edge-2's reports
// flip to "backend down, fallback active" (and it stops calling the RLS),
// the section shows edge-2 in fallback, highlighted with its mode, without
// a reload. It saves fleet-dashboard.png (SLUICE_UPDATE_SCREENSHOTS=1:
// docs/img/fleet-dashboard.png).
func TestBrowserFleetDashboardLive(t *testing.T) {
	chromium := chromiumPath(t)
	redis := fleettest.StartRedis(t)
	root := wasmtest.ModuleRoot(t)
	adminBin := filepath.Join(t.TempDir(), "ratelimit-admin")
	buildAdmin(t, root, adminBin)
	deadline := time.Now().Add(40 * time.Second)

	rlsAddr := "127.0.0.1:" + strconv.Itoa(fleettest.FreePort(t))
	admin := start(t, "admin", root, adminBin,
		[]string{"-listen", "127.0.0.1:0", "-xds-listen", "off", "-data-dir", t.TempDir(), "-rls-listen", rlsAddr, "-redis-addrs", redis.Addr},
		[]string{"SLUICE_ADMIN_TOKEN=" + token, "SLUICE_TELEMETRY_TOKEN=" + telemetryToken, "SLUICE_METRICS_LISTEN="},
		regexp.MustCompile(`dashboard (http://\S+)/\s+xDS`))
	adminURL := admin[1]
	saveBody, _ := json.Marshal(map[string]any{"base_version": 1, "message": "global rules", "author": "e2e", "policy": json.RawMessage(fleetDashPolicy)})
	if resp := apiDo(t, "POST", adminURL+"/api/v1/policy", token, saveBody); resp.StatusCode != http.StatusCreated {
		t.Fatalf("saving the policy: %d", resp.StatusCode)
	}
	h := fnv.New64a()
	h.Write(policyJSON(t, adminURL))
	sim := &fleetSim{url: adminURL, rls: rlsAddr, hash: fmt.Sprintf("%016x", h.Sum64()), done: make(chan struct{})}
	ctx, stop := context.WithCancel(context.Background())
	go sim.run(ctx, t)
	defer func() { stop(); <-sim.done }()

	b := openBrowser(t, chromium, "fleet-dashboard")
	run, eval := b.run, b.eval
	row := func(rule, node string) string {
		return fmt.Sprintf(`#fleet article[data-rule="%s"] tr[data-node="%s"]`, rule, node)
	}
	poll := func(expr string) chromedp.Action[chromedp.Void] {
		return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(12*time.Second), chromedp.WithPollingInterval(100*time.Millisecond))
	}

	// Both views: edge-1 with its lease held and its grants, edge-3 with
	// grants only (no fleet telemetry), every node healthy.
	run("log in and see both views", append(loginSteps(adminURL+"/login", "e2e-ops"),
		chromedp.WaitVisible(chromedp.ID("dash-live")),
		poll(fmt.Sprintf(`(() => {
			const q = s => document.querySelector(s);
			const e1 = q('%s'), e2 = q('%s'), e3 = q('%s');
			return e1 && e2 && e3 && e2.dataset.fallback === "false" &&
				e1.querySelector("td.held").textContent.includes("pools") &&
				e3.querySelector("td.held").textContent === "—" &&
				q('#fleet [data-health="up"]') !== null;
		})()`, row("api-global", "edge-1"), row("api-global", "edge-2"), row("api-global", "edge-3"))))...,
	)
	eval(`(window.__sluiceMark = "m" + Math.random())`)
	mark := eval(`window.__sluiceMark`)
	healthyBg := eval(fmt.Sprintf(`getComputedStyle(document.querySelector('%s td')).backgroundColor`, row("api-global", "edge-2")))

	// edge-2 loses the backend: its next reports say so, and the section
	// follows without a reload.
	sim.down.Store(true)
	run("edge-2 flips to fallback",
		poll(fmt.Sprintf(`(() => {
			const r = document.querySelector('%s');
			return r !== null && r.dataset.fallback === "true" && r.classList.contains("fallback") &&
				r.querySelector("td.state").textContent.includes("fallback: local share (1/3 of the limit)") &&
				r.querySelector("td.backend").textContent.includes("down");
		})()`, row("api-global", "edge-2"))),
		poll(`document.querySelector('#fleet [data-nodes-fallback="1"]') !== null && document.querySelector('#fleet [data-nodes-down="1"]') !== null`),
	)
	if got := eval(`window.__sluiceMark`); got != mark {
		t.Errorf("the page was reloaded (mark %q, want %q)", got, mark)
	}
	if got := eval(`document.getElementById("dash-live").dataset.transport`); got != "events" {
		t.Errorf("the updates came by %q, want server-sent events", got)
	}
	fallbackBg := eval(fmt.Sprintf(`getComputedStyle(document.querySelector('%s td')).backgroundColor`, row("api-global", "edge-2")))
	if fallbackBg == healthyBg {
		t.Errorf("edge-2's row is not highlighted in fallback (background %s, as when healthy)", fallbackBg)
	}
	if got := eval(fmt.Sprintf(`document.querySelector('%s').dataset.fallback`, row("api-global", "edge-1"))); got != "false" {
		t.Errorf("edge-1 in fallback too: %s", got)
	}
	if got := eval(`document.querySelector('#fleet article[data-rule="api-global"]').classList.contains("has-fallback") ? "yes" : "no"`); got != "yes" {
		t.Error("the rule's card does not show that a node is in fallback")
	}

	// The section as a picture, after a few more seconds of grants.
	for time.Until(deadline) > 10*time.Second && sim.seconds() < 8 {
		time.Sleep(250 * time.Millisecond)
	}
	b.screenshotOf("#fleet", "fleet-dashboard", "fleet-dashboard.png")

	// Prometheus carries the nodes' view too.
	resp := apiDo(t, "GET", adminURL+"/metrics", token, nil)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`sluice_fleet_fallback_active{node="edge-2",rule="api-global"} 1`,
		`sluice_fleet_plugin_backend_up{node="edge-2"} 0`, `sluice_fleet_plugin_backend_up{node="edge-1"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if time.Now().After(deadline) {
		t.Errorf("the fleet dashboard browser test took longer than its 40 s budget")
	}
}

// fleetSim plays three nodes in fleet mode: every 500 ms each leases
// tokens from the admin's RLS over gRPC (edge-2 stops once down), and
// edge-1 and edge-2 report their fleet view (edge-3 runs a plugin without
// fleet telemetry).
type fleetSim struct {
	url, rls, hash string
	down           atomic.Bool // edge-2 lost the backend
	done           chan struct{}

	mu    sync.Mutex
	ticks int
}

var fleetNodes = []string{"edge-1", "edge-2", "edge-3"}

func (s *fleetSim) run(ctx context.Context, t *testing.T) {
	defer close(s.done)
	conn, err := grpc.NewClient(s.rls, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Errorf("rls client: %v", err)
		return
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	start := time.Now().UnixMilli()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for n := 1; ; n++ {
		for i, node := range fleetNodes {
			down := node == "edge-2" && s.down.Load()
			if !down {
				s.lease(ctx, client, node, uint64(10*(i+1)+n%7))
			}
			if node != "edge-3" {
				s.report(t, node, start, uint64(n), down, i)
			}
		}
		s.mu.Lock()
		s.ticks = n
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// lease asks the RLS for tokens of both rules, as the plugin's sync does.
func (s *fleetSim) lease(ctx context.Context, c rlsv3.RateLimitServiceClient, node string, tokens uint64) {
	req := &rlsv3.RateLimitRequest{Domain: "sluice"}
	for _, rule := range fleetDashRules {
		req.Descriptors = append(req.Descriptors, &ratelimitv3.RateLimitDescriptor{
			Entries:    []*ratelimitv3.RateLimitDescriptor_Entry{{Key: fleet.KeyRule, Value: rule}, {Key: fleet.KeyID, Value: node + "-key"}},
			HitsAddend: wrapperspb.UInt64(tokens),
		})
	}
	cctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "x-sluice-node", node), time.Second)
	defer cancel()
	c.ShouldRateLimit(cctx, req) // an error shows as missing grants; the assertions catch it
}

func (s *fleetSim) report(t *testing.T, node string, startMS int64, seq uint64, down bool, i int) {
	var counters, fleetRules []map[string]any
	for j, rule := range fleetDashRules {
		counters = append(counters, map[string]any{"rule": rule, "allowed": seq * 40, "rejected": 0, "shadow_rejected": 0, "fail_open": 0})
		lease := float64(12*(i+1)+j*5) + float64(seq%4)*1.5
		if down {
			lease = 0 // the leases ran out; the pools are on their local share
		}
		fleetRules = append(fleetRules, map[string]any{"rule": rule, "lease_tokens": lease, "pools": 3 + i + j, "fallback_active": down})
	}
	body, _ := json.Marshal(map[string]any{
		"v": 1, "node": node, "vm": fmt.Sprintf("%02x", i+1), "vm_start_ms": startMS, "seq": seq, "sent_at_ms": time.Now().UnixMilli(),
		"interval_ms": 500, "config_hash": s.hash, "rules": counters,
		"fleet": map[string]any{"backend_healthy": !down, "fleet_size": 3, "rules": fleetRules},
	})
	postTelemetry(t, s.url, body)
}

func (s *fleetSim) seconds() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ticks / 2
}
