package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	wasmfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/telemetry"
	"github.com/sluice-rl/sluice/admin/xds"
)

// push is one configuration an xDS server pushed: its resource version
// and the plugin configuration, as Envoy hands it to the plugin.
type push struct{ version, config string }

// watchPushes subscribes to an admin's ECDS like Envoy, ACKing every push.
func watchPushes(t *testing.T, addr string) <-chan push {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); conn.Close() })
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &core.Node{Id: "envoy-" + addr, Cluster: "test"}
	req := &discovery.DiscoveryRequest{Node: node, TypeUrl: xds.TypeURL, ResourceNames: []string{xds.DefaultResourceName}}
	if err := stream.Send(req); err != nil {
		t.Fatal(err)
	}
	pushes := make(chan push, 64)
	go func() {
		defer close(pushes)
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			pushes <- push{resp.GetVersionInfo(), pushedConfig(resp)}
			ack := &discovery.DiscoveryRequest{Node: node, TypeUrl: xds.TypeURL, ResourceNames: []string{xds.DefaultResourceName},
				VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}
			if stream.Send(ack) != nil {
				return
			}
		}
	}()
	return pushes
}

// pushedConfig unpacks the plugin configuration of an ECDS response.
func pushedConfig(resp *discovery.DiscoveryResponse) string {
	if len(resp.GetResources()) != 1 {
		return ""
	}
	var tec core.TypedExtensionConfig
	var w wasmfilter.Wasm
	var sv wrapperspb.StringValue
	if resp.GetResources()[0].UnmarshalTo(&tec) != nil || tec.GetTypedConfig().UnmarshalTo(&w) != nil ||
		w.GetConfig().GetConfiguration().UnmarshalTo(&sv) != nil {
		return ""
	}
	return sv.GetValue()
}

// waitPush waits for a push whose version starts with prefix.
func waitPush(t *testing.T, pushes <-chan push, prefix string, within time.Duration) push {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case p, ok := <-pushes:
			if !ok {
				t.Fatalf("the xDS stream ended before a version %s…", prefix)
			}
			if strings.HasPrefix(p.version, prefix) {
				return p
			}
		case <-timeout:
			t.Fatalf("no version %s… pushed within %v", prefix, within)
		}
	}
}

const resetReplicaPolicy = `{"mode":"enforce","rules":[{"name":"per-key","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":1,"burst":2}}]}`

// Two admin processes on one SQLite data directory: a reset made on one
// is pushed by the other within its follow poll, appended to the current
// version's JSON, and a node reporting the hash of those bytes is shown
// running that version.
func TestAResetOnOneAdminIsPushedByTheOther(t *testing.T) {
	dir := t.TempDir()
	port := func() string { return "127.0.0.1:" + strconv.Itoa(fleettest.FreePort(t)) }
	a := startAdminProcess(t, &replica{http: port(), xds: port(), stderr: &bytes.Buffer{}}, nil, "-data-dir", dir)
	b := startAdminProcess(t, &replica{http: port(), xds: port(), stderr: &bytes.Buffer{}}, nil, "-data-dir", dir)
	code, saved := a.call("POST", "/api/v1/policy", map[string]any{"base_version": 1, "policy": json.RawMessage(resetReplicaPolicy)})
	if code != http.StatusCreated {
		t.Fatalf("save: %d %v", code, saved)
	}
	pushes := watchPushes(t, b.xds)
	v2 := waitPush(t, pushes, "2", 5*time.Second)
	if v2.version != "2" {
		t.Fatalf("before any reset, version %q was pushed; want 2", v2.version)
	}

	code, reset := a.call("POST", "/api/v1/resets", map[string]any{"rule": "per-key", "key": "alice"})
	if code != http.StatusCreated {
		t.Fatalf("reset: %d %v", code, reset)
	}
	p := waitPush(t, pushes, "2+resets.", 3*time.Second)
	want := strings.TrimSuffix(v2.config, "}") + `,"resets":[{"id":"` + reset["id"].(string) + `","rule":"per-key","key":"alice"}]}`
	if p.config != want {
		t.Fatalf("the other admin pushed\n%s\nwant\n%s", p.config, want)
	}

	report := telemetry.Report{V: 1, Node: "envoy-b", VM: "vm1", VMStartMS: time.Now().UnixMilli(), Seq: 1, SentAtMS: time.Now().UnixMilli(),
		IntervalMS: 1000, ConfigHash: telemetry.ConfigHash([]byte(p.config)), Rules: []telemetry.RuleCounters{{Rule: "per-key", Allowed: 1}},
		Buckets: []telemetry.Bucket{}}
	body, _ := json.Marshal(report)
	req, _ := http.NewRequest("POST", "http://"+b.http+"/api/v1/telemetry", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer telemetry-token-0123456789")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("telemetry report: %d", resp.StatusCode)
	}
	_, ov := b.call("GET", "/api/v1/telemetry", nil)
	nodes, _ := ov["nodes"].([]any)
	if len(nodes) != 1 || nodes[0].(map[string]any)["version"] != float64(2) {
		t.Errorf("the node running version 2 with the reset is shown as %v; want version 2", nodes)
	}
}

// An admin that pushes nothing itself (-xds-listen off: the proxies get
// the policy from an exported Istio WasmPlugin or Envoy Gateway
// EnvoyExtensionPolicy) exports the recent resets with the version, so
// applying the manifest again after a reset delivers it.
func TestTheExportedManifestsCarryTheRecentResets(t *testing.T) {
	port := func() string { return "127.0.0.1:" + strconv.Itoa(fleettest.FreePort(t)) }
	a := startAdminProcess(t, &replica{http: port(), xds: "off", stderr: &bytes.Buffer{}}, nil)
	if code, saved := a.call("POST", "/api/v1/policy", map[string]any{"base_version": 1, "policy": json.RawMessage(resetReplicaPolicy)}); code != http.StatusCreated {
		t.Fatalf("save: %d %v", code, saved)
	}
	exports := map[string]string{"istio": "/api/v1/istio/wasmplugin?format=json", "envoy gateway": "/api/v1/envoygateway/extensionpolicy?format=json"}
	manifest := func(path string) string {
		code, m := a.call("GET", path, nil)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %v", path, code, m)
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	for name, path := range exports {
		if m := manifest(path); strings.Contains(m, "resets") || !strings.Contains(m, "per-key") {
			t.Errorf("%s before any reset: %s", name, m)
		}
	}
	code, reset := a.call("POST", "/api/v1/resets", map[string]any{"rule": "per-key", "key": "alice"})
	if code != http.StatusCreated {
		t.Fatalf("reset: %d %v", code, reset)
	}
	code, all := a.call("POST", "/api/v1/resets", map[string]any{"rule": "per-key", "all": true})
	if code != http.StatusCreated {
		t.Fatalf("reset of every identity: %d %v", code, all)
	}
	want := `"resets":[{"id":"` + reset["id"].(string) + `","key":"alice","rule":"per-key"},{"all":true,"id":"` + all["id"].(string) + `","rule":"per-key"}]`
	for name, path := range exports {
		if m := manifest(path); !strings.Contains(m, want) {
			t.Errorf("%s after two resets:\n%s\nwant it to contain\n%s", name, m, want)
		}
	}
}
