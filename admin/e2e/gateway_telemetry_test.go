package e2e

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/httpapi"
	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/admin/store"
	"github.com/sluice-rl/sluice/admin/telemetry"
	"github.com/sluice-rl/sluice/plugin/wasmhost"
	"github.com/sluice-rl/sluice/plugin/wasmhost/netcall/netcalltest"
)

const (
	e2eAdminToken = "admin-token-0123456789abcdef0123"
	e2eTelToken   = "telemetry-token-0123456789abcdef"
)

// e2eConfig: an enforce rule per API key (masked in telemetry) and a shadow
// rule per client address.
const e2eConfig = `{"telemetry": {"cluster": "sluice_admin", "token": "` + e2eTelToken + `"},
  "policies": [
    {"name": "keys", "rules": [{"name": "apikey", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
      "algorithm_config": {"tokens_per_second": 0.001, "burst": 3}}]},
    {"name": "ips", "rules": [{"name": "perip", "limit_keys": ["ip:address"], "mode": "shadow", "algorithm": "token_bucket",
      "algorithm_config": {"tokens_per_second": 0.001, "burst": 5}}]}]}`

// adminServer is the real admin handler (store, policies, auth, telemetry)
// on a loopback listener.
func adminServer(t *testing.T) (*httptest.Server, *telemetry.State) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc := policies.New(st, nil, nil)
	if _, err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	am, _, err := auth.Setup(ctx, st, e2eAdminToken)
	if err != nil {
		t.Fatal(err)
	}
	tokens, _, err := telemetry.SetupTokens(ctx, st, e2eTelToken)
	if err != nil {
		t.Fatal(err)
	}
	state := telemetry.NewState(telemetry.Options{})
	h, err := httpapi.New(httpapi.Config{Policies: svc, Auth: am, Telemetry: &httpapi.Telemetry{State: state, Tokens: tokens}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, state
}

// TestTelemetryEndToEnd: three worker VMs report through the gateway's
// callout handler to a real admin on loopback; the admin's view matches the
// traffic sent and the plugin's own metrics exactly.
func TestTelemetryEndToEnd(t *testing.T) {
	srv, state := adminServer(t)
	const vms = 3
	h, clock, calls := netcalltest.Host(t, e2eConfig, vms, map[string]string{"sluice_admin": srv.URL})

	keys := []string{"sk_live_aaaaaaaaaaaa1", "sk_live_bbbbbbbbbbbb2"}
	rejected := map[string]int{}
	for i := 0; i < 14; i++ {
		key := keys[i%2]
		res, err := h.VM(i%vms).HTTP(context.Background(), &wasmhost.Request{
			Headers:    []wasmhost.Header{{":path", "/"}, {"x-api-key", key}},
			Properties: wasmhost.Properties{"source.address": []byte("10.9.9.9:1")},
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Rejected {
			rejected[key]++
		}
	}
	if rejected[keys[0]] != 4 || rejected[keys[1]] != 4 {
		t.Fatalf("rejected %v, want 4 per key", rejected)
	}
	netcalltest.TickAndWait(t, h, clock, calls, vms)
	netcalltest.TickAndWait(t, h, clock, calls, vms) // a second report per VM: deltas of zero

	if v, _ := h.Metric("sluice.telemetry.dropped"); v != 0 {
		t.Fatalf("%d reports dropped", v)
	}
	ov := state.Overview(time.Now(), telemetry.OverviewOptions{})
	got := map[string]telemetry.Counts{}
	for _, r := range ov.Rules {
		got[r.Name] = r.Total
	}
	for _, rule := range []string{"apikey", "perip"} {
		var want telemetry.Counts
		want[telemetry.Allowed], _ = h.Metric("sluice.rule." + rule + ".allowed")
		want[telemetry.Rejected], _ = h.Metric("sluice.rule." + rule + ".rejected")
		want[telemetry.ShadowRejected], _ = h.Metric("sluice.rule." + rule + ".shadow_rejected")
		want[telemetry.FailOpen], _ = h.Metric("sluice.rule." + rule + ".fail_open")
		if got[rule] != want {
			t.Errorf("rule %s: admin totals %v, plugin metrics %v", rule, got[rule], want)
		}
	}
	if c := got["apikey"]; c[telemetry.Allowed] != 6 || c[telemetry.Rejected] != 8 {
		t.Errorf("apikey totals %v, want 6 allowed and 8 rejected", c)
	}
	if len(ov.Nodes) != 1 || ov.Nodes[0].ID != "gw-1" || ov.Nodes[0].VMs != vms || ov.Nodes[0].Dropped != 0 {
		t.Errorf("nodes %+v", ov.Nodes)
	}
	// The throttled key is found by its clear value (as a candidate: the
	// admin sees only the masked form, "sk_l…#<FNV-1a 64 of the value, low
	// 32 bits>").
	hf := fnv.New64a()
	hf.Write([]byte(keys[0]))
	masked := fmt.Sprintf("header:x-api-key=sk_l…#%08x", uint32(hf.Sum64()))
	found, _ := state.Search(time.Now(), keys[0], 10)
	ok := false
	for _, k := range found {
		if strings.Contains(k.Identity, keys[0]) {
			t.Errorf("clear key in the admin: %+v", k)
		}
		if k.Identity == masked && k.Rule == "apikey" && k.Total == 4 && k.Tokens == 0 && k.Burst == 3 {
			ok = true
		}
	}
	if !ok {
		t.Errorf("search %q: %+v, want %s with 4 rejects", keys[0], found, masked)
	}
}

// TestTelemetryAdminDown: with the admin answering 401 (wrong token) or
// down, traffic is decided exactly as without telemetry, and every report
// is dropped and counted.
func TestTelemetryAdminDown(t *testing.T) {
	srv, _ := adminServer(t)
	cfg := strings.Replace(e2eConfig, e2eTelToken, "wrong-token-0123456789abcdef0000", 1)
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()
	for name, url := range map[string]string{"unauthorized": srv.URL, "down": downURL} {
		t.Run(name, func(t *testing.T) {
			h, clock, calls := netcalltest.Host(t, cfg, 2, map[string]string{"sluice_admin": url})
			allowed := 0
			for round := 0; round < 3; round++ {
				for i := 0; i < 4; i++ {
					res, err := h.VM(i%2).HTTP(context.Background(), &wasmhost.Request{
						Headers:    []wasmhost.Header{{":path", "/"}, {"x-api-key", "k-123456789"}},
						Properties: wasmhost.Properties{"source.address": []byte("10.9.9.9:1")},
					})
					if err != nil {
						t.Fatal(err)
					}
					if !res.Rejected {
						allowed++
					}
				}
				netcalltest.TickAndWait(t, h, clock, calls, 2)
			}
			if allowed != 3 {
				t.Errorf("allowed %d, want 3 (the burst)", allowed)
			}
			if v, _ := h.Metric("sluice.telemetry.dropped"); v != 6 {
				t.Errorf("dropped %d, want 6", v)
			}
		})
	}
}
