package wasmhost

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost/wasmtest"
)

func TestProperties(t *testing.T) {
	clock := NewManualClock(t0)
	h := newHost(t, Config{
		Clock: clock, PluginName: "sluice", RootID: "root-a", VMID: "vm-a", NodeID: "node-1",
		Properties: Properties{"cluster_name": []byte("c1"), "source.address": []byte("host-default")},
	})
	res, err := h.VM(0).HTTP(context.Background(), &Request{
		Headers: []Header{
			{":method", "POST"}, {":path", "/a/b?q=1"}, {":authority", "api.example"}, {"x-request-id", "rid"}, {"user-agent", "ua"},
			{"x-probe", "prop plugin_name;prop plugin_root_id;prop plugin_vm_id;prop node.id;prop cluster_name;" +
				"prop source.address;propi source.port;prop request.path;prop request.url_path;prop request.host;" +
				"prop request.method;prop request.id;prop request.useragent;propi request.time;prop response.code;" +
				"prop1 source.address;prop nothing.here;setprop my.key v1;prop my.key;propmap request.headers"},
			{"x-probe-resp", "propi response.code"},
		},
		Properties:      Properties{"source.address": []byte("10.0.0.1:5555")},
		ResponseHeaders: []Header{{":status", "202"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := resultsOf(res.UpstreamHeaders, "x-r")
	want := []string{"sluice", "root-a", "vm-a", "node-1", "c1",
		"10.0.0.1:5555", "5555", "/a/b?q=1", "/a/b", "api.example",
		"POST", "rid", "ua", strconv.FormatInt(t0.UnixNano(), 10), "err:NotFound",
		"err:NotFound", "err:NotFound", "ok", "v1"}
	if fmt.Sprint(got[:len(want)]) != fmt.Sprint(want) {
		t.Fatalf("properties:\n got %q\nwant %q", got[:len(want)], want)
	}
	if !strings.HasPrefix(got[len(want)], ":scheme=http,:method=POST,:path=/a/b?q=1,:authority=api.example,x-request-id=rid") {
		t.Fatalf("request.headers: %q", got[len(want)])
	}
	if v, _ := header(res.ResponseHeaders, "x-rr0"); v != "202" {
		t.Fatalf("response.code in the response phase: %q", v)
	}
}

func TestMetrics(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0), VMs: 2})
	if got := one(t, h.VM(0), "counter reqs 1"); got != "1" {
		t.Fatalf("counter on vm 0: %s", got)
	}
	// Stats are shared by name: vm 1 increments the same counter.
	if got := one(t, h.VM(1), "counter reqs 2"); got != "3" {
		t.Fatalf("counter on vm 1: %s", got)
	}
	one(t, h.VM(0), "gauge inflight 5")
	one(t, h.VM(1), "gauge inflight -2")
	results(t, h.VM(0), "hist lat 10;hist lat 30")
	one(t, h.VM(1), "hist lat 20")
	if v, ok := h.Metric("reqs"); !ok || v != 3 {
		t.Fatalf("reqs = %d %v", v, ok)
	}
	if v, ok := h.Metric("inflight"); !ok || v != 3 {
		t.Fatalf("inflight = %d %v", v, ok)
	}
	if _, ok := h.Metric("nope"); ok {
		t.Fatal("unknown metric found")
	}
	if hs, ok := h.Histogram("lat"); !ok || hs.Count != 3 || hs.Sum != 60 || hs.Min != 10 || hs.Max != 30 {
		t.Fatalf("histogram %+v", hs)
	}
	if m := h.Metrics(); m["reqs"] != 3 || m["inflight"] != 3 || len(m) != 2 {
		t.Fatalf("metrics %v", m)
	}
	// Envoy rejects a counter increment of 0 (the SDK panics on it): the
	// probe only increments when n > 0, so this just reads.
	if got := one(t, h.VM(0), "counter reqs 0"); got != "3" {
		t.Fatalf("read: %s", got)
	}
}

func TestLogs(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0), VMs: 2, MaxLogs: 10})
	one(t, h.VM(1), "log warn something odd")
	one(t, h.VM(0), "log error it broke")
	one(t, h.VM(0), "log trace fine detail")
	warn := h.LogsAtLeast(LogLevelWarn)
	if len(warn) != 2 || warn[0] != (LogEntry{VM: 1, Level: LogLevelWarn, Message: "something odd"}) ||
		warn[1] != (LogEntry{VM: 0, Level: LogLevelError, Message: "it broke"}) {
		t.Fatalf("warn+: %v", warn)
	}
	for i := 0; i < 20; i++ {
		one(t, h.VM(0), "log info n"+strconv.Itoa(i))
	}
	logs := h.LogsAtLeast(LogLevelInfo)
	if len(h.Logs()) > 10 || logs[len(logs)-1].Message != "n19" {
		t.Fatalf("MaxLogs 10 kept %d, last %v", len(logs), logs[len(logs)-1])
	}
}

func TestSharedQueues(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0), VMs: 2, VMID: "sluice"})
	id := one(t, h.VM(0), "register q1")
	if got := one(t, h.VM(1), "resolve sluice q1"); got != id {
		t.Fatalf("resolve = %s, want %s", got, id)
	}
	if got := results(t, h.VM(1), "resolve other q1;resolve sluice nope;dequeue "+id+";enqueue 999 x"); fmt.Sprint(got) != "[err:NotFound err:NotFound err:Empty err:NotFound]" {
		t.Fatalf("queue errors: %v", got)
	}
	results(t, h.VM(1), "enqueue "+id+" a;enqueue "+id+" b")
	if err := h.Drain(ctxTimeout(t)); err != nil {
		t.Fatal(err)
	}
	// vm 0 registered the queue: its root context got on_queue_ready and drained it.
	if got := one(t, h.VM(0), "queued"); got != "a,b" {
		t.Fatalf("queued on vm 0: %q", got)
	}
	// Direct dequeue.
	one(t, h.VM(1), "enqueue "+id+" c")
	h.Drain(ctxTimeout(t))
	if got := one(t, h.VM(0), "queued"); got != "a,b,c" {
		t.Fatalf("queued: %q", got)
	}
}

func TestUnimplementedAndEffectiveContext(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0)})
	root := one(t, h.VM(0), "root")
	if got := results(t, h.VM(0), "close;effective 9999;effective "+root); fmt.Sprint(got) != "[err:Unimplemented err:BadArgument ok]" {
		t.Fatalf("got %v", got)
	}
}

// TestLargeValues moves values through guest memory that force it to grow
// (views must not be kept across allocations).
func TestLargeValues(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0)})
	big := strings.Repeat("x", 3<<20)
	h.SharedData().Set("big", []byte(big), 0)
	res := run(t, h.VM(0), "get big;hget x-big", Header{"x-big", big})
	r := resultsOf(res.UpstreamHeaders, "x-r")
	if len(r) != 2 || r[0] != "ok:"+big+":1" || r[1] != big {
		t.Fatalf("large values: lengths %d", len(r))
	}
}

// TestConcurrentVMs drives several VMs from many goroutines at once, mixing
// requests, shared data, paused streams resumed by callouts, ticks and
// metrics (run with -race: the host is native Go).
func TestConcurrentVMs(t *testing.T) {
	clock := NewManualClock(t0)
	var answered sync.WaitGroup
	handler := HTTPCallHandlerFunc(func(c *HTTPCall) {
		answered.Add(1)
		go func() {
			defer answered.Done()
			c.Respond([]Header{{":status", "200"}}, []byte("ok"))
		}()
	})
	h := newHost(t, Config{Clock: clock, VMs: 3, PluginConfig: []byte("tick=1"), HTTPCalls: handler})
	h.SharedData().Set("n", []byte("0"), 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.StartTicker(ctx)
	const goroutines, each = 6, 20
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*each)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			vm := h.VM(g % 3)
			for i := 0; i < each; i++ {
				clock.Advance(time.Millisecond)
				script := "incr n;counter c 1"
				if i%4 == 0 {
					script += ";call svc :method=GET,:path=/,:authority=a;pause"
				}
				res, err := vm.HTTP(ctx, &Request{Headers: []Header{{"x-probe", script}}})
				if err != nil {
					errs <- err
					return
				}
				if res.Paused {
					if res, err = res.Stream.Complete(ctxTimeout(t), nil); err != nil {
						errs <- err
						return
					}
					if v, _ := header(res.UpstreamHeaders, "x-call"); v != "200|ok" {
						errs <- fmt.Errorf("x-call %q", v)
					}
				}
			}
		}()
	}
	wg.Wait()
	answered.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if v, _, _ := h.SharedData().Get("n"); string(v) != strconv.Itoa(goroutines*each) {
		t.Fatalf("n = %s", v)
	}
	if v, _ := h.Metric("c"); v != goroutines*each {
		t.Fatalf("counter c = %d", v)
	}
}

func TestEmptyPluginManyVMs(t *testing.T) {
	h := newHost(t, Config{Wasm: emptyWasm(t), VMs: 3})
	for _, vm := range h.VMs() {
		res, err := vm.HTTP(context.Background(), &Request{})
		if err != nil || res.Status != 200 || res.Rejected || len(res.UpstreamHeaders) != 4 {
			t.Fatalf("vm %d: %+v %v", vm.ID(), res, err)
		}
	}
	if h.VM(3) != nil || h.VM(-1) != nil {
		t.Fatal("VM out of range is not nil")
	}
}

// TestAllocatorChoice: like Envoy (proxy-wasm-cpp-host), the host places
// returned values with the module's malloc export when it has one, else
// with proxy_on_memory_allocate. The filter exports malloc (its request
// path reads into a reused scratch, plugin/filter/hostcalls_direct.go); the
// probe has only the SDK's proxy_on_memory_allocate, and every probe test
// that reads a value goes through it.
func TestAllocatorChoice(t *testing.T) {
	cases := []struct {
		wasm   []byte
		config string
		want   string
	}{
		{wasmtest.Build(t, "./plugin"), `{"rules": [{"name": "r", "limit_keys": ["header:x-api-key"],
		  "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1}}]}`, "malloc"},
		{probeWasm(t), "", "proxy_on_memory_allocate"},
	}
	for _, c := range cases {
		h := newHost(t, Config{Wasm: c.wasm, PluginConfig: []byte(c.config)})
		if got := h.VM(0).allocator; got != c.want {
			t.Errorf("allocator = %q, want %q", got, c.want)
		}
	}
	// Data still reaches the probe through proxy_on_memory_allocate.
	h := newHost(t, Config{})
	if got := results(t, h.VM(0), "set k v 0;get k"); got[1] != "ok:v:1" {
		t.Errorf("get through proxy_on_memory_allocate: %q", got)
	}
}
