package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	wasmfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/internal/poll"
	"github.com/sluice-rl/sluice/plugin/wasmhost/wasmtest"
)

// The gateway's bootstrap config: generous, under another rule name.
const bootstrapConfig = `{"rules": [{"name": "bootstrap", "limit_keys": ["ip:address"],
  "algorithm": "token_bucket", "algorithm_config": {"rps": 1000, "burst": 1000}}]}`

// Same rule as enforceConfig (same bucket), rejecting with 503 instead.
const enforce503Config = `{"reject_status": 503, "rules": [{"name": "per-ip", "limit_keys": ["ip:address"],
  "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 3}}]}`

const invalidConfig = `{"rules": [{"name": "per-ip", "limit_keys": ["ip:address"], "algorithm": "leaky_nope",
  "algorithm_config": {"rps": 1, "burst": 1}}]}`

// freeAddr returns a loopback address nobody listens on (for now).
func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

func startXDSGateway(t *testing.T, upstreamURL, xdsAddr string, mods ...func(*Options)) *Gateway {
	t.Helper()
	dir := t.TempDir()
	wasmPath := filepath.Join(dir, "ratelimit.wasm")
	if err := os.WriteFile(wasmPath, wasmtest.Build(t, "./plugin"), 0o644); err != nil {
		t.Fatal(err)
	}
	configPath := filepath.Join(dir, "bootstrap.json")
	if err := os.WriteFile(configPath, []byte(bootstrapConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := Options{
		Listen:         "127.0.0.1:0",
		Upstream:       upstreamURL,
		ConfigPath:     configPath,
		WasmPath:       wasmPath,
		VMs:            2,
		ReloadInterval: 20 * time.Millisecond,
		XDS:            xdsAddr,
		NodeID:         "gw-test",
		XDSMaxBackoff:  100 * time.Millisecond,
	}
	for _, m := range mods {
		m(&opts)
	}
	gw, err := Start(context.Background(), opts, slog.New(slog.NewTextHandler(io.Discard, nil)))
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
	// In xDS mode the file is the bootstrap only: editing it changes nothing.
	if err := os.WriteFile(configPath, []byte(invalidConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	return gw
}

func statusOf(t *testing.T, gw *Gateway) int {
	t.Helper()
	resp, _ := get(t, gw.URL()+"/")
	return resp.StatusCode
}

func TestXDSPolicyUpdatesFollowTheAdmin(t *testing.T) {
	up := newUpstream(t)
	addr := freeAddr(t)

	// The admin is not up yet: the gateway serves with its bootstrap config.
	gw := startXDSGateway(t, up.srv.URL, addr)
	for i := 0; i < 5; i++ {
		if got := statusOf(t, gw); got != 200 {
			t.Fatalf("bootstrap config, request %d: status %d, want 200", i, got)
		}
	}

	// The admin comes up with policy A: the gateway connects and applies it.
	adm := startAdmin(t, addr)
	adm.publish(t, 1, enforceConfig)
	adm.waitAcked(t, "gw-test", "1")
	if n := adm.node("gw-test"); !n.Connected || n.Cluster != "sluice-gateway" {
		t.Errorf("node status %+v, want connected in cluster sluice-gateway", n)
	}
	for i := 0; i < 3; i++ {
		if got := statusOf(t, gw); got != 200 {
			t.Fatalf("policy A, request %d: status %d, want 200 (burst 3)", i, got)
		}
	}
	if got := statusOf(t, gw); got != 429 {
		t.Fatalf("policy A, 4th request: status %d, want 429", got)
	}

	// Policy B, same rule in shadow mode: let through but marked, because
	// the bucket is still empty (a reset bucket would not mark it).
	adm.publish(t, 2, shadowConfig)
	adm.waitAcked(t, "gw-test", "2")
	up.shadow.Store("")
	if got := statusOf(t, gw); got != 200 {
		t.Fatalf("policy B (shadow): status %d, want 200", got)
	}
	if marker := up.shadow.Load().(string); !strings.Contains(marker, "per-ip") {
		t.Fatalf("policy B: shadow marker %q, want it to name per-ip: the update reset the bucket", marker)
	}

	// Policy C, enforcing with 503: still empty, rejected at once.
	adm.publish(t, 3, enforce503Config)
	adm.waitAcked(t, "gw-test", "3")
	if got := statusOf(t, gw); got != 503 {
		t.Fatalf("policy C: status %d, want 503 (bucket kept empty, new reject status)", got)
	}

	// An invalid policy: NACKed with the plugin's error, C stays in force.
	adm.publish(t, 4, invalidConfig)
	poll.Until(t, "the NACK of version 4", func() bool { return adm.node("gw-test").NackedVersion == "4" })
	n := adm.node("gw-test")
	if n.AckedVersion != "3" || !strings.Contains(n.NackError, "leaky_nope") {
		t.Errorf("after the invalid policy: %+v, want ACKed 3 and a NACK error naming the bad algorithm", n)
	}
	t.Logf("NACK error detail: %s", n.NackError)
	if got := statusOf(t, gw); got != 503 {
		t.Fatalf("after the NACK: status %d, want policy C's 503", got)
	}

	// The admin goes down: the gateway keeps serving with policy C.
	adm.stop()
	for i := 0; i < 5; i++ {
		if got := statusOf(t, gw); got != 503 {
			t.Fatalf("admin down, request %d: status %d, want policy C's 503", i, got)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// A new admin process on the same address: the gateway reconnects,
	// reports the version it runs, and takes the new policy, buckets intact.
	adm2 := startAdmin(t, addr)
	poll.Until(t, "the gateway to reconnect", func() bool { return adm2.node("gw-test").Connected })
	if got := adm2.node("gw-test").AckedVersion; got != "3" {
		t.Errorf("after reconnecting the gateway reports version %q, want 3 (what it runs)", got)
	}
	adm2.publish(t, 5, enforceConfig)
	adm2.waitAcked(t, "gw-test", "5")
	if got := statusOf(t, gw); got != 429 {
		t.Fatalf("policy 5 after the admin restart: status %d, want 429 (bucket still empty)", got)
	}
}

func TestPluginConfigurationExtraction(t *testing.T) {
	pack := func(t *testing.T, name string, configuration *anypb.Any) *anypb.Any {
		t.Helper()
		filter, err := anypb.New(&wasmfilter.Wasm{Config: &wasmv3.PluginConfig{
			Name:          name,
			Configuration: configuration,
			Vm: &wasmv3.PluginConfig_VmConfig{VmConfig: &wasmv3.VmConfig{
				Runtime: "envoy.wasm.runtime.v8",
				Code: &core.AsyncDataSource{Specifier: &core.AsyncDataSource_Local{
					Local: &core.DataSource{Specifier: &core.DataSource_Filename{Filename: "x.wasm"}}}},
			}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		res, err := anypb.New(&core.TypedExtensionConfig{Name: name, TypedConfig: filter})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	str, _ := anypb.New(wrapperspb.String(`{"a":1}`))
	byt, _ := anypb.New(wrapperspb.Bytes([]byte(`{"b":2}`)))
	st, _ := structpb.NewStruct(map[string]any{"c": 3})
	stAny, _ := anypb.New(st)
	intAny, _ := anypb.New(wrapperspb.Int64(5))

	for _, tc := range []struct {
		name      string
		resources []*anypb.Any
		want      string
		found     bool
		errHas    string
	}{
		{"string value", []*anypb.Any{pack(t, "r", str)}, `{"a":1}`, true, ""},
		{"bytes value", []*anypb.Any{pack(t, "r", byt)}, `{"b":2}`, true, ""},
		{"struct as JSON", []*anypb.Any{pack(t, "r", stAny)}, `{"c":3}`, true, ""},
		{"no configuration", []*anypb.Any{pack(t, "r", nil)}, ``, true, ""},
		{"other resource only", []*anypb.Any{pack(t, "other", str)}, ``, false, ""},
		{"picks its own", []*anypb.Any{pack(t, "other", byt), pack(t, "r", str)}, `{"a":1}`, true, ""},
		{"unsupported configuration", []*anypb.Any{pack(t, "r", intAny)}, ``, true, "Int64Value"},
		{"not a TypedExtensionConfig", []*anypb.Any{str}, ``, false, "TypedExtensionConfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, found, err := pluginConfiguration(tc.resources, "r")
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("err %v, want one mentioning %q", err, tc.errHas)
				}
				return
			}
			if err != nil || found != tc.found || string(got) != tc.want {
				t.Fatalf("got %q found=%v err=%v, want %q found=%v", got, found, err, tc.want, tc.found)
			}
		})
	}

	// Wrapped in a discovery Resource (as some servers send), and a filter
	// config Envoy's validation rejects (empty code filename).
	wrapped, _ := anypb.New(&discovery.Resource{Name: "r", Resource: pack(t, "r", str)})
	if got, _, found, err := pluginConfiguration([]*anypb.Any{wrapped}, "r"); err != nil || !found || string(got) != `{"a":1}` {
		t.Errorf("wrapped resource: %q %v %v", got, found, err)
	}
	badFilter, _ := anypb.New(&wasmfilter.Wasm{Config: &wasmv3.PluginConfig{Vm: &wasmv3.PluginConfig_VmConfig{VmConfig: &wasmv3.VmConfig{
		Code: &core.AsyncDataSource{Specifier: &core.AsyncDataSource_Local{
			Local: &core.DataSource{Specifier: &core.DataSource_Filename{Filename: ""}}}},
	}}}})
	bad, _ := anypb.New(&core.TypedExtensionConfig{Name: "r", TypedConfig: badFilter})
	if _, _, _, err := pluginConfiguration([]*anypb.Any{bad}, "r"); err == nil || !strings.Contains(err.Error(), "Filename") {
		t.Errorf("invalid filter config: err %v, want Envoy's validation error about the filename", err)
	}
}

func TestParseOptionsXDS(t *testing.T) {
	o, err := parseOptions([]string{"-xds", "127.0.0.1:18000"})
	if err != nil {
		t.Fatal(err)
	}
	if o.XDS != "127.0.0.1:18000" || o.XDSResource != "sluice-ratelimit" || !strings.HasPrefix(o.NodeID, "sluice-gateway-") {
		t.Errorf("options %+v: want the resource and a hostname-based node id by default", o)
	}
	t.Setenv("SLUICE_XDS", "admin:18000")
	t.Setenv("SLUICE_NODE_ID", "edge-1")
	if o, err := parseOptions(nil); err != nil || o.XDS != "admin:18000" || o.NodeID != "edge-1" {
		t.Errorf("from the environment: %+v %v", o, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-xds", "nohostport"}, "-xds"},
		{[]string{"-xds", "127.0.0.1:18000", "-node-id", ""}, "-node-id"},
		{[]string{"-xds", "127.0.0.1:18000", "-xds-resource", ""}, "-xds-resource"},
	} {
		if _, err := parseOptions(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseOptions(%v) = %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}
