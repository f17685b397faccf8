package wasmhost

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestHTTPCallRoundTrip: a request dispatches a callout and pauses; the call
// waits in PendingCalls; the answer reaches on_http_call_response on the VM,
// which records it in the request and resumes the request.
func TestHTTPCallRoundTrip(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0), VMs: 2})
	vm := h.VM(1)
	res := run(t, vm, "call auth :method=POST,:path=/check,:authority=auth.local,x-k=v 250 payload;pause")
	if !res.Paused || res.Stream == nil {
		t.Fatalf("result %+v, want paused", res)
	}
	calls := h.PendingCalls()
	if len(calls) != 1 {
		t.Fatalf("pending calls: %v", calls)
	}
	c := calls[0]
	if c.VM != 1 || c.Cluster != "auth" || string(c.Body) != "payload" || c.Timeout != 250*time.Millisecond ||
		c.Header(":path") != "/check" || c.Header("x-k") != "v" || c.ID == 0 {
		t.Fatalf("call %+v", c)
	}
	select {
	case <-res.Stream.Resumed():
		t.Fatal("resumed before the answer")
	default:
	}
	if err := c.Respond([]Header{{":status", "200"}, {"X-Reply", "r"}}, []byte("allowed")); err != nil {
		t.Fatal(err)
	}
	if err := c.Respond(nil, nil); err == nil {
		t.Fatal("answered twice")
	}
	if err := c.Wait(ctxTimeout(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-res.Stream.Resumed():
	case <-time.After(5 * time.Second):
		t.Fatal("not resumed after the answer")
	}
	final, err := res.Stream.Complete(ctxTimeout(t), []Header{{":status", "204"}})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := header(final.UpstreamHeaders, "x-call"); v != "200|allowed" {
		t.Fatalf("x-call = %q (upstream %v)", v, final.UpstreamHeaders)
	}
	if final.Status != 204 || final.Rejected {
		t.Fatalf("final %+v", final)
	}
	if len(h.PendingCalls()) != 0 {
		t.Fatal("call still pending")
	}
}

func TestHTTPCallLocalReplyFromCallback(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0)})
	res := run(t, h.VM(0), "call authz :method=GET,:path=/,:authority=a;pause", Header{"x-probe-resp", "rget x-from"})
	c := h.PendingCalls()[0]
	c.Respond([]Header{{":status", "403"}}, nil)
	sr, err := res.Stream.Wait(ctxTimeout(t))
	if err != nil {
		t.Fatal(err)
	}
	if sr.Local == nil || sr.Local.Status != 403 {
		t.Fatalf("wait: %+v", sr)
	}
	// The reply went through on_response_headers (x-rr0 = what it saw).
	if v, _ := header(sr.ResponseHeaders, "x-rr0"); v != "callout" {
		t.Fatalf("reply headers %v", sr.ResponseHeaders)
	}
	select {
	case <-res.Stream.Resumed():
		t.Fatal("Resumed closed for a local reply")
	default:
	}
	final, err := res.Stream.Complete(ctxTimeout(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !final.Rejected || final.Status != 403 {
		t.Fatalf("final %+v", final)
	}
}

func TestHTTPCallFailAndTimeout(t *testing.T) {
	clock := NewManualClock(t0)
	h := newHost(t, Config{Clock: clock})
	vm := h.VM(0)
	res := run(t, vm, "call c :method=GET,:path=/,:authority=a;pause")
	if err := h.PendingCalls()[0].Fail(); err != nil {
		t.Fatal(err)
	}
	final, err := res.Stream.Complete(ctxTimeout(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := header(final.UpstreamHeaders, "x-call"); v != "failed" {
		t.Fatalf("failure: x-call = %q", v)
	}

	// Timeout: Envoy answers 504 from its router; delivered by Tick once
	// the (monotonic) deadline passed.
	res = run(t, vm, "call c :method=GET,:path=/,:authority=a 100;pause")
	c := h.PendingCalls()[0]
	clock.Advance(99 * time.Millisecond)
	h.Tick(context.Background())
	if len(h.PendingCalls()) != 1 {
		t.Fatal("timed out early")
	}
	clock.Advance(time.Millisecond)
	if err := h.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	final, err = res.Stream.Complete(ctxTimeout(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := header(final.UpstreamHeaders, "x-call"); v != "504|upstream request timeout" {
		t.Fatalf("timeout: x-call = %q", v)
	}
	if err := c.Respond(nil, nil); err == nil {
		t.Fatal("Respond after the timeout succeeded")
	}
}

func TestHTTPCallValidation(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0), Clusters: []string{"known"}})
	got := results(t, h.VM(0), strings.Join([]string{
		"call known :path=/,:authority=a",               // no :method
		"call known :method=GET,:authority=a",           // no :path
		"call known :method=GET,:path=/",                // no :authority
		"call unknown :method=GET,:path=/,:authority=a", // unknown cluster
		"call known :method=GET,:path=/,:authority=a",
	}, ";"))
	if fmt.Sprint(got[:4]) != "[err:BadArgument err:BadArgument err:BadArgument err:BadArgument]" || !strings.HasPrefix(got[4], "ok:") {
		t.Fatalf("validation: %v", got)
	}
	if len(h.PendingCalls()) != 1 {
		t.Fatalf("pending %d", len(h.PendingCalls()))
	}
}

// TestHTTPCallHandler: a handler answering synchronously inside
// HandleHTTPCall still gets the answer delivered after the dispatching
// callback (never re-entrantly).
func TestHTTPCallHandler(t *testing.T) {
	var seen []string
	handler := HTTPCallHandlerFunc(func(c *HTTPCall) {
		seen = append(seen, c.Cluster+c.Header(":path"))
		c.Respond([]Header{{":status", "200"}}, []byte("from-handler"))
	})
	h := newHost(t, Config{Clock: NewManualClock(t0), HTTPCalls: handler})
	res := run(t, h.VM(0), "call svc :method=GET,:path=/x,:authority=a;pause")
	if !res.Paused {
		t.Fatalf("the answer was delivered inside the dispatching callback: %+v", res)
	}
	final, err := res.Stream.Complete(ctxTimeout(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := header(final.UpstreamHeaders, "x-call"); v != "200|from-handler" || !slices.Equal(seen, []string{"svc/x"}) {
		t.Fatalf("x-call %q, handler saw %v", v, seen)
	}
}

// TestCallAfterRootRetired: Envoy cancels a root context's callouts when the
// root context goes away; the answer is not delivered.
func TestCallAfterRootRetired(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0)})
	one(t, h.VM(0), "call c :method=GET,:path=/,:authority=a")
	c := h.PendingCalls()[0]
	if err := h.Reconfigure(context.Background(), []byte("v2")); err != nil {
		t.Fatal(err)
	}
	if err := c.Respond(nil, nil); err == nil {
		t.Fatal("answering a cancelled call succeeded")
	}
	if err := c.Wait(ctxTimeout(t)); err == nil {
		t.Fatal("Wait on a cancelled call succeeded")
	}
	if len(h.PendingCalls()) != 0 {
		t.Fatal("cancelled call still pending")
	}
}

// TestHTTPCallIDsAsProxyWasmCppHost: callout ids are 4, 8, 12, ... as
// proxy-wasm-cpp-host's WasmBase::nextHttpCallId hands them to Envoy (the low
// two bits are the callout type, 0 for an HTTP call), per VM.
func TestHTTPCallIDsAsProxyWasmCppHost(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0), VMs: 2})
	got := results(t, h.VM(0), "call a :method=GET,:path=/,:authority=a;call a :method=GET,:path=/,:authority=a;"+
		"call a :method=GET,:path=/,:authority=a")
	if fmt.Sprint(got) != "[ok:4 ok:8 ok:12]" {
		t.Fatalf("callout ids on VM 0: %v, want [ok:4 ok:8 ok:12]", got)
	}
	if got := results(t, h.VM(1), "call a :method=GET,:path=/,:authority=a"); fmt.Sprint(got) != "[ok:4]" {
		t.Fatalf("first callout id on VM 1: %v, want [ok:4]", got)
	}
	for _, c := range h.PendingCalls() {
		if c.ID%4 != 0 {
			t.Fatalf("call %+v: id not a multiple of 4", c)
		}
	}
}

// TestTimeoutsAndTicksFireInTheOrderTheyFellDue: after the clock jumped
// past both, a call's timeout and a root context's tick are delivered in
// the order of their due times (x-call-ticks counts the ticks the call's
// answer saw), as an event loop fires its timers after a stall.
func TestTimeoutsAndTicksFireInTheOrderTheyFellDue(t *testing.T) {
	clock := NewManualClock(t0)
	h := newHost(t, Config{Clock: clock, PluginConfig: []byte("tick=100")})
	vm := h.VM(0)
	for _, c := range []struct {
		timeout   string
		advance   time.Duration
		wantTicks string
	}{
		{"30", 150 * time.Millisecond, "0"},  // timeout at 30 ms, tick at 100 ms
		{"200", 250 * time.Millisecond, "2"}, // tick at 250 ms, timeout at 350 ms
	} {
		res := run(t, vm, "call c :method=GET,:path=/,:authority=a "+c.timeout+";pause")
		clock.Advance(c.advance)
		if err := h.Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
		final, err := res.Stream.Complete(ctxTimeout(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := header(final.UpstreamHeaders, "x-call"); v != "504|upstream request timeout" {
			t.Fatalf("timeout %s ms: x-call = %q", c.timeout, v)
		}
		if v, _ := header(final.UpstreamHeaders, "x-call-ticks"); v != c.wantTicks {
			t.Errorf("timeout %s ms: the answer saw %s ticks, want %s", c.timeout, v, c.wantTicks)
		}
	}
}
