package wasmhost

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestPausedResumedOnTick: a paused request is resumed by the plugin from
// on_tick (proxy_set_effective_context + proxy_continue_stream).
func TestPausedResumedOnTick(t *testing.T) {
	clock := NewManualClock(t0)
	h := newHost(t, Config{Clock: clock, PluginConfig: []byte("tick=10")})
	vm := h.VM(0)
	res := run(t, vm, "pause;resume-on-tick")
	if !res.Paused || res.Rejected || res.UpstreamHeaders != nil {
		t.Fatalf("result %+v", res)
	}
	s := res.Stream
	if _, err := s.ResponseHeaders(nil, true); err == nil {
		t.Fatal("response headers accepted while paused")
	}
	// Other requests go on meanwhile.
	if got := one(t, vm, "ctx"); got == "" {
		t.Fatal("second request failed")
	}
	select {
	case <-s.Resumed():
		t.Fatal("resumed before the tick")
	default:
	}
	clock.Advance(10 * time.Millisecond)
	if err := h.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Resumed():
	default:
		t.Fatal("not resumed by the tick")
	}
	final, err := s.Complete(ctxTimeout(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if final.Status != 200 || final.Rejected || final.UpstreamHeaders == nil {
		t.Fatalf("final %+v", final)
	}
}

func TestPausedRepliedOnTick(t *testing.T) {
	clock := NewManualClock(t0)
	h := newHost(t, Config{Clock: clock, PluginConfig: []byte("tick=10")})
	res := run(t, h.VM(0), "pause;reply-on-tick 503", Header{"x-probe-resp", "rget :status"})
	clock.Advance(10 * time.Millisecond)
	h.Tick(context.Background())
	sr, err := res.Stream.Wait(ctxTimeout(t))
	if err != nil {
		t.Fatal(err)
	}
	if sr.Local == nil || sr.Local.Status != 503 || string(sr.Local.Body) != "tick reply" {
		t.Fatalf("wait %+v", sr)
	}
	if v, _ := header(sr.ResponseHeaders, "x-rr0"); v != "503" {
		t.Fatalf("on_response_headers did not run on the reply: %v", sr.ResponseHeaders)
	}
	if err := res.Stream.Finish(); err != nil {
		t.Fatal(err)
	}
}

// TestContinueTakesEffectAfterCallback: continue_stream inside the callback
// that returns Pause resumes the request once the callback returned.
func TestContinueTakesEffectAfterCallback(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0)})
	res := run(t, h.VM(0), "pause;resume-now")
	if res.Paused || res.Status != 200 || res.UpstreamHeaders == nil {
		t.Fatalf("result %+v", res)
	}
}

func TestResetPausedStream(t *testing.T) {
	clock := NewManualClock(t0)
	h := newHost(t, Config{Clock: clock, PluginConfig: []byte("tick=10")})
	res := run(t, h.VM(0), "pause;resume-on-tick", Header{"x-probe-log", "ctx"})
	id := res.Stream.ID()
	if err := res.Stream.Reset(); err != nil {
		t.Fatal(err)
	}
	if _, err := res.Stream.Wait(ctxTimeout(t)); !errors.Is(err, errStreamReset) {
		t.Fatalf("Wait after Reset: %v", err)
	}
	// on_log ran (Envoy logs reset streams too), then on_done/on_delete.
	if l := logsContaining(h, fmt.Sprintf("log-results: %d", id)); len(l) != 1 {
		t.Fatalf("on_log after reset: %v", h.Logs())
	}
	// The plugin's later attempt to resume the deleted context fails softly.
	clock.Advance(10 * time.Millisecond)
	if err := h.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l := logsContaining(h, "tick: set effective context"); len(l) != 1 {
		t.Fatalf("expected the plugin to be told the context is gone: %v", h.Logs())
	}
}

// TestPhasedStream drives a stream callback by callback, as a gateway does.
func TestPhasedStream(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0)})
	s, err := h.VM(0).NewStream(context.Background(), Properties{"source.address": []byte("10.1.2.3:4567")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ResponseHeaders(nil, true); err == nil {
		t.Fatal("response before request accepted")
	}
	r, err := s.RequestHeaders([]Header{{":method", "GET"}, {":path", "/p"}, {"X-Probe", "prop source.address;hadd x-y 1"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if r.Action != ActionContinue || r.Local != nil || fmt.Sprint(resultsOf(r.Headers, "x-r")) != "[10.1.2.3:4567 ok]" {
		t.Fatalf("request: %+v", r)
	}
	if _, err := s.RequestHeaders(nil, true); err == nil {
		t.Fatal("request headers twice")
	}
	r, err = s.ResponseHeaders([]Header{{":status", "404"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if r.Action != ActionContinue || statusOf(r.Headers) != 404 {
		t.Fatalf("response: %+v", r)
	}
	if sr, err := s.Wait(ctxTimeout(t)); err != nil || sr.Action != ActionContinue {
		t.Fatalf("wait on a continued stream: %+v %v", sr, err)
	}
	if err := s.Finish(); err != nil {
		t.Fatal(err)
	}
}

func TestCloseFailsPaused(t *testing.T) {
	h, err := New(context.Background(), Config{Wasm: probeWasm(t), Clock: NewManualClock(t0)})
	if err != nil {
		t.Fatal(err)
	}
	res := run(t, h.VM(0), "pause")
	if err := h.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := res.Stream.Wait(ctxTimeout(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Wait after Close: %v", err)
	}
	if _, err := h.VM(0).HTTP(context.Background(), &Request{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("HTTP after Close: %v", err)
	}
	if err := h.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
