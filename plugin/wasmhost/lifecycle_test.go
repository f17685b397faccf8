package wasmhost

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestStartupOrderAndConfig(t *testing.T) {
	var echo bytes.Buffer
	h := newHost(t, Config{
		Clock: NewManualClock(t0), VMs: 2,
		PluginConfig: []byte("cfg-1"), VMConfig: []byte("vmcfg"),
		Env:       map[string]string{"GOGC": "400", "PROBE": "x"},
		LogWriter: &echo, LogWriterLevel: LogLevelInfo,
	})
	var seq []string
	for _, l := range h.Logs() {
		if l.VM == 0 {
			seq = append(seq, l.Message)
		}
	}
	want := []string{"root_create 1", `vm_start config="vmcfg"`, `plugin_start root=1 config="cfg-1"`}
	if fmt.Sprint(seq) != fmt.Sprint(want) {
		t.Fatalf("vm 0 start-up: %q, want %q", seq, want)
	}
	if got := results(t, h.VM(1), "config;vmconfig;env GOGC;env PROBE;root"); fmt.Sprint(got) != "[cfg-1 vmcfg 400 x 1]" {
		t.Fatalf("config seen by vm 1: %v", got)
	}
	if !strings.Contains(echo.String(), `[wasm vm 1 info] plugin_start root=1 config="cfg-1"`) || strings.Contains(echo.String(), "[debug]") {
		t.Fatalf("LogWriter got %q", echo.String())
	}
}

// TestReconfigure: a config-only update gives each VM a new root context,
// keeps the VMs and the shared data, and is rejected as a whole if any VM
// returns false (the old config stays in force).
func TestReconfigure(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0), VMs: 2, PluginConfig: []byte("cfg-1")})
	one(t, h.VM(0), "set bucket 42 0")
	if err := h.Reconfigure(context.Background(), []byte("cfg-2")); err != nil {
		t.Fatal(err)
	}
	for _, vm := range h.VMs() {
		if got := results(t, vm, "config;root;get bucket"); got[0] != "cfg-2" || got[1] == "1" || got[2] != "ok:42:1" {
			t.Fatalf("vm %d after reconfigure: %v (want the new config, a new root context, shared data kept)", vm.ID(), got)
		}
	}
	if n := len(logsContaining(h, "plugin_done root=1")); n != 2 {
		t.Fatalf("old root contexts got on_done %d times, want 2", n)
	}

	err := h.Reconfigure(context.Background(), []byte("reject"))
	if err == nil || !strings.Contains(err.Error(), "rejected") || !strings.Contains(err.Error(), `rejecting configuration "reject"`) {
		t.Fatalf("bad config: %v", err)
	}
	for _, vm := range h.VMs() {
		if got := results(t, vm, "config;get bucket"); fmt.Sprint(got) != "[cfg-2 ok:42:1]" {
			t.Fatalf("vm %d after a rejected update: %v", vm.ID(), got)
		}
	}
	if err := h.Reconfigure(context.Background(), []byte("cfg-3")); err != nil {
		t.Fatal(err)
	}
	if got := one(t, h.VM(1), "config"); got != "cfg-3" {
		t.Fatalf("config %q", got)
	}
}

func TestReconfigureCanary(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0), VMs: 2, PluginConfig: []byte("log-start cfg-1"), Canary: true})
	if n := len(logsContaining(h, "configured root=")); n != 3 {
		t.Fatalf("on_configure ran %d times at start, want 3 (canary + 2 workers)", n)
	}
	if l := logsContaining(h, "configured root="); l[0].VM != -1 {
		t.Fatalf("the canary should go first: %v", l)
	}
	err := h.Reconfigure(context.Background(), []byte("reject"))
	if err == nil || !strings.Contains(err.Error(), "canary") {
		t.Fatalf("canary rejection: %v", err)
	}
	if n := len(logsContaining(h, `rejecting configuration`)); n != 1 {
		t.Fatalf("workers saw the rejected config (%d rejections logged)", n)
	}
	if got := one(t, h.VM(0), "config"); got != "log-start cfg-1" {
		t.Fatalf("config %q", got)
	}
}

// TestRootDoneLater: a root context whose on_done returns false is deleted
// only after it calls proxy_done, and keeps ticking until then.
func TestRootDoneLater(t *testing.T) {
	clock := NewManualClock(t0)
	h := newHost(t, Config{Clock: clock, PluginConfig: []byte("tick=100 done-later")})
	if err := h.Reconfigure(context.Background(), []byte("cfg-2")); err != nil {
		t.Fatal(err)
	}
	if n := len(logsContaining(h, "plugin_done root=1 later=true")); n != 1 {
		t.Fatalf("on_done: %v", h.Logs())
	}
	clock.Advance(100 * time.Millisecond)
	if err := h.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(logsContaining(h, "plugin_finish root=1")); n != 1 {
		t.Fatal("the retiring root context was not ticked")
	}
	// It called proxy_done in that tick: it is gone now and ticks no more.
	clock.Advance(time.Second)
	if err := h.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := h.VM(0).Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.VM(0).enter(context.Background())
	_, alive := h.VM(0).roots[1]
	h.VM(0).leave()
	if alive {
		t.Fatal("root context 1 still alive after proxy_done")
	}
}

func TestTicks(t *testing.T) {
	clock := NewManualClock(t0)
	h := newHost(t, Config{Clock: clock, VMs: 2, PluginConfig: []byte("tick=100")})
	ticks := func() string {
		var s []string
		for _, vm := range h.VMs() {
			s = append(s, one(t, vm, "ticks"))
		}
		return strings.Join(s, ",")
	}
	tick := func() {
		if err := h.Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	tick()
	if got := ticks(); got != "0,0" {
		t.Fatalf("ticked before the period elapsed: %s", got)
	}
	clock.Advance(99 * time.Millisecond)
	tick()
	if got := ticks(); got != "0,0" {
		t.Fatalf("ticked early: %s", got)
	}
	clock.Advance(time.Millisecond)
	tick()
	tick()
	if got := ticks(); got != "1,1" {
		t.Fatalf("after 100ms: %s", got)
	}
	clock.Advance(time.Second) // no catch-up: one tick per due period
	tick()
	if got := ticks(); got != "2,2" {
		t.Fatalf("after 1s more: %s", got)
	}
	// A realtime step backwards does not stop ticks (they follow monotonic time).
	clock.Set(t0.Add(-time.Hour))
	clock.Advance(100 * time.Millisecond)
	tick()
	if got := ticks(); got != "3,3" {
		t.Fatalf("after a step back: %s", got)
	}
	// The guest may change or disable its period.
	one(t, h.VM(0), "tick-period 0")
	clock.Advance(time.Second)
	tick()
	if got := ticks(); got != "3,4" {
		t.Fatalf("after disabling on vm 0: %s", got)
	}
}

func TestStartTicker(t *testing.T) {
	h := newHost(t, Config{PluginConfig: []byte("tick=5")}) // SystemClock
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.StartTicker(ctx)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if n := atoi64(t, one(t, h.VM(0), "ticks")); n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the background ticker did not tick 3 times in 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// With a ManualClock the ticker follows the clock.
	clock := NewManualClock(t0)
	h2 := newHost(t, Config{Clock: clock, PluginConfig: []byte("tick=1000")})
	h2.StartTicker(ctx)
	time.Sleep(30 * time.Millisecond)
	if got := one(t, h2.VM(0), "ticks"); got != "0" {
		t.Fatalf("ticked with a frozen clock: %s", got)
	}
	clock.Advance(time.Second)
	deadline = time.Now().Add(5 * time.Second)
	for one(t, h2.VM(0), "ticks") != "1" {
		if time.Now().After(deadline) {
			t.Fatal("no tick after advancing the manual clock")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestOldRootKeptForInFlightStreams: after an update, a paused stream of the
// old configuration is still served by its root context (Envoy keeps it
// alive until the stream ends: here its on_tick resumes the stream); the old
// root context is retired after the stream.
func TestOldRootKeptForInFlightStreams(t *testing.T) {
	clock := NewManualClock(t0)
	h := newHost(t, Config{Clock: clock, PluginConfig: []byte("tick=10 cfg-1")})
	res := run(t, h.VM(0), "pause;resume-on-tick")
	if err := h.Reconfigure(context.Background(), []byte("cfg-2")); err != nil {
		t.Fatal(err)
	}
	if n := len(logsContaining(h, "plugin_done root=1")); n != 0 {
		t.Fatal("old root context retired while a stream still uses it")
	}
	clock.Advance(10 * time.Millisecond)
	if err := h.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	final, err := res.Stream.Complete(ctxTimeout(t), nil)
	if err != nil || final.Status != 200 {
		t.Fatalf("old stream: %+v %v", final, err)
	}
	if n := len(logsContaining(h, "plugin_done root=1")); n != 1 {
		t.Fatalf("old root context not retired after its last stream: %v", h.Logs())
	}
	if got := one(t, h.VM(0), "config"); got != "cfg-2" {
		t.Fatalf("config %q", got)
	}
}

// TestReconfigureRunsVMStartOnTheNewRootContext: proxy-wasm-cpp-host starts
// every new root context with proxy_on_context_create, proxy_on_vm_start and
// proxy_on_configure (WasmBase::start, ContextBase::onStart), so a
// configuration-only update runs on_vm_start again on each VM, before
// on_configure; one returning false rejects the update.
func TestReconfigureRunsVMStartOnTheNewRootContext(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0), VMs: 2, PluginConfig: []byte("cfg-1"), VMConfig: []byte("vmcfg")})
	if err := h.Reconfigure(context.Background(), []byte("cfg-2")); err != nil {
		t.Fatal(err)
	}
	for vm := 0; vm < 2; vm++ {
		var seq []string
		for _, l := range h.Logs() {
			if l.VM == vm && (strings.HasPrefix(l.Message, "vm_start") || strings.HasPrefix(l.Message, "plugin_start")) {
				seq = append(seq, l.Message)
			}
		}
		want := []string{`vm_start config="vmcfg"`, `plugin_start root=1 config="cfg-1"`,
			`vm_start config="vmcfg"`, `plugin_start root=2 config="cfg-2"`}
		if fmt.Sprint(seq) != fmt.Sprint(want) {
			t.Fatalf("vm %d: %q, want %q", vm, seq, want)
		}
	}

	rejecting := newHost(t, Config{Clock: NewManualClock(t0), PluginConfig: []byte("cfg-1")})
	rejecting.cfg.VMConfig = []byte("vm-reject") // what the new root's on_vm_start reads
	err := rejecting.Reconfigure(context.Background(), []byte("cfg-2"))
	if err == nil || !strings.Contains(err.Error(), "proxy_on_vm_start returned false") {
		t.Fatalf("on_vm_start returning false on update: %v, want the update rejected", err)
	}
	if got := results(t, rejecting.VM(0), "config"); got[0] != "cfg-1" {
		t.Fatalf("after the rejected update the config is %v, want cfg-1", got)
	}
}

// TestCallbackResultKeptWhenItAnswersAnotherStream: a retired root
// context's on_done that answers a stream of the new root context still
// returns its own result (true: delete me), though the host ran that
// stream's on_response_headers before reading it.
func TestCallbackResultKeptWhenItAnswersAnotherStream(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0), PluginConfig: []byte("cfg-1")})
	vm := h.VM(0)
	ctx := context.Background()
	old := run(t, vm, "pause") // keeps the first root context alive
	if err := h.Reconfigure(ctx, []byte("cfg-2")); err != nil {
		t.Fatal(err)
	}
	waiting := run(t, vm, "pause; reply-on-done 429") // on the new root context
	if err := old.Stream.Reset(); err != nil {        // the first root context's last stream ends
		t.Fatal(err)
	}
	final, err := waiting.Stream.Complete(ctx, nil)
	if err != nil || final.Status != 429 {
		t.Fatalf("the waiting stream: %+v %v, want the 429 sent from on_done", final, err)
	}
	if err := vm.enter(ctx); err != nil {
		t.Fatal(err)
	}
	live := 0
	for _, r := range vm.roots {
		if !r.deleted {
			live++
		}
	}
	vm.leave()
	if live != 1 {
		t.Fatalf("%d root contexts live, want 1: the first one's on_done returned true", live)
	}
}
