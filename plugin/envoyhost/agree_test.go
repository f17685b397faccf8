package envoyhost_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/plugin/envoyhost"
	"github.com/sluice-rl/sluice/plugin/scenario"
	"github.com/sluice-rl/sluice/plugin/wasmhost"
	"github.com/sluice-rl/sluice/plugin/wasmhost/wasmtest"
)

// probeScripts drive the probe module (plugin/wasmhost/testdata/probe)
// through ABI calls whose answers the two hosts must agree on: the
// statuses, values and CAS numbers of shared data, header-map semantics,
// properties, metrics, local replies. Each script runs on a fresh host.
var probeScripts = []struct {
	name, probe, probeResp string
	props                  map[string][]byte
}{
	{name: "shared data CAS", probe: "get k; set k v1 0; get k; set k v2 999; set k v3 1; get k; " +
		"set k v4 0; get k; set fresh x 12345; get fresh; set n 5 0; incr n; get n; set k _ 0; get k"},
	{name: "request headers", probe: "hget :path; hget X-Missing; hadd X-Up A; hadd x-up B; hget X-UP; " +
		"hrep x-up C; hpairs; hdel x-up; hget x-up; hrep x-new N; hget x-new"},
	{name: "response headers during the request phase", probe: "rget :status; radd a b; rpairs; rrep a c; rdel a"},
	{name: "response headers", probeResp: "rget :status; radd x-a 1; radd x-a 2; rrep x-a 3; rget x-a; rpairs; rdel x-a; rget x-a"},
	{name: "properties", probe: "prop node.id; prop plugin_name; prop plugin_root_id; prop plugin_vm_id; " +
		"prop1 source.address; prop source.address; propi source.port; prop request.path; prop request.url_path; " +
		"prop request.host; prop request.method; prop request.scheme; prop request.protocol; propi request.time; " +
		"prop request.nope; prop nope; setprop my.value v; prop my.value",
		props: map[string][]byte{"source.address": []byte("10.1.2.3:4567")}},
	{name: "metrics", probe: "counter c 0; counter c 2; counter c 0; gauge g 5; gauge g -7; hist h 3"},
	{name: "local reply", probe: "reply 429 x-a=1,content-type=application/json limited; reply 500 _ again"},
	{name: "local reply without body", probe: "reply 403 x-b=2 _"},
	{name: "unsupported calls", probe: "foreign nope x; close"},
}

func TestProbeAnswersAgreeWithWasmhost(t *testing.T) {
	probeWasm := wasmtest.Build(t, "./plugin/wasmhost/testdata/probe")
	probePath := module(t, "./plugin/wasmhost/testdata/probe")
	ctx := context.Background()
	for _, mode := range envoyhost.Modes {
		for _, s := range probeScripts {
			t.Run(string(mode)+"/"+s.name, func(t *testing.T) {
				req := scenario.Request{Headers: []scenario.Header{{":path", "/p?q=1"}}, Properties: s.props}
				if s.probe != "" {
					req.Headers = append(req.Headers, scenario.Header{"x-probe", s.probe})
				}
				if s.probeResp != "" {
					req.Headers = append(req.Headers, scenario.Header{"x-probe-resp", s.probeResp})
				}

				eh, err := envoyhost.Starter(mode)(t, scenario.Options{WasmPath: probePath, Start: t0})
				if err != nil {
					t.Fatal(err)
				}
				got, err := eh.HTTP(0, req)
				if err != nil {
					t.Fatal(err)
				}

				wh, err := wasmhost.New(ctx, wasmhost.Config{Wasm: probeWasm, Clock: wasmhost.NewManualClock(t0),
					NodeID: envoyhost.DefaultNodeID, PluginName: envoyhost.DefaultPluginName,
					RootID: envoyhost.DefaultRootID, VMID: envoyhost.DefaultVMID})
				if err != nil {
					t.Fatal(err)
				}
				defer wh.Close(ctx)
				wreq := &wasmhost.Request{Headers: req.Headers, Properties: wasmhost.Properties{}}
				for k, v := range s.props {
					wreq.Properties[k] = v
				}
				want, err := wh.VM(0).HTTP(ctx, wreq)
				if err != nil {
					t.Fatal(err)
				}

				if g, w := summary(got.Rejected, got.Status, got.UpstreamHeaders, got.ResponseHeaders),
					summary(want.Rejected, want.Status, want.UpstreamHeaders, want.ResponseHeaders); g != w {
					t.Errorf("Envoy's host and wasmhost differ:\n envoyhost: %s\n wasmhost:  %s", g, w)
				}
			})
		}
	}
}

func summary(rejected bool, status int, up, resp []scenario.Header) string {
	var b strings.Builder
	fmt.Fprintf(&b, "rejected=%v status=%d upstream=[", rejected, status)
	for _, kv := range up {
		if strings.HasPrefix(kv[0], "x-r") || !strings.HasPrefix(kv[0], "x-probe") {
			fmt.Fprintf(&b, "%s=%q ", kv[0], kv[1])
		}
	}
	b.WriteString("] response=[")
	for _, kv := range resp {
		fmt.Fprintf(&b, "%s=%q ", kv[0], kv[1])
	}
	b.WriteString("]")
	return b.String()
}

// The lifecycle the probe logs (root and plugin start, configuration,
// on_log results, stream end, retirement of a replaced root context) must be
// the same, in the same order, across a configuration-only update.
func TestLifecycleLogsAgreeWithWasmhost(t *testing.T) {
	probeWasm := wasmtest.Build(t, "./plugin/wasmhost/testdata/probe")
	probePath := module(t, "./plugin/wasmhost/testdata/probe")
	ctx := context.Background()
	req := scenario.Request{Headers: []scenario.Header{{"x-probe-log", "hget :path; rget :status; hadd x y"}}}
	for _, mode := range envoyhost.Modes {
		t.Run(string(mode), func(t *testing.T) {
			eh, err := envoyhost.Starter(mode)(t, scenario.Options{WasmPath: probePath, Config: []byte("log-start first"), Start: t0})
			if err != nil {
				t.Fatal(err)
			}
			wh, err := wasmhost.New(ctx, wasmhost.Config{Wasm: probeWasm, PluginConfig: []byte("log-start first"),
				Clock: wasmhost.NewManualClock(t0), NodeID: envoyhost.DefaultNodeID, PluginName: envoyhost.DefaultPluginName,
				RootID: envoyhost.DefaultRootID, VMID: envoyhost.DefaultVMID})
			if err != nil {
				t.Fatal(err)
			}
			defer wh.Close(ctx)
			steps := []func() error{
				func() error { _, err := eh.HTTP(0, req); return err },
				func() error { return eh.Reconfigure([]byte("log-start second")) },
				func() error { _, err := eh.HTTP(0, req); return err },
			}
			wsteps := []func() error{
				func() error { _, err := wh.VM(0).HTTP(ctx, &wasmhost.Request{Headers: req.Headers}); return err },
				func() error { return wh.Reconfigure(ctx, []byte("log-start second")) },
				func() error { _, err := wh.VM(0).HTTP(ctx, &wasmhost.Request{Headers: req.Headers}); return err },
			}
			for i := range steps {
				if err := steps[i](); err != nil {
					t.Fatalf("envoyhost step %d: %v", i, err)
				}
				if err := wsteps[i](); err != nil {
					t.Fatalf("wasmhost step %d: %v", i, err)
				}
			}
			var wlogs []string
			for _, e := range wh.Logs() {
				wlogs = append(wlogs, e.String())
			}
			if g, w := strings.Join(eh.Logs(), "\n"), strings.Join(wlogs, "\n"); g != w {
				t.Errorf("logs differ\nenvoyhost:\n%s\nwasmhost:\n%s", g, w)
			}
		})
	}
}
