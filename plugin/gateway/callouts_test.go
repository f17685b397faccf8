package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
	"github.com/sluice-rl/sluice/plugin/wasmhost/netcall/netcalltest"
)

func TestParseClusters(t *testing.T) {
	got, err := parseClusters([]string{"sluice_admin=http://127.0.0.1:9000", " b=https://x.example/base "})
	if err != nil || len(got) != 2 || got["sluice_admin"].Host != "127.0.0.1:9000" || got["b"].Path != "/base" {
		t.Fatalf("got %v, %v", got, err)
	}
	for _, bad := range [][]string{{"noequals"}, {"=http://x"}, {"a=ftp://x"}, {"a=http://"}, {"a=http://x", "a=http://y"}} {
		if _, err := parseClusters(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	t.Setenv("SLUICE_CLUSTERS", "a=http://127.0.0.1:1,b=http://127.0.0.1:2")
	o, err := parseOptions(nil)
	if err != nil || len(o.Clusters) != 2 {
		t.Fatalf("from the environment: %v %v", o.Clusters, err)
	}
	o, err = parseOptions([]string{"-cluster", "c=http://127.0.0.1:3", "-cluster", "d=http://127.0.0.1:4"})
	if err != nil || len(o.Clusters) != 2 || o.Clusters["c"] == nil || o.Clusters["d"] == nil {
		t.Fatalf("flags replace the environment: %v %v", o.Clusters, err)
	}
	if _, err := parseOptions([]string{"-cluster", "bad"}); err == nil {
		t.Fatal("bad -cluster accepted")
	}
}

// telemetryPluginConfig reports to cluster "admin" every second.
const telemetryPluginConfig = `{"telemetry": {"cluster": "admin", "token": "tok-1", "path": "/api/v1/telemetry", "timeout_ms": 300},
  "rules": [{"name": "per-ip", "limit_keys": ["ip:address"], "algorithm": "token_bucket",
  "algorithm_config": {"rps": 0.001, "burst": 3}}]}`

type seenReport struct {
	Node           string `json:"node"`
	Seq            int    `json:"seq"`
	ReportsDropped int    `json:"reports_dropped"`
	Rules          []struct {
		Rule     string `json:"rule"`
		Allowed  int    `json:"allowed"`
		Rejected int    `json:"rejected"`
	} `json:"rules"`
}

func TestCalloutsDeliverReports(t *testing.T) {
	var mu sync.Mutex
	var got []seenReport
	status := http.StatusInternalServerError
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v1/telemetry" || r.Host != "sluice-admin" ||
			r.Header.Get("Authorization") != "Bearer tok-1" || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("request %s %s host %s headers %v", r.Method, r.URL, r.Host, r.Header)
		}
		var rep seenReport
		if err := json.NewDecoder(r.Body).Decode(&rep); err != nil {
			t.Errorf("body: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		got = append(got, rep)
		w.WriteHeader(status)
	}))
	defer srv.Close()
	h, clock, calls := netcalltest.Host(t, telemetryPluginConfig, 2, map[string]string{"admin": srv.URL})
	for i := 0; i < 5; i++ {
		if _, err := h.VM(i%2).HTTP(context.Background(), &wasmhost.Request{
			Headers:    []wasmhost.Header{{":path", "/"}},
			Properties: wasmhost.Properties{"source.address": []byte("10.1.1.1:1")},
		}); err != nil {
			t.Fatal(err)
		}
	}
	netcalltest.TickAndWait(t, h, clock, calls, 2) // answered 500: dropped
	mu.Lock()
	status = http.StatusNoContent
	mu.Unlock()
	netcalltest.TickAndWait(t, h, clock, calls, 2)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 4 {
		t.Fatalf("%d reports, want 4", len(got))
	}
	allowed, rejected := 0, 0
	for _, r := range got[2:] {
		if r.Node != "gw-1" || r.Seq != 2 || r.ReportsDropped != 1 || len(r.Rules) != 1 {
			t.Errorf("report %+v", r)
			continue
		}
		allowed += r.Rules[0].Allowed
		rejected += r.Rules[0].Rejected
	}
	if allowed != 3 || rejected != 2 {
		t.Errorf("allowed %d rejected %d, want 3 and 2", allowed, rejected)
	}
}

// TestCalloutsFailures: an unreachable cluster, a slow one (past the call's
// timeout) and an unknown one all deliver the failure callback.
func TestCalloutsFailures(t *testing.T) {
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(5 * time.Second):
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	for name, url := range map[string]string{"slow": slow.URL, "dead": deadURL} {
		t.Run(name, func(t *testing.T) {
			h, clock, calls := netcalltest.Host(t, telemetryPluginConfig, 1, map[string]string{"admin": url})
			start := time.Now()
			netcalltest.TickAndWait(t, h, clock, calls, 1)
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("took %v (timeout 300ms)", d)
			}
			if v, _ := h.Metric("sluice.telemetry.dropped"); v != 1 {
				t.Fatalf("dropped %d, want 1", v)
			}
		})
	}
	// Unknown to the handler (the host lists no such cluster: the dispatch
	// itself fails, as in Envoy).
	h, clock, _ := netcalltest.Host(t, strings.Replace(telemetryPluginConfig, `"admin"`, `"other"`, 1), 1, map[string]string{"admin": slow.URL})
	clock.Advance(time.Second)
	if err := h.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v, _ := h.Metric("sluice.telemetry.dropped"); v != 1 || len(h.PendingCalls()) != 0 {
		t.Fatalf("dropped %d pending %d", v, len(h.PendingCalls()))
	}
}
