// Package netcalltest runs the compiled plugin in the wasmhost test host
// with its dispatch_http_call answered for real by netcall (the clusters the
// development gateway gives it), for tests on either side of the project:
// the gateway's own, and the admin's end-to-end tests against a real admin.
package netcalltest

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
	"github.com/sluice-rl/sluice/plugin/wasmhost/netcall"
	"github.com/sluice-rl/sluice/plugin/wasmhost/wasmtest"
)

// Host runs the plugin (built once by wasmtest) with config on vms VMs of
// node "gw-1", its calls answered by netcall for the given clusters (name
// to URL); every call is also sent on the returned channel, so a test can
// wait for its delivery. The clock starts on a whole second.
func Host(t *testing.T, config string, vms int, clusters map[string]string) (*wasmhost.Host, *wasmhost.ManualClock, chan *wasmhost.HTTPCall) {
	t.Helper()
	specs := []string{}
	for n, u := range clusters {
		specs = append(specs, n+"="+u)
	}
	cl, err := netcall.ParseClusters(specs)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	co := netcall.New(ctx, cl, slog.New(slog.NewTextHandler(io.Discard, nil)))
	calls := make(chan *wasmhost.HTTPCall, 64)
	clock := wasmhost.NewManualClock(time.Now().Truncate(time.Second))
	h, err := wasmhost.New(context.Background(), wasmhost.Config{
		Wasm: wasmtest.Build(t, "./plugin"), PluginConfig: []byte(config), VMs: vms, Clock: clock,
		NodeID: "gw-1", Clusters: co.Names(),
		HTTPCalls: wasmhost.HTTPCallHandlerFunc(func(c *wasmhost.HTTPCall) {
			co.HandleHTTPCall(c)
			calls <- c
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	return h, clock, calls
}

// TickAndWait advances the clock a second, ticks every VM, and waits until
// n calls were answered and delivered to the plugin.
func TickAndWait(t *testing.T, h *wasmhost.Host, clock *wasmhost.ManualClock, calls chan *wasmhost.HTTPCall, n int) {
	t.Helper()
	clock.Advance(time.Second)
	if err := h.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < n; i++ {
		select {
		case c := <-calls:
			if err := c.Wait(ctx); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatalf("only %d of %d calls", i, n)
		}
	}
}
