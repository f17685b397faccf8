package xds

import (
	"bytes"
	"slices"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	wasmfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
)

// vmConfigBytes returns the pushed vm_config, serialized deterministically.
func vmConfigBytes(t *testing.T, resp *discovery.DiscoveryResponse) []byte {
	t.Helper()
	var tec core.TypedExtensionConfig
	if err := resp.GetResources()[0].UnmarshalTo(&tec); err != nil {
		t.Fatal(err)
	}
	var w wasmfilter.Wasm
	if err := tec.GetTypedConfig().UnmarshalTo(&w); err != nil {
		t.Fatal(err)
	}
	if err := w.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	env := w.GetConfig().GetVmConfig().GetEnvironmentVariables()
	if env.GetKeyValues()["SLUICE_TELEMETRY_TOKEN"] != "tel-token-0123456789" || !slices.Equal(env.GetHostEnvKeys(), []string{"GOGC"}) {
		t.Fatalf("environment_variables %v", env)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(w.GetConfig().GetVmConfig())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestVMEnvIsPushedAndVMConfigNeverChanges: the VM environment (the
// telemetry token) travels in vm_config, and vm_config is byte for byte
// the same in every push, whatever the policy: a different vm_config would
// make Envoy start a new VM and lose every bucket.
func TestVMEnvIsPushedAndVMConfigNeverChanges(t *testing.T) {
	s := NewServer(nil, Options{WasmPath: "/opt/sluice/ratelimit.wasm", VMEnv: VMEnv{
		KeyValues:   map[string]string{"SLUICE_TELEMETRY_TOKEN": "tel-token-0123456789", "A": "1", "B": "2", "C": "3"},
		HostEnvKeys: []string{"GOGC"},
	}})
	addr := startServer(t, s)
	publish(t, s, 1, policyA)
	c := newADSClient(t, addr, "envoy-1")
	c.send("", "", "")
	first := c.recv()
	firstVM := vmConfigBytes(t, first)
	c.send("1", first.GetNonce(), "")
	for n, p := range []string{policyB, policyC, policyA} {
		publish(t, s, int64(n+2), p)
		resp := c.recv()
		if pluginConfig(t, resp) != p {
			t.Fatalf("push %d: wrong policy", n+2)
		}
		if got := vmConfigBytes(t, resp); !bytes.Equal(got, firstVM) {
			t.Fatalf("push %d: vm_config changed:\n%x\n%x", n+2, got, firstVM)
		}
		c.send(resp.GetVersionInfo(), resp.GetNonce(), "")
	}
}

func TestNoVMEnvPushesNoEnvironment(t *testing.T) {
	w, err := WasmFilter("x", "/x.wasm", VMEnv{}, []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	if w.GetConfig().GetVmConfig().GetEnvironmentVariables() != nil {
		t.Fatal("environment_variables set without a VMEnv")
	}
}
