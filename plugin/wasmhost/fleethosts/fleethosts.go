// Package fleethosts runs several Envoy-like processes (wasmhost Hosts of
// the compiled plugin, several VMs each) that call a rate limit service
// over the network, for fleet-mode tests: the plugin's own tests against a
// fake RLS on a ManualClock, and the end-to-end tests against the admin's
// RLS on Redis (or envoyproxy/ratelimit) on the real clock.
//
// Cluster "rls" is the rate limit service, called through netcall (HTTP/2
// over cleartext for an h2c:// URL); cluster "admin" (telemetry reports)
// is answered 200 in-process and its bodies are kept in Reports.
package fleethosts

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
	"github.com/sluice-rl/sluice/plugin/wasmhost/netcall"
	"github.com/sluice-rl/sluice/plugin/wasmhost/wasmtest"
)

// Options describe a fleet.
type Options struct {
	Config string // the plugin configuration; its fleet.cluster must be "rls"
	RLS    string // the rate limit service's URL, e.g. h2c://127.0.0.1:18081
	Hosts  int    // Envoy processes, named node-0, node-1, ...
	VMs    int    // worker VMs per process (default 2)
	// Clock is shared by every host: a ManualClock (drive it with Step),
	// or nil for the system clock (start the hosts' tickers with
	// StartTickers, or call Tick).
	Clock wasmhost.Clock
}

// Fleet is the running hosts.
type Fleet struct {
	t       testing.TB
	Clock   wasmhost.Clock
	Hosts   []*wasmhost.Host
	Reports chan []byte // telemetry reports, at most 64 kept

	calls sync.WaitGroup // RLS calls dispatched and not yet delivered
}

// tracker counts RLS calls until their answer reached the plugin, so
// that Wait can tell when the fleet is quiet.
type tracker struct {
	inner   wasmhost.HTTPCallHandler
	calls   *sync.WaitGroup
	reports chan<- []byte
}

func (h tracker) HandleHTTPCall(c *wasmhost.HTTPCall) {
	if c.Cluster == "admin" {
		select {
		case h.reports <- c.Body:
		default:
		}
		_ = c.Respond([]wasmhost.Header{{":status", "200"}}, nil)
		return
	}
	h.calls.Add(1)
	go func() { <-c.Done(); h.calls.Done() }()
	h.inner.HandleHTTPCall(c)
}

// Start starts the hosts; they are closed when the test ends.
func Start(t testing.TB, o Options) *Fleet {
	t.Helper()
	cl, err := netcall.ParseClusters([]string{"rls=" + o.RLS})
	if err != nil {
		t.Fatal(err)
	}
	if o.VMs == 0 {
		o.VMs = 2
	}
	if o.Clock == nil {
		o.Clock = wasmhost.SystemClock()
	}
	f := &Fleet{t: t, Clock: o.Clock, Reports: make(chan []byte, 64)}
	client := netcall.New(context.Background(), cl, nil)
	wasm := wasmtest.Build(t, "./plugin")
	for i := range o.Hosts {
		h, err := wasmhost.New(context.Background(), wasmhost.Config{
			Wasm:         wasm,
			PluginConfig: []byte(o.Config),
			VMs:          o.VMs,
			Clock:        o.Clock,
			HTTPCalls:    tracker{client, &f.calls, f.Reports},
			Clusters:     []string{"rls", "admin"},
			Properties:   wasmhost.Properties{"node.id": []byte("node-" + strconv.Itoa(i))},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Close(context.Background()) })
		f.Hosts = append(f.Hosts, h)
	}
	return f
}

// StartTickers runs every host's on_tick in the background on its clock,
// as Envoy's timers do, until the test ends.
func (f *Fleet) StartTickers() {
	ctx, cancel := context.WithCancel(context.Background())
	f.t.Cleanup(cancel)
	for _, h := range f.Hosts {
		h.StartTicker(ctx)
	}
}

// Wait blocks until every RLS call dispatched so far was answered and
// delivered to the plugin.
func (f *Fleet) Wait() {
	f.t.Helper()
	done := make(chan struct{})
	go func() { f.calls.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		f.t.Fatal("RLS calls not answered within 20 s")
	}
}

// Tenant builds a request of tenant (header x-tenant).
func Tenant(tenant string) *wasmhost.Request {
	return &wasmhost.Request{
		Headers:    []wasmhost.Header{{"x-tenant", tenant}},
		Properties: wasmhost.Properties{"source.address": []byte("10.0.0.1:5555")},
	}
}

// Request sends one request of tenant to host h, VM vm, waits for it to
// be decided (a paused request waits for its RLS call) and reports
// whether it was admitted.
func (f *Fleet) Request(h, vm int, tenant string) bool {
	f.t.Helper()
	return f.Send(h, vm, Tenant(tenant))
}

// Send is Request for a request of your own (one with the upstream's
// response headers, say).
func (f *Fleet) Send(h, vm int, req *wasmhost.Request) bool {
	f.t.Helper()
	res, err := f.Hosts[h].VM(vm).HTTP(context.Background(), req)
	if err != nil {
		f.t.Fatalf("host %d vm %d: %v", h, vm, err)
	}
	if res.Paused {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		res, err = res.Stream.CompleteWith(ctx, req)
		if err != nil {
			f.t.Fatalf("host %d vm %d: paused request: %v", h, vm, err)
		}
	}
	return !res.Rejected
}

// Tick runs every host's due on_tick, then waits for the syncs they sent.
func (f *Fleet) Tick() {
	f.t.Helper()
	for i, h := range f.Hosts {
		if err := h.Tick(context.Background()); err != nil {
			f.t.Fatalf("host %d: tick: %v", i, err)
		}
	}
	f.Wait()
}

// Step advances the ManualClock by d, then Ticks.
func (f *Fleet) Step(d time.Duration) {
	f.t.Helper()
	f.Clock.(*wasmhost.ManualClock).Advance(d)
	f.Tick()
}

// Metric sums a plugin metric over the hosts (VMs of a host share it).
func (f *Fleet) Metric(name string) uint64 {
	var sum uint64
	for _, h := range f.Hosts {
		v, _ := h.Metric(name)
		sum += v
	}
	return sum
}

// CheckNoTraps fails the test if any host recovered a panic in the plugin
// or has a VM broken by a trap.
func (f *Fleet) CheckNoTraps() {
	f.t.Helper()
	for i, h := range f.Hosts {
		if v, _ := h.Metric("sluice.panics_recovered"); v != 0 {
			f.t.Fatalf("host %d recovered %d panics: %v", i, v, h.LogsAtLeast(wasmhost.LogLevelWarn))
		}
		for j, vm := range h.VMs() {
			if err := vm.Err(); err != nil {
				f.t.Fatalf("host %d vm %d broken: %v", i, j, err)
			}
		}
	}
}
